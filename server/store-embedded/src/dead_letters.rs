//! Dead letters: one partition per (service, day), rows by (dead_at, transaction_id).

use async_trait::async_trait;
use futures::StreamExt;

use super::{
    expiry,
    keys::{Dec, Enc, Key, KeyReader, Table},
    EmbeddedStore,
};
use rebound_store::{DeadLetter, DeadLetterRow, DeadLetterStore, StoreResult};

impl EmbeddedStore {
    fn letter_day(&self, service: &str, day: i32) -> Key {
        self.key(Table::DeadLetters).str(service).i32(day)
    }
}

fn encode(d: &DeadLetter, redriven_at_ms: Option<i64>) -> Vec<u8> {
    Enc::new()
        .u32(d.attempt)
        .str(&d.last_error)
        .i64(d.generation)
        .opt_i64(redriven_at_ms)
        .into_bytes()
}

#[async_trait]
impl DeadLetterStore for EmbeddedStore {
    async fn put_dead_letter(&self, d: &DeadLetter, ttl_seconds: u32) -> StoreResult<()> {
        let key = self
            .letter_day(&d.service, d.day)
            .i64(d.dead_at_ms)
            .str(&d.transaction_id);
        let d = d.clone();
        // An INSERT leaves `redriven_at` as it was.
        self.blocking(move |i| {
            i.write(|w| {
                let redriven = match w.get(key.as_bytes())? {
                    Some(v) => {
                        let mut dec = Dec::new(&v);
                        dec.u32()?;
                        dec.str()?;
                        dec.i64()?;
                        dec.opt_i64()?
                    }
                    None => None,
                };
                let exp = expiry(w.now_ms, Some(ttl_seconds));
                w.put(key.as_bytes(), &encode(&d, redriven), exp)
            })
        })
        .await
    }

    async fn stream_dead_letters(
        &self,
        service: &str,
        day: i32,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<futures::stream::BoxStream<'static, StoreResult<DeadLetterRow>>> {
        let prefix = self.letter_day(service, day);
        let n = prefix.as_bytes().len();
        let service = service.to_string();
        if from_ms >= to_ms {
            return Ok(futures::stream::empty().boxed());
        }
        // Only the clustering range [from, to) is read, as Cassandra restricts it.
        let from = prefix.clone().i64(from_ms).into_bytes();
        let to = prefix.i64(to_ms).into_bytes();
        Ok(self.stream_range(from, Some(to), move |k, v| {
            let mut r = KeyReader::after(k, n)?;
            let dead_at_ms = r.i64()?;
            let transaction_id = r.str()?;
            let mut d = Dec::new(v);
            Ok(DeadLetterRow {
                letter: DeadLetter {
                    service: service.clone(),
                    transaction_id,
                    day,
                    dead_at_ms,
                    attempt: d.u32()?,
                    last_error: d.str()?,
                    generation: d.i64()?,
                },
                redriven_at_ms: d.opt_i64()?,
            })
        }))
    }

    async fn mark_redriven(&self, d: &DeadLetter, now: i64) -> StoreResult<()> {
        let key = self
            .letter_day(&d.service, d.day)
            .i64(d.dead_at_ms)
            .str(&d.transaction_id);
        let d = d.clone();
        self.blocking(move |i| {
            i.write(|w| {
                // The mark lives as long as the letter; a letter already gone stays gone.
                let Some((v, exp)) = w.get_with_expiry(key.as_bytes())? else {
                    return Ok(());
                };
                let mut dec = Dec::new(&v);
                let letter = DeadLetter {
                    attempt: dec.u32()?,
                    last_error: dec.str()?,
                    generation: dec.i64()?,
                    ..d.clone()
                };
                w.put(key.as_bytes(), &encode(&letter, Some(now)), exp)
            })
        })
        .await
    }

    async fn delete_dead_letter_day(&self, service: &str, day: i32) -> StoreResult<()> {
        self.delete_partition(self.letter_day(service, day)).await
    }

    async fn delete_dead_letter_range(
        &self,
        service: &str,
        day: i32,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<()> {
        if from_ms >= to_ms {
            return Ok(());
        }
        let part = self.letter_day(service, day);
        let from = part.clone().i64(from_ms).into_bytes();
        let to = part.i64(to_ms).into_bytes();
        self.blocking(move |i| i.write(|w| w.delete_range(&from, Some(to))))
            .await
    }
}
