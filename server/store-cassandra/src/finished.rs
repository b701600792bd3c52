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

    /// Logs the finished rows among `rows` (each with its TTL): one single-partition batch
    /// per (service, status, second), and that second in the day's directory unless this
    /// node listed it already. Nothing is written when no row is finished.
    pub(super) async fn log<'a>(
        &self,
        rows: impl Iterator<Item = (&'a TxState, Option<u32>)>,
    ) -> StoreResult<()> {
        let mut parts: BTreeMap<Partition, Vec<(&'a TxState, Option<u32>)>> = BTreeMap::new();
        for (s, ttl) in rows.filter(|(s, _)| is_logged_finished(s.status)) {
            parts
                .entry((s.service.clone(), s.status, finished_second(s)))
                .or_default()
                .push((s, ttl));
        }
        if parts.is_empty() {
            return Ok(());
        }
        let writes = parts
            .iter()
            .map(|(part, rows)| self.log_partition(part, rows));
        try_join_all(writes).await?;
        Ok(())
    }

    async fn log_partition(
        &self,
        part: &Partition,
        rows: &[(&TxState, Option<u32>)],
    ) -> StoreResult<()> {
        let (service, status, second) = part;
        let ttl = rows.iter().filter_map(|(_, t)| *t).max();
        let fresh = {
            let listed = self.listed.lock().expect("listed seconds");
            listed.get(&(service.clone(), *status)) != Some(second)
        };
        let entries = async {
            for chunk in rows.chunks(MAX_BATCH_ROWS) {
                let values: Vec<_> = chunk
                    .iter()
                    .map(|(s, t)| {
                        (
                            &self.region,
                            &self.cluster,
                            service,
                            status.as_str(),
                            *second,
                            &s.transaction_id,
                            s.generation,
                            ttl_of(*t),
                        )
                    })
                    .collect();
                let r = if values.len() == 1 {
                    observed(
                        self.put_entry.get_statement(),
                        self.session.execute_unpaged(&self.put_entry, &values[0]),
                    )
                    .await
                    .map(|_| ())
                } else {
                    let mut batch = Batch::new(BatchType::Unlogged);
                    batch.set_is_idempotent(true);
                    for _ in &values {
                        batch.append_statement(self.put_entry.clone());
                    }
                    observed(
                        self.put_entry.get_statement(),
                        self.session.batch(&batch, &values),
                    )
                    .await
                    .map(|_| ())
                };
                r.map_err(|e| map_execution_error(&e))?;
            }
            Ok(())
        };
        let directory = async {
            if !fresh {
                return Ok(());
            }
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
            .await
            .map(|_| ())
            .map_err(|e| map_execution_error(&e))
        };
        futures::try_join!(entries, directory)?;
        if fresh {
            let mut listed = self.listed.lock().expect("listed seconds");
            if listed.len() >= MAX_REMEMBERED {
                listed.clear();
            }
            listed.insert((service.clone(), *status), *second);
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
