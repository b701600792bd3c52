//! The finished log (`finished`, `finished_seconds`, schema 0013): every state row written
//! SUCCEEDED or CANCELLED, under (service, status, second), with the non-empty seconds of each
//! day listed, so `StateStore::list_finished` reads a service's finished retries in the order
//! they finished without an index on the state rows.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use futures::future::try_join_all;
use scylla::{
    client::session::Session,
    statement::{
        batch::{Batch, BatchType},
        prepared::PreparedStatement,
    },
    SerializeRow,
};

use super::{map_execution_error, observed, ttl_of, Prep};
use rebound_store::{
    finished_second, is_logged_finished, FinishedEntry, FinishedPage, Status, StoreResult, TxState,
};

/// Non-empty seconds one `list_finished` call reads at most (one request each), and days of
/// the seconds' directory (one request each, empty ones included).
const MAX_SECONDS_READ: usize = 64;
const MAX_DAYS_READ: usize = 32;
/// Rows of one partition one batch carries (Cassandra warns past 5 KiB per batch).
const MAX_BATCH_ROWS: usize = 20;
/// (service, status) pairs whose last logged second a node remembers; past it the memory is
/// cleared (a second may then be written twice, which is harmless).
const MAX_REMEMBERED: usize = 10_000;
/// The seconds' directory outlives the entries it lists by a day.
const DIRECTORY_EXTRA_TTL: u32 = 86_400;

const SECONDS_PER_DAY: i64 = 86_400;

/// The log's statements, and the seconds this node has already listed.
pub(super) struct FinishedLog {
    session: Arc<Session>,
    region: String,
    cluster: String,
    put_entry: PreparedStatement,
    put_second: PreparedStatement,
    seconds: PreparedStatement,
    entries: PreparedStatement,
    /// Per (service, status): the last second listed in `finished_seconds` by this node.
    listed: Mutex<HashMap<(String, Status), i64>>,
}

/// One partition of the log: (service, status, second).
type Partition = (String, Status, i64);

/// The bind values of one entry.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub(super) struct EntryValues<'a> {
    region: &'a str,
    cluster: &'a str,
    service: &'a str,
    status: &'a str,
    second: i64,
    transaction_id: &'a str,
    generation: i64,
    ttl: i32,
}

impl FinishedLog {
    pub(super) async fn prepare(p: &Prep, region: &str, cluster: &str) -> StoreResult<Self> {
        let ks = p.ks();
        Ok(Self {
            session: p.session.clone(),
            region: region.to_string(),
            cluster: cluster.to_string(),
            put_entry: p
                .prepare(format!(
                    "INSERT INTO {ks}.finished (region, cluster, service, status, second, \
                     transaction_id, generation) VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?"
                ))
                .await?,
            put_second: p
                .prepare(format!(
                    "INSERT INTO {ks}.finished_seconds (region, cluster, service, status, day, \
                     second) VALUES (?, ?, ?, ?, ?, ?) USING TTL ?"
                ))
                .await?,
            seconds: p
                .prepare(format!(
                    "SELECT second FROM {ks}.finished_seconds WHERE region = ? AND cluster = ? \
                     AND service = ? AND status = ? AND day = ? AND second >= ? AND second < ? \
                     LIMIT ?"
                ))
                .await?,
            entries: p
                .prepare(format!(
                    "SELECT transaction_id, generation FROM {ks}.finished WHERE region = ? \
                     AND cluster = ? AND service = ? AND status = ? AND second = ? \
                     AND transaction_id > ? LIMIT ?"
                ))
                .await?,
            listed: Mutex::new(HashMap::new()),
        })
    }

    /// The finished-log entry of `s` (with its row's TTL), None when `s` is not finished.
    /// The state-row batches carry these (`StateIo::put`).
    pub(super) fn entry<'a>(&'a self, s: &'a TxState, ttl: Option<u32>) -> Option<EntryValues<'a>> {
        is_logged_finished(s.status).then(|| EntryValues {
            region: &self.region,
            cluster: &self.cluster,
            service: &s.service,
            status: s.status.as_str(),
            second: finished_second(s),
            transaction_id: &s.transaction_id,
            generation: s.generation,
            ttl: ttl_of(ttl),
        })
    }

    pub(super) fn put_entry(&self) -> &PreparedStatement {
        &self.put_entry
    }

    /// Logs the finished rows among `rows` (each with its TTL) by themselves: their entries
    /// as one single-partition batch per (service, status, second), and their seconds listed.
    /// For the writes that cannot carry the entries in their own batch: a cancel's, and a
    /// conditional one's.
    pub(super) async fn log<'a>(
        &self,
        rows: impl Iterator<Item = (&'a TxState, Option<u32>)> + Clone,
    ) -> StoreResult<()> {
        let mut parts: BTreeMap<Partition, Vec<EntryValues<'_>>> = BTreeMap::new();
        for (s, ttl) in rows.clone() {
            if let Some(e) = self.entry(s, ttl) {
                parts
                    .entry((s.service.clone(), s.status, e.second))
                    .or_default()
                    .push(e);
            }
        }
        let entries = try_join_all(parts.into_values().map(|entries| self.put_entries(entries)));
        futures::try_join!(entries, self.list_seconds(rows))?;
        Ok(())
    }

    async fn put_entries(&self, entries: Vec<EntryValues<'_>>) -> StoreResult<()> {
        for chunk in entries.chunks(MAX_BATCH_ROWS) {
            let r = if let [one] = chunk {
                observed(
                    self.put_entry.get_statement(),
                    self.session.execute_unpaged(&self.put_entry, one),
                )
                .await
                .map(|_| ())
            } else {
                let mut batch = Batch::new(BatchType::Unlogged);
                batch.set_is_idempotent(true);
                for _ in chunk {
                    batch.append_statement(self.put_entry.clone());
                }
                observed(
                    self.put_entry.get_statement(),
                    self.session.batch(&batch, chunk),
                )
                .await
                .map(|_| ())
            };
            r.map_err(|e| map_execution_error(&e))?;
        }
        Ok(())
    }

    /// Lists in `finished_seconds` the seconds of the finished rows among `rows` that this
    /// node has not listed yet (one write a second per service and status).
    pub(super) async fn list_seconds<'a>(
        &self,
        rows: impl Iterator<Item = (&'a TxState, Option<u32>)>,
    ) -> StoreResult<()> {
        let mut fresh: BTreeMap<Partition, Option<u32>> = BTreeMap::new();
        {
            let listed = self.listed.lock().expect("listed seconds");
            for (s, ttl) in rows.filter(|(s, _)| is_logged_finished(s.status)) {
                let second = finished_second(s);
                if listed.get(&(s.service.clone(), s.status)) != Some(&second) {
                    let t = fresh
                        .entry((s.service.clone(), s.status, second))
                        .or_default();
                    *t = (*t).max(ttl);
                }
            }
        }
        if fresh.is_empty() {
            return Ok(());
        }
        let writes = fresh.iter().map(|((service, status, second), ttl)| {
            let ttl = ttl.map(|t| t.saturating_add(DIRECTORY_EXTRA_TTL));
            observed(
                self.put_second.get_statement(),
                self.session.execute_unpaged(
                    &self.put_second,
                    (
                        &self.region,
                        &self.cluster,
                        service,
                        status.as_str(),
                        second.div_euclid(SECONDS_PER_DAY),
                        *second,
                        ttl_of(ttl),
                    ),
                ),
            )
        });
        try_join_all(writes)
            .await
            .map_err(|e| map_execution_error(&e))?;
        let mut listed = self.listed.lock().expect("listed seconds");
        if listed.len() + fresh.len() > MAX_REMEMBERED {
            listed.clear();
        }
        for (service, status, second) in fresh.into_keys() {
            let last = listed.entry((service, status)).or_insert(second);
            *last = (*last).max(second);
        }
        Ok(())
    }

    /// `StateStore::list_finished`: the directory's days from `after`'s on, each day's
    /// non-empty seconds, each second's entries; at most `MAX_DAYS_READ` days and
    /// `MAX_SECONDS_READ` seconds per call.
    pub(super) async fn list(
        &self,
        service: &str,
        status: Status,
        after: (i64, &str),
        until_second: i64,
        limit: usize,
    ) -> StoreResult<FinishedPage> {
        let limit = limit.max(1);
        let mut entries: Vec<FinishedEntry> = Vec::new();
        let (mut days_read, mut seconds_read) = (0, 0);
        let mut day = after.0.div_euclid(SECONDS_PER_DAY);
        while day * SECONDS_PER_DAY < until_second {
            if days_read == MAX_DAYS_READ {
                return Ok(FinishedPage {
                    entries,
                    next: Some((day * SECONDS_PER_DAY, String::new())),
                });
            }
            days_read += 1;
            let from = after.0.max(day * SECONDS_PER_DAY);
            let to = until_second.min((day + 1) * SECONDS_PER_DAY);
            let left = MAX_SECONDS_READ - seconds_read;
            let seconds: Vec<(i64,)> = self
                .select(
                    &self.seconds,
                    (
                        &self.region,
                        &self.cluster,
                        service,
                        status.as_str(),
                        day,
                        from,
                        to,
                        left as i32,
                    ),
                )
                .await?;
            for &(second,) in &seconds {
                seconds_read += 1;
                let id_after = if second == after.0 { after.1 } else { "" };
                let want = limit - entries.len();
                let rows: Vec<(String, Option<i64>)> = self
                    .select(
                        &self.entries,
                        (
                            &self.region,
                            &self.cluster,
                            service,
                            status.as_str(),
                            second,
                            id_after,
                            want.min(i32::MAX as usize) as i32,
                        ),
                    )
                    .await?;
                let got = rows.len();
                entries.extend(rows.into_iter().map(|(transaction_id, g)| FinishedEntry {
                    second,
                    transaction_id,
                    generation: g.unwrap_or(0),
                }));
                if got >= want {
                    let last = entries.last().map(|e| e.transaction_id.clone());
                    return Ok(FinishedPage {
                        entries,
                        next: Some((second, last.unwrap_or_default())),
                    });
                }
            }
            if seconds.len() >= left {
                // The budget ran out in this day: resume after its last second read.
                let last = seconds.last().map_or(from, |s| s.0);
                return Ok(FinishedPage {
                    entries,
                    next: Some((last + 1, String::new())),
                });
            }
            day += 1;
        }
        Ok(FinishedPage {
            entries,
            next: None,
        })
    }

    async fn select<R>(
        &self,
        ps: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> StoreResult<Vec<R>>
    where
        R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
    {
        let res = observed(ps.get_statement(), self.session.execute_unpaged(ps, values))
            .await
            .map_err(|e| map_execution_error(&e))?;
        let rows = res
            .into_rows_result()
            .map_err(|e| rebound_store::StoreError::Internal(e.to_string()))?;
        rows.rows::<R>()
            .map_err(|e| rebound_store::StoreError::Internal(e.to_string()))?
            .map(|r| r.map_err(|e| rebound_store::StoreError::Internal(e.to_string())))
            .collect()
    }
}
