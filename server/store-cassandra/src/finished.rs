//! The finished log (`finished`, `finished_seconds`, schema 0013): every state row written
//! SUCCEEDED or CANCELLED, under (service, status, second), the rows of one write and second
//! packed in one chunk row, with the non-empty seconds of each day listed, so
//! `StateStore::list_finished` reads a service's finished retries in the order they finished
//! without an index on the state rows.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use futures::future::try_join_all;
use scylla::{client::session::Session, statement::prepared::PreparedStatement, SerializeRow};

use super::{map_execution_error, observed, ttl_of, Prep};
use rebound_store::{
    decode_finished_chunk, encode_finished_chunk, finished_second, is_logged_finished, FinishedAt,
    FinishedEntry, FinishedPage, Status, StoreResult, TxState,
};

/// Non-empty seconds one `list_finished` call reads at most (one request each), and days of
/// the seconds' directory (one request each, empty ones included).
const MAX_SECONDS_READ: usize = 64;
const MAX_DAYS_READ: usize = 32;
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
    put_chunk: PreparedStatement,
    put_second: PreparedStatement,
    seconds: PreparedStatement,
    chunks: PreparedStatement,
    /// Per (service, status): the last second listed in `finished_seconds` by this node.
    listed: Mutex<HashMap<(String, Status), i64>>,
}

/// One partition of the log: (service, status, second).
pub(super) type Partition = (String, Status, i64);

/// A chunk being gathered: its (transaction id, generation) pairs, and their longest TTL.
type Pending<'r> = (Vec<(&'r str, i64)>, Option<u32>);

/// The bind values of one chunk: the finished rows of one write in one partition.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub(super) struct ChunkValues<'a> {
    region: &'a str,
    cluster: &'a str,
    service: String,
    status: &'static str,
    second: i64,
    chunk: i64,
    ids: Vec<u8>,
    ttl: i32,
}

impl FinishedLog {
    pub(super) async fn prepare(p: &Prep, region: &str, cluster: &str) -> StoreResult<Self> {
        let ks = p.ks();
        Ok(Self {
            session: p.session.clone(),
            region: region.to_string(),
            cluster: cluster.to_string(),
            put_chunk: p
                .prepare(format!(
                    "INSERT INTO {ks}.finished (region, cluster, service, status, second, \
                     chunk, ids) VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?"
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
            chunks: p
                .prepare(format!(
                    "SELECT chunk, ids FROM {ks}.finished WHERE region = ? AND cluster = ? \
                     AND service = ? AND status = ? AND second = ? AND chunk >= ? LIMIT ?"
                ))
                .await?,
            listed: Mutex::new(HashMap::new()),
        })
    }

    /// The chunks of the finished rows among `rows` (each with its TTL): one per partition,
    /// under a random number (two writes' chunks of one second never meet but by a 2^-64
    /// chance), each with the longest TTL of its rows. The state-row batches carry these
    /// (`StateIo::put`).
    pub(super) fn chunks<'s, 'r>(
        &'s self,
        rows: impl Iterator<Item = (&'r TxState, Option<u32>)>,
    ) -> Vec<ChunkValues<'s>> {
        let mut parts: BTreeMap<Partition, Pending<'r>> = BTreeMap::new();
        for (s, ttl) in rows.filter(|(s, _)| is_logged_finished(s.status)) {
            let (entries, longest) = parts
                .entry((s.service.clone(), s.status, finished_second(s)))
                .or_default();
            entries.push((&s.transaction_id, s.generation));
            *longest = (*longest).max(ttl);
        }
        parts
            .into_iter()
            .map(|((service, status, second), (entries, ttl))| ChunkValues {
                region: &self.region,
                cluster: &self.cluster,
                service,
                status: status.as_str(),
                second,
                chunk: rand::random(),
                ids: encode_finished_chunk(entries.into_iter()),
                ttl: ttl_of(ttl),
            })
            .collect()
    }

    pub(super) fn put_chunk(&self) -> &PreparedStatement {
        &self.put_chunk
    }

    /// Logs the finished rows among `rows` (each with its TTL) by themselves: a chunk per
    /// partition, and their seconds listed. For the writes that cannot carry their chunk in
    /// their own batch: a cancel's, and a conditional one's.
    pub(super) async fn log<'a>(
        &self,
        rows: impl Iterator<Item = (&'a TxState, Option<u32>)> + Clone,
    ) -> StoreResult<()> {
        let chunks = self.chunks(rows.clone());
        let writes = try_join_all(chunks.iter().map(|c| async move {
            observed(
                self.put_chunk.get_statement(),
                self.session.execute_unpaged(&self.put_chunk, c),
            )
            .await
            .map(|_| ())
            .map_err(|e| map_execution_error(&e))
        }));
        futures::try_join!(writes, self.list_seconds(rows))?;
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

    /// `StateStore::list_finished`: the directory's days from `from`'s on, each day's
    /// non-empty seconds, each second's chunks; at most `MAX_DAYS_READ` days and
    /// `MAX_SECONDS_READ` seconds per call.
    pub(super) async fn list(
        &self,
        service: &str,
        status: Status,
        from: FinishedAt,
        until_second: i64,
        limit: usize,
    ) -> StoreResult<FinishedPage> {
        let limit = limit.max(1);
        let mut entries: Vec<FinishedEntry> = Vec::new();
        let (mut days_read, mut seconds_read) = (0, 0);
        let mut day = from.second.div_euclid(SECONDS_PER_DAY);
        while day * SECONDS_PER_DAY < until_second {
            if days_read == MAX_DAYS_READ {
                return Ok(FinishedPage {
                    entries,
                    next: Some(FinishedAt::start(day * SECONDS_PER_DAY)),
                });
            }
            days_read += 1;
            let first = from.second.max(day * SECONDS_PER_DAY);
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
                        first,
                        to,
                        left as i32,
                    ),
                )
                .await?;
            for &(second,) in &seconds {
                let at = if second == from.second {
                    from
                } else {
                    FinishedAt::start(second)
                };
                if entries.len() == limit {
                    return Ok(FinishedPage {
                        entries,
                        next: Some(at),
                    });
                }
                seconds_read += 1;
                // A chunk holds one write's entries (one at least): one row more than the
                // entries wanted covers them, past the chunk `at` may be inside of.
                let want = (limit - entries.len() + 1).min(i32::MAX as usize) as i32;
                let rows: Vec<(i64, Option<Vec<u8>>)> = self
                    .select(
                        &self.chunks,
                        (
                            &self.region,
                            &self.cluster,
                            service,
                            status.as_str(),
                            second,
                            at.chunk,
                            want,
                        ),
                    )
                    .await?;
                let got = rows.len();
                let mut seen = at;
                for (chunk, cell) in rows {
                    let chunk_entries = decode_finished_chunk(cell.as_deref().unwrap_or_default())?;
                    for (index, (transaction_id, generation)) in
                        chunk_entries.into_iter().enumerate()
                    {
                        let here = FinishedAt {
                            second,
                            chunk,
                            index: index as u32,
                        };
                        if here < at {
                            continue;
                        }
                        seen = FinishedAt {
                            index: here.index.saturating_add(1),
                            ..here
                        };
                        if entries.len() == limit {
                            return Ok(FinishedPage {
                                entries,
                                next: Some(here),
                            });
                        }
                        entries.push(FinishedEntry {
                            at: here,
                            transaction_id,
                            generation,
                        });
                    }
                }
                if got >= want as usize {
                    // The rows read may not be all of this second's: resume after the last
                    // entry read.
                    return Ok(FinishedPage {
                        entries,
                        next: Some(seen),
                    });
                }
            }
            if seconds.len() >= left {
                // The budget ran out in this day: resume after its last second read.
                let last = seconds.last().map_or(first, |s| s.0);
                return Ok(FinishedPage {
                    entries,
                    next: Some(FinishedAt::start(last + 1)),
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
