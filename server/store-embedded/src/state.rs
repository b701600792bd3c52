//! State rows. The main row (status, generation, payload, body) and the two settle cells
//! are separate rows, because in Cassandra they are cells with TTLs of their own: the
//! cancel cell outlives the row it cancelled, and an upsert that leaves a settle cell unset
//! leaves it as it was.

use async_trait::async_trait;
use prost::Message;

use super::{
    expiry,
    keys::{Dec, Enc, Key, KeyReader, Table},
    EmbeddedStore, Snapshot, Writer,
};
use rebound_store::{
    body::{Body, StateCells},
    finished_second, is_logged_finished, FinishedAt, FinishedEntry, FinishedPage, StateStore,
    Status, StoreError, StoreResult, TxState, WriteTime,
};

/// The keys of one transaction's state: main row, cancel cell, succeeded cell, and the
/// partition of the finished log its service's entries of a status go to.
struct StateKeys {
    main: Key,
    cancel: Key,
    succeeded: Key,
    finished: Key,
}

impl EmbeddedStore {
    fn state_keys(&self, service: &str, transaction_id: &str) -> StateKeys {
        let k = |t| self.key(t).str(service).str(transaction_id);
        StateKeys {
            main: k(Table::State),
            cancel: k(Table::CancelCell),
            succeeded: k(Table::SucceededCell),
            finished: self.key(Table::Finished).str(service),
        }
    }
}

/// The main row: status, generation, payload, body, then its write time (rows written
/// before write times were kept end after the body).
fn main_payload(s: &TxState, written: i64) -> Vec<u8> {
    Enc::new()
        .str(s.status.as_str())
        .i64(s.generation)
        .bytes(&s.payload)
        .bytes(&Body::of_state(s).encode_to_vec())
        .i64(written)
        .into_bytes()
}

/// The cancel cell: the generation.
fn generation_cell(g: i64) -> Vec<u8> {
    Enc::new().i64(g).into_bytes()
}

/// The write time a stored main row or succeeded cell ends with, None when it has none.
fn written_of(d: &mut Dec<'_>) -> StoreResult<Option<i64>> {
    if d.is_empty() {
        Ok(None)
    } else {
        d.i64().map(Some)
    }
}

/// Writes `payload` at `key` (a main row, or else the succeeded cell) unless the live row
/// there was written at or after `at`, as a Cassandra cell written `USING TIMESTAMP at` loses
/// to a later one. A row without a write time is older than any.
fn put_at(
    w: &mut Writer<'_>,
    (key, main): (&Key, bool),
    payload: &[u8],
    exp: i64,
    at: i64,
) -> StoreResult<()> {
    if let Some(stored) = w.get(key.as_bytes())? {
        // Past the fixed fields of a main row or a cell: status, generation, payload, body
        // for the one, the generation for the other.
        let mut d = Dec::new(&stored);
        if main {
            d.str()?;
            d.i64()?;
            d.bytes()?;
            d.bytes()?;
        } else {
            d.i64()?;
        }
        if written_of(&mut d)?.is_some_and(|t| t >= at) {
            return Ok(());
        }
    }
    w.put(key.as_bytes(), payload, exp)
}

/// Writes `s` as the Cassandra INSERT does: the main row with `ttl_seconds`, and the
/// succeeded cell (same TTL) when `s` is SUCCEEDED; the cancel cell is left as it is. A
/// settle (`at`: its write time) loses to whatever was written at or after it.
fn put_state(
    w: &mut Writer<'_>,
    k: &StateKeys,
    s: &TxState,
    ttl: Option<u32>,
    at: Option<i64>,
) -> StoreResult<()> {
    let exp = expiry(w.now_ms, ttl);
    let at = at.unwrap_or(w.written);
    put_at(w, (&k.main, true), &main_payload(s, at), exp, at)?;
    if s.status == Status::Succeeded {
        let cell = Enc::new().i64(s.generation).i64(at).into_bytes();
        put_at(w, (&k.succeeded, false), &cell, exp, at)?;
    }
    // The finished log, whether or not the row's write won (as Cassandra's own partition):
    // this transaction's entries are one chunk, numbered by its write time.
    if is_logged_finished(s.status) {
        let key = k
            .finished
            .clone()
            .str(s.status.as_str())
            .i64(finished_second(s))
            .i64(w.written)
            .u32(w.logged);
        w.logged += 1;
        let entry = Enc::new()
            .str(&s.transaction_id)
            .i64(s.generation)
            .into_bytes();
        w.put(key.as_bytes(), &entry, exp)?;
    }
    Ok(())
}

/// Whether the state row of `k` is SCHEDULED at `generation` as it stands in `w`: the
/// condition of `put_state_if` and `cancel_state_if` (its status column, as Cassandra's).
fn scheduled_at(w: &Writer<'_>, k: &StateKeys, generation: i64) -> StoreResult<bool> {
    let Some(main) = w.get(k.main.as_bytes())? else {
        return Ok(false);
    };
    let mut d = Dec::new(&main);
    let (status, g) = (d.str()?, d.i64()?);
    Ok(status == Status::Scheduled.as_str() && g == generation)
}

fn read_state(
    i: &Snapshot,
    service: &str,
    id: &str,
    k: &StateKeys,
) -> StoreResult<Option<TxState>> {
    let cell = |key: &Key| -> StoreResult<Option<i64>> {
        i.get(key.as_bytes())?
            .map(|v| Dec::new(&v).i64())
            .transpose()
    };
    let cancelled = cell(&k.cancel)?;
    let Some(main) = i.get(k.main.as_bytes())? else {
        // Only a cancel cell outlived the row (it lives longer): the retry reads as
        // cancelled, at that generation, so a new enqueue starts above it.
        return Ok(cancelled.map(|g| TxState::cancelled_ghost(service, id, g)));
    };
    let mut d = Dec::new(&main);
    let status_text = d.str()?;
    let status = Status::parse(&status_text).ok_or_else(|| {
        StoreError::Internal(format!(
            "state row {service}/{id} has unknown status {status_text:?}"
        ))
    })?;
    let generation = d.i64()?;
    let payload = d.bytes()?;
    let body = Body::decode_stored(&d.bytes()?, service, id)?;
    let written = written_of(&mut d)?;
    Ok(Some(body.into_state(
        service,
        id,
        StateCells {
            status,
            generation,
            payload,
            cancelled_generation: cancelled,
            succeeded_generation: cell(&k.succeeded)?,
            written: WriteTime(written),
        },
    )))
}

#[async_trait]
impl StateStore for EmbeddedStore {
    async fn put_state(&self, s: &TxState, ttl_seconds: Option<u32>) -> StoreResult<()> {
        let k = self.state_keys(&s.service, &s.transaction_id);
        let s = s.clone();
        self.blocking(move |i| i.write(|w| put_state(w, &k, &s, ttl_seconds, None)))
            .await
    }

    async fn settle_state(&self, s: &TxState, ttl_seconds: u32) -> StoreResult<()> {
        let Some(read) = s.written.0 else {
            return Err(StoreError::Internal(format!(
                "state row {}/{} has no known write time to settle above",
                s.service, s.transaction_id
            )));
        };
        let k = self.state_keys(&s.service, &s.transaction_id);
        let s = s.clone();
        let at = read.saturating_add(1);
        self.blocking(move |i| i.write(|w| put_state(w, &k, &s, Some(ttl_seconds), Some(at))))
            .await
    }

    async fn settle_states(&self, rows: Vec<(TxState, u32)>) -> Vec<StoreResult<()>> {
        let mut results = Vec::with_capacity(rows.len());
        for (s, ttl_seconds) in &rows {
            results.push(self.settle_state(s, *ttl_seconds).await);
        }
        results
    }

    async fn put_state_if(
        &self,
        s: &TxState,
        ttl_seconds: Option<u32>,
        if_generation: i64,
    ) -> StoreResult<bool> {
        let k = self.state_keys(&s.service, &s.transaction_id);
        let s = s.clone();
        self.blocking(move |i| {
            i.write(|w| {
                if !scheduled_at(w, &k, if_generation)? {
                    return Ok(false);
                }
                put_state(w, &k, &s, ttl_seconds, None)?;
                Ok(true)
            })
        })
        .await
    }

    async fn cancel_state_if(
        &self,
        s: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<bool> {
        let k = self.state_keys(&s.service, &s.transaction_id);
        let s = s.clone();
        self.blocking(move |i| {
            i.write(|w| {
                if !scheduled_at(w, &k, s.generation)? {
                    return Ok(false);
                }
                put_state(w, &k, &s, Some(ttl_seconds), None)?;
                let exp = expiry(w.now_ms, Some(cancel_ttl_seconds));
                w.put(k.cancel.as_bytes(), &generation_cell(s.generation), exp)?;
                Ok(true)
            })
        })
        .await
    }

    async fn cancel_state(
        &self,
        s: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<()> {
        let k = self.state_keys(&s.service, &s.transaction_id);
        let s = s.clone();
        self.blocking(move |i| {
            i.write(|w| {
                put_state(w, &k, &s, Some(ttl_seconds), None)?;
                let exp = expiry(w.now_ms, Some(cancel_ttl_seconds));
                w.put(k.cancel.as_bytes(), &generation_cell(s.generation), exp)
            })
        })
        .await
    }

    async fn get_state(&self, service: &str, txid: &str) -> StoreResult<Option<TxState>> {
        let k = self.state_keys(service, txid);
        let (service, txid) = (service.to_string(), txid.to_string());
        self.blocking(move |i| i.read(|r| read_state(r, &service, &txid, &k)))
            .await
    }

    async fn get_states(&self, service: &str, ids: &[String]) -> StoreResult<Vec<Option<TxState>>> {
        let keys: Vec<(String, StateKeys)> = ids
            .iter()
            .map(|id| (id.clone(), self.state_keys(service, id)))
            .collect();
        let service = service.to_string();
        self.blocking(move |i| {
            i.read(|r| {
                keys.iter()
                    .map(|(id, k)| read_state(r, &service, id, k))
                    .collect()
            })
        })
        .await
    }

    async fn list_finished(
        &self,
        service: &str,
        status: Status,
        from: FinishedAt,
        until_second: i64,
        limit: usize,
    ) -> StoreResult<FinishedPage> {
        let part = self.key(Table::Finished).str(service).str(status.as_str());
        let n = part.as_bytes().len();
        let start = part
            .clone()
            .i64(from.second)
            .i64(from.chunk)
            .u32(from.index)
            .into_bytes();
        let to = part.i64(until_second).into_bytes();
        let limit = limit.max(1);
        let rows = self
            .blocking(move |i| i.scan(&start, Some(&to), limit))
            .await?;
        let full = rows.len() >= limit;
        let entries = rows
            .iter()
            .map(|(k, v)| {
                let mut r = KeyReader::after(k, n)?;
                let at = FinishedAt {
                    second: r.i64()?,
                    chunk: r.i64()?,
                    index: r.u32()?,
                };
                let mut d = Dec::new(v);
                Ok(FinishedEntry {
                    at,
                    transaction_id: d.str()?,
                    generation: d.i64()?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let next = entries.last().filter(|_| full).map(|e| FinishedAt {
            index: e.at.index.saturating_add(1),
            ..e.at
        });
        Ok(FinishedPage { entries, next })
    }

    async fn put_states(&self, rows: Vec<(TxState, Option<u32>)>) -> Vec<StoreResult<()>> {
        let n = rows.len();
        let keyed: Vec<(StateKeys, TxState, Option<u32>)> = rows
            .into_iter()
            .map(|(s, ttl)| (self.state_keys(&s.service, &s.transaction_id), s, ttl))
            .collect();
        // One transaction carries them all: it commits or fails whole.
        let res = self
            .blocking(move |i| {
                i.write(|w| {
                    for (k, s, ttl) in &keyed {
                        put_state(w, k, s, *ttl, None)?;
                    }
                    Ok(())
                })
            })
            .await;
        match res {
            Ok(()) => (0..n).map(|_| Ok(())).collect(),
            Err(e) => (0..n).map(|_| Err(e.clone())).collect(),
        }
    }
}
