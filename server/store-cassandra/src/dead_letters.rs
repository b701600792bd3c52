//! Dead letters: one partition per (service, day), rows by (dead_at, transaction_id).

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use scylla::{statement::prepared::PreparedStatement, value::CqlTimestamp};

use super::{cql_date, CassandraStore, Prep};
use rebound_store::{DeadLetter, DeadLetterRow, DeadLetterStore, StoreResult};

/// The statements of this group, prepared once.
pub(super) struct Statements {
    put_dead_letter: PreparedStatement,
    list_dead_letters: PreparedStatement,
    mark_redriven: PreparedStatement,
    letter_ttl: PreparedStatement,
    delete_dead_letter_day: PreparedStatement,
    delete_dead_letter_range: PreparedStatement,
}

impl Statements {
    pub(super) async fn prepare(p: &Prep) -> StoreResult<Self> {
        let ks = p.ks();
        Ok(Self {
            put_dead_letter: p
                .prepare(format!(
                    "INSERT INTO {ks}.dead_letters (region, cluster, service, day, dead_at, \
                 transaction_id, attempt, last_error, generation) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
                ))
                .await?,
            list_dead_letters: p
                .prepare(format!(
                    "SELECT dead_at, transaction_id, attempt, last_error, generation, redriven_at \
                 FROM {ks}.dead_letters WHERE region = ? AND cluster = ? AND service = ? \
                 AND day = ? AND dead_at >= ? AND dead_at < ?"
                ))
                .await?,
            mark_redriven: p
                .prepare(format!(
                "UPDATE {ks}.dead_letters USING TTL ? SET redriven_at = ? WHERE region = ? \
                 AND cluster = ? AND service = ? AND day = ? AND dead_at = ? AND transaction_id = ?"
            ))
                .await?,
            letter_ttl: p
                .prepare(format!(
                    "SELECT TTL(attempt) FROM {ks}.dead_letters WHERE region = ? AND cluster = ? \
                 AND service = ? AND day = ? AND dead_at = ? AND transaction_id = ?"
                ))
                .await?,
            delete_dead_letter_day: p
                .prepare(format!(
                "DELETE FROM {ks}.dead_letters WHERE region = ? AND cluster = ? AND service = ? \
                 AND day = ?"
            ))
                .await?,
            delete_dead_letter_range: p
                .prepare(format!(
                "DELETE FROM {ks}.dead_letters WHERE region = ? AND cluster = ? AND service = ? \
                 AND day = ? AND dead_at >= ? AND dead_at < ?"
            ))
                .await?,
        })
    }
}

#[async_trait]
impl DeadLetterStore for CassandraStore {
    async fn put_dead_letter(&self, d: &DeadLetter, ttl_seconds: u32) -> StoreResult<()> {
        self.exec(
            &self.dead_letters.put_dead_letter,
            (
                &self.region,
                &self.cluster,
                &d.service,
                cql_date(d.day),
                CqlTimestamp(d.dead_at_ms),
                &d.transaction_id,
                d.attempt as i32,
                &d.last_error,
                d.generation,
                ttl_seconds.min(i32::MAX as u32) as i32,
            ),
        )
        .await
    }

    async fn stream_dead_letters(
        &self,
        service: &str,
        day: i32,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<futures::stream::BoxStream<'static, StoreResult<DeadLetterRow>>> {
        type Row = (
            CqlTimestamp,
            String,
            Option<i32>,
            Option<String>,
            Option<i64>,
            Option<CqlTimestamp>,
        );
        let rows = self
            .pages::<Row>(
                &self.dead_letters.list_dead_letters,
                (
                    &self.region,
                    &self.cluster,
                    service,
                    cql_date(day),
                    CqlTimestamp(from_ms),
                    CqlTimestamp(to_ms),
                ),
            )
            .await?;
        let service = service.to_string();
        Ok(rows
            .map_ok(
                move |(dead_at, transaction_id, attempt, last_error, generation, redriven)| {
                    DeadLetterRow {
                        letter: DeadLetter {
                            service: service.clone(),
                            transaction_id,
                            day,
                            dead_at_ms: dead_at.0,
                            attempt: attempt.unwrap_or(0).max(0) as u32,
                            last_error: last_error.unwrap_or_default(),
                            generation: generation.unwrap_or(0),
                        },
                        redriven_at_ms: redriven.map(|t| t.0),
                    }
                },
            )
            .boxed())
    }

    async fn mark_redriven(&self, d: &DeadLetter, now: i64) -> StoreResult<()> {
        let key = (
            &self.region,
            &self.cluster,
            &d.service,
            cql_date(d.day),
            CqlTimestamp(d.dead_at_ms),
            &d.transaction_id,
        );
        // The redrive mark lives as long as the letter: an UPDATE without the letter's TTL
        // would leave the mark (and the row's key) behind once the letter expired, and one
        // on a letter already gone would make a row of nothing.
        let ttl: Vec<(Option<i32>,)> = self.collect(&self.dead_letters.letter_ttl, key).await?;
        let Some((ttl,)) = ttl.into_iter().next() else {
            return Ok(());
        };
        self.exec(
            &self.dead_letters.mark_redriven,
            (
                ttl.unwrap_or(0).max(0),
                CqlTimestamp(now),
                &self.region,
                &self.cluster,
                &d.service,
                cql_date(d.day),
                CqlTimestamp(d.dead_at_ms),
                &d.transaction_id,
            ),
        )
        .await
    }

    async fn delete_dead_letter_day(&self, service: &str, day: i32) -> StoreResult<()> {
        self.exec(
            &self.dead_letters.delete_dead_letter_day,
            (&self.region, &self.cluster, service, cql_date(day)),
        )
        .await
    }

    async fn delete_dead_letter_range(
        &self,
        service: &str,
        day: i32,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<()> {
        self.exec(
            &self.dead_letters.delete_dead_letter_range,
            (
                &self.region,
                &self.cluster,
                service,
                cql_date(day),
                CqlTimestamp(from_ms),
                CqlTimestamp(to_ms),
            ),
        )
        .await
    }
}
