//! The state rows (`transactions`): one per (service, transaction). Many rows go as `IN`
//! queries and small unlogged batches (`get_states`, `put_states`, `settle_states`), which is
//! how the coalescing layer over this store (`rebound_store::coalesced`, with `COALESCING`)
//! sends single calls made at the same moment; rows of the layout before schema 0007 go
//! through `legacy.rs`.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use async_trait::async_trait;
use futures::{stream, StreamExt, TryStreamExt};
use prost::Message;
use scylla::{
    client::session::Session,
    statement::{
        batch::{Batch, BatchType},
        prepared::PreparedStatement,
    },
    value::MaybeUnset,
    DeserializeRow, SerializeRow,
};

use super::{
    finished::{ChunkValues, FinishedLog},
    legacy, map_execution_error, observed, parse_status, ttl_of,
    write_clock::WriteClock,
    CassandraStore, Prep,
};
use rebound_common::coalesce::{Counts, Limits};
use rebound_store::{
    body::{Body, StateCells},
    coalesced::CoalesceOptions,
    finished_second, is_logged_finished, FinishedAt, FinishedPage, StateStore, Status, StoreError,
    StoreLifecycle, StoreResult, TxState, WriteTime,
};

/// Most state rows one read carries (`transaction_id IN ?`).
const STATE_READ_BATCH: usize = 64;
/// Most state rows one write batch carries. Cassandra warns about an unlogged batch over more
/// than 10 partitions (`unlogged_batch_across_partitions_warn_threshold`) or 5 KiB
/// (`batch_size_warn_threshold`); a batch stays under both.
const STATE_WRITE_BATCH: usize = 10;
const STATE_WRITE_BATCH_BYTES: usize = 4608;
/// Coalesced state reads (per service) and writes (per node) in flight at once. Measured with
/// `bench rebound` on 2 cores: 4 leaves Cassandra's request threads idle between requests
/// (they spin and park, burning the CPU the node needs), unlimited loses the batching; 16 was
/// best for enqueue and drain alike.
const STATE_READS_PARALLEL: usize = 16;
const STATE_WRITES_PARALLEL: usize = 16;

/// How the coalescing layer (`rebound_store::coalesced`) batches this store's single
/// state-row calls: the reads of one service into `IN` reads, the writes into batches under
/// Cassandra's warnings, each with the limits above.
pub const COALESCING: CoalesceOptions = CoalesceOptions {
    reads: Limits {
        max_items: STATE_READ_BATCH,
        max_weight: usize::MAX,
        parallel: STATE_READS_PARALLEL,
    },
    writes: Limits {
        max_items: STATE_WRITE_BATCH,
        max_weight: STATE_WRITE_BATCH_BYTES,
        parallel: STATE_WRITES_PARALLEL,
    },
    // A settle brings its finished-log entry, whose partition takes one of the batch's ten.
    settles: Limits {
        max_items: STATE_WRITE_BATCH - 1,
        max_weight: STATE_WRITE_BATCH_BYTES,
        parallel: STATE_WRITES_PARALLEL,
    },
    write_weight: state_write_weight,
};

/// What a state-row write adds to a batch's size as Cassandra counts it (the cells' data:
/// timestamps, TTLs and values), over-estimated. A row of the layout before 0007 with empty
/// values measures about 680 bytes there; one of today's 4 cells about 100 bytes, plus its
/// values, and its body holds about 120 bytes of fixed fields besides the texts.
fn state_write_weight(s: &TxState) -> usize {
    let variable = s.service.len()
        + s.transaction_id.len()
        + s.payload.len()
        + s.last_error.len()
        + s.attributes
            .iter()
            .map(|(k, v)| k.len() + v.len() + 8)
            .sum::<usize>()
        + s.policy
            .non_retryable
            .iter()
            .map(|c| c.len() + 2)
            .sum::<usize>()
        + s.location.as_ref().map_or(0, |l| l.instance.len())
        + s.dependency.len()
        + s.trace.traceparent.len()
        + s.trace.tracestate.len()
        + s.saga
            .compensations
            .iter()
            .map(|c| c.len() + 4)
            .sum::<usize>()
        + s.saga.chain.as_ref().map_or(0, |c| {
            c.saga_service.len()
                + c.saga_transaction_id.len()
                + c.members
                    .iter()
                    .map(|(service, tx)| service.len() + tx.len() + 6)
                    .sum::<usize>()
        });
    if s.legacy_columns {
        768 + variable
    } else {
        320 + variable
    }
}

/// What a finished row's entry in the finished log adds to a batch's size, over-estimated.
fn entry_weight(s: &TxState) -> usize {
    96 + s.service.len() + s.transaction_id.len()
}

/// What a state-row write brings to a batch: the row, and its finished-log entry if it has one.
fn batched_weight(s: &TxState) -> usize {
    state_write_weight(s)
        + if is_logged_finished(s.status) {
            entry_weight(s)
        } else {
            0
        }
}

/// One state-row write: the row, its TTL, and the write timestamp of a settle (None: the
/// store's own numbering, `WriteClock::next`, as every other plain write).
type StateWrite = (TxState, Option<u32>, Option<i64>);

/// The state-row statements.
pub(super) struct States {
    put_cancel: PreparedStatement,
    /// The condition of `put_state_if`'s batch (the row itself goes by `StateIo::put`).
    put_if: PreparedStatement,
    /// `put_cancel` with the condition of `cancel_state_if`.
    put_cancel_if: PreparedStatement,
    /// The row statements, shared by the batches of a call.
    io: Arc<StateIo>,
}

impl States {
    pub(super) async fn prepare(p: &Prep, region: &str, cluster: &str) -> StoreResult<Self> {
        let ks = p.ks();
        let put_state = p
            .prepare(format!(
                "INSERT INTO {ks}.transactions (region, cluster, service, transaction_id, \
             status, generation, payload, body, succeeded_generation) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
            ))
            .await?;
        // A settle: the same row at a timestamp of its own (`StateStore::settle_state`).
        let put_state_at = p
            .prepare(format!(
                "INSERT INTO {ks}.transactions (region, cluster, service, transaction_id, \
             status, generation, payload, body, succeeded_generation) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?;
        let put_cancel = p
            .prepare(format!(
                "UPDATE {ks}.transactions USING TTL ? SET cancelled_generation = ? \
             WHERE region = ? AND cluster = ? AND service = ? AND transaction_id = ?"
            ))
            .await?;
        let put_if = p
            .prepare(format!(
                "UPDATE {ks}.transactions USING TTL ? SET status = ? \
             WHERE region = ? AND cluster = ? AND service = ? AND transaction_id = ? \
             IF status = 'SCHEDULED' AND generation = ?"
            ))
            .await?;
        let put_cancel_if = p
            .prepare(format!(
                "UPDATE {ks}.transactions USING TTL ? SET cancelled_generation = ? \
             WHERE region = ? AND cluster = ? AND service = ? AND transaction_id = ? \
             IF status = 'SCHEDULED' AND generation = ?"
            ))
            .await?;
        let get_states = p
            .prepare(format!(
                "SELECT transaction_id, status, generation, payload, body, cancelled_generation, \
             succeeded_generation, WRITETIME(status) AS written FROM {ks}.transactions \
             WHERE region = ? AND cluster = ? AND service = ? AND transaction_id IN ?"
            ))
            .await?;
        let io = Arc::new(StateIo {
            session: p.session.clone(),
            region: region.to_string(),
            cluster: cluster.to_string(),
            put: put_state,
            put_at: put_state_at,
            get: get_states,
            legacy: legacy::Statements::prepare(p).await?,
            finished: FinishedLog::prepare(p, region, cluster).await?,
            clock: WriteClock::default(),
            reads: RequestCounts::default(),
            writes: RequestCounts::default(),
        });
        Ok(Self {
            put_cancel,
            put_if,
            put_cancel_if,
            io,
        })
    }
}

/// The store runs no loop and no task of its own (the coalescing layer over it runs the
/// coalesced flushes); it counts its state-row requests.
impl StoreLifecycle for CassandraStore {
    fn state_io_counts(&self) -> (Counts, Counts) {
        (self.state.io.reads.get(), self.state.io.writes.get())
    }
}

/// State-row requests made and the rows they carried.
#[derive(Debug, Default)]
struct RequestCounts {
    requests: AtomicU64,
    rows: AtomicU64,
}

impl RequestCounts {
    fn add(&self, rows: usize) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(rows as u64, Ordering::Relaxed);
    }

    fn get(&self) -> Counts {
        Counts {
            flushes: self.requests.load(Ordering::Relaxed),
            items: self.rows.load(Ordering::Relaxed),
        }
    }
}

/// The state-row statements and what they bind, owned, so concurrent batches can run them.
struct StateIo {
    session: Arc<Session>,
    region: String,
    cluster: String,
    put: PreparedStatement,
    put_at: PreparedStatement,
    get: PreparedStatement,
    legacy: legacy::Statements,
    /// The finished log: every SUCCEEDED or CANCELLED row written is logged there too.
    finished: FinishedLog,
    /// The write timestamps of every write of this store but a settle's and a conditional
    /// one's (docs/architecture.md, "A SUCCEEDED ack is one write").
    clock: WriteClock,
    /// `get` calls (one `IN` read each) and `put` calls (one batch of each kind each).
    reads: RequestCounts,
    writes: RequestCounts,
}

impl StateIo {
    fn values<'a>(&'a self, s: &'a TxState, ttl_seconds: Option<u32>) -> BodyValues<'a> {
        let body = Body::of_state(s);
        BodyValues {
            region: &self.region,
            cluster: &self.cluster,
            service: &s.service,
            transaction_id: &s.transaction_id,
            status: s.status.as_str(),
            generation: s.generation,
            payload: &s.payload,
            body: body.encode_to_vec(),
            succeeded_generation: if s.status == Status::Succeeded {
                MaybeUnset::Set(s.generation)
            } else {
                MaybeUnset::Unset
            },
            ttl: ttl_of(ttl_seconds),
        }
    }

    fn legacy_values<'a>(
        &'a self,
        s: &'a TxState,
        ttl_seconds: Option<u32>,
    ) -> legacy::StateValues<'a> {
        legacy::values(&self.region, &self.cluster, s, ttl_seconds)
    }

    /// Writes the rows: the plain ones and the settles (each at its own timestamp) as one
    /// statement or one unlogged batch each (each row its own partition). Two writes of one
    /// transaction never share a batch (see `batchable`). A failure after some of the rows
    /// may have been written is an unknown outcome, never "nothing written".
    async fn put(&self, rows: Vec<StateWrite>) -> StoreResult<Vec<()>> {
        let n = rows.len();
        self.writes.add(n);
        // Whether any row of this call may have been written before a failure.
        let mut written = false;
        let failed =
            |e: &scylla::errors::ExecutionError, written: bool| match map_execution_error(e) {
                StoreError::Unavailable(m) if written => StoreError::Timeout(format!(
                    "part of a state write may have been made before: {m}"
                )),
                other => other,
            };
        // Rows in the layout of before 0007 (rare: live when the node was upgraded) go one by
        // one, the rest together.
        let (legacy, rows): (Vec<_>, Vec<_>) =
            rows.into_iter().partition(|(s, _, _)| s.legacy_columns);
        for (s, ttl, _) in &legacy {
            let mut put = self.legacy.put.clone();
            put.set_timestamp(Some(self.clock.next()));
            observed(
                put.get_statement(),
                self.session
                    .execute_unpaged(&put, self.legacy_values(s, *ttl)),
            )
            .await
            .map_err(|e| failed(&e, written))?;
            written = true;
        }
        // Every row at a timestamp of its own: a settle's, else the store's next; a finished
        // row's entry in the finished log goes in the same batch (`write_chunked` counts its
        // partition), so an entry is never written without its row's request.
        let mut stmts: Vec<(&PreparedStatement, Stmt<'_>)> = Vec::with_capacity(2 * rows.len());
        for (s, ttl, ts) in &rows {
            let at = AtValues {
                row: self.values(s, *ttl),
                timestamp: ts.unwrap_or_else(|| self.clock.next()),
            };
            stmts.push((&self.put_at, Stmt::Row(at)));
        }
        let finished = legacy
            .iter()
            .chain(rows.iter())
            .map(|(s, ttl, _)| (s, *ttl));
        for chunk in self.finished.chunks(finished) {
            stmts.push((self.finished.put_chunk(), Stmt::Chunk(chunk)));
        }
        // The day's list of seconds, once a second per node, beside the batch.
        let seconds = self.finished.list_seconds(
            legacy
                .iter()
                .chain(rows.iter())
                .map(|(s, ttl, _)| (s, *ttl)),
        );
        // A batch stays under Cassandra's batch size limits: a row heavier than a batch may be
        // (a large payload) goes alone, and its chunk after it.
        let weight: usize = rows.iter().map(|(s, _, _)| batched_weight(s)).sum();
        let fits = weight <= STATE_WRITE_BATCH_BYTES;
        let (rows_written, listed) = futures::join!(self.write(stmts, fits), seconds);
        match rows_written {
            Ok(_) => listed.map(|()| vec![(); n]).map_err(|e| {
                StoreError::Timeout(format!(
                    "the state rows were written, their finished seconds may not be listed: {e}"
                ))
            }),
            Err((e, partly)) => Err(failed(&e, written || partly)),
        }
    }

    /// Runs the statements: one unlogged batch when the state rows among them are batchable
    /// and `fits` the size budget, else one after the other, in order. Returns how many ran;
    /// an error says whether some may have been written before it.
    async fn write(
        &self,
        stmts: Vec<(&PreparedStatement, Stmt<'_>)>,
        fits: bool,
    ) -> Result<usize, (scylla::errors::ExecutionError, bool)> {
        let Some((first, _)) = stmts.first() else {
            return Ok(0);
        };
        let first = first.get_statement().to_string();
        let n = stmts.len();
        // Two writes of one transaction never share a batch (see `batchable`).
        let mut rows = HashSet::new();
        let distinct = stmts.iter().all(|(_, v)| match v {
            Stmt::Row(r) => rows.insert(r.key()),
            Stmt::Chunk(_) => true,
        });
        if n == 1 || !distinct || !fits {
            for (i, (ps, v)) in stmts.iter().enumerate() {
                observed(ps.get_statement(), self.session.execute_unpaged(ps, v))
                    .await
                    .map_err(|e| (e, i > 0))?;
            }
            return Ok(n);
        }
        let mut batch = Batch::new(BatchType::Unlogged);
        batch.set_is_idempotent(true);
        let mut values = Vec::with_capacity(n);
        for (ps, v) in stmts {
            batch.append_statement(ps.clone());
            values.push(v);
        }
        observed(&first, self.session.batch(&batch, values))
            .await
            .map_err(|e| (e, false))?;
        Ok(n)
    }

    /// Reads the rows of `ids` (of one service) in one query; None where there is none.
    async fn get(&self, service: String, ids: Vec<String>) -> StoreResult<Vec<Option<TxState>>> {
        self.reads.add(ids.len());
        let rows: Vec<BodyRow> = self.select(&self.get, &service, &ids).await?;
        let mut found = HashMap::with_capacity(ids.len());
        let mut legacy = Vec::new();
        for row in rows {
            if let Some(w) = row.written {
                self.clock.observe(w);
            }
            if row.body.is_none() && row.status.is_none() {
                // Only a cancel cell outlived the row (it lives longer): the retry reads as
                // cancelled, at that generation, so a new enqueue starts above it.
                if let Some(g) = row.cancelled_generation {
                    let id = row.transaction_id.clone();
                    found.insert(id.clone(), TxState::cancelled_ghost(&service, &id, g));
                }
                continue;
            }
            if row.body.is_none() {
                legacy.push(row.transaction_id);
                continue;
            }
            let id = row.transaction_id.clone();
            let state = row.into_state(&service, &id)?;
            found.insert(id, state);
        }
        if !legacy.is_empty() {
            // Rows written before schema 0007, one column per field.
            let rows: Vec<legacy::StateRow> =
                self.select(&self.legacy.get, &service, &legacy).await?;
            for row in rows {
                let id = row.transaction_id.clone();
                let state = row.into_state(&service, &id)?;
                found.insert(id, state);
            }
        }
        let mut out: Vec<Option<TxState>> = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            // The same id twice in one read: the second gets a copy of the first's row.
            let state = found.remove(id).or_else(|| {
                ids[..i]
                    .iter()
                    .position(|x| x == id)
                    .and_then(|j| out[j].clone())
            });
            out.push(state);
        }
        Ok(out)
    }

    /// Runs a state read (`... transaction_id IN ?`) of one service and decodes its rows.
    async fn select<R>(
        &self,
        ps: &PreparedStatement,
        service: &str,
        ids: &[String],
    ) -> StoreResult<Vec<R>>
    where
        R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
    {
        let bad = |e: &dyn std::fmt::Display| StoreError::Internal(format!("bad state row: {e}"));
        observed(
            ps.get_statement(),
            self.session
                .execute_unpaged(ps, (&self.region, &self.cluster, service, ids)),
        )
        .await
        .map_err(|e| map_execution_error(&e))?
        .into_rows_result()
        .map_err(|e| StoreError::Internal(format!("state read returned no rows result: {e}")))?
        .rows::<R>()
        .map_err(|e| bad(&e))?
        .map(|row| row.map_err(|e| bad(&e)))
        .collect()
    }
}

/// Bind values of the state-row upsert (schema 0007 layout), in column order (the last one is
/// the TTL).
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct BodyValues<'a> {
    region: &'a str,
    cluster: &'a str,
    service: &'a str,
    transaction_id: &'a str,
    status: &'a str,
    generation: i64,
    payload: &'a [u8],
    body: Vec<u8>,
    /// Set by a SUCCEEDED write only (the success cell); unset leaves the cell alone.
    succeeded_generation: MaybeUnset<i64>,
    ttl: i32,
}

/// Bind values of a settle: the upsert's, then its write timestamp (microseconds).
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct AtValues<'a> {
    #[scylla(flatten)]
    row: BodyValues<'a>,
    timestamp: i64,
}

/// The write timestamp a settle of `s` takes: just above the one its row was read with.
fn settle_time(s: &TxState) -> StoreResult<i64> {
    match s.written.0.filter(|_| !s.legacy_columns) {
        Some(read) => Ok(read.saturating_add(1)),
        None => Err(StoreError::Internal(format!(
            "state row {}/{} has no known write time to settle above",
            s.service, s.transaction_id
        ))),
    }
}

impl CassandraStore {
    /// Writes `rows` in batches of at most `STATE_WRITE_BATCH` rows and
    /// `STATE_WRITE_BATCH_BYTES` (a heavier row goes alone), `STATE_WRITES_PARALLEL` at once;
    /// one result per row, in order (a batch that fails fails its rows).
    async fn write_chunked(&self, rows: Vec<StateWrite>) -> Vec<StoreResult<()>> {
        // A finished row brings its finished-log entry into the batch: its bytes, and its
        // partition when the chunk has none of its (service, status, second) yet.
        let mut chunks: Vec<Vec<StateWrite>> = Vec::new();
        let (mut weight, mut partitions) = (0, 0);
        let mut logged: HashSet<(String, Status, i64)> = HashSet::new();
        for row in rows {
            let log_partition = is_logged_finished(row.0.status)
                .then(|| (row.0.service.clone(), row.0.status, finished_second(&row.0)));
            let w = batched_weight(&row.0);
            let adds = |logged: &HashSet<_>| {
                1 + usize::from(log_partition.as_ref().is_some_and(|p| !logged.contains(p)))
            };
            match chunks.last_mut() {
                Some(last)
                    if partitions + adds(&logged) <= STATE_WRITE_BATCH
                        && weight + w <= STATE_WRITE_BATCH_BYTES =>
                {
                    weight += w;
                    partitions += adds(&logged);
                    last.push(row);
                }
                _ => {
                    logged.clear();
                    weight = w;
                    partitions = adds(&logged);
                    chunks.push(vec![row]);
                }
            }
            if let Some(p) = log_partition {
                logged.insert(p);
            }
        }
        let writes: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let io = self.state.io.clone();
                async move {
                    let n = chunk.len();
                    match io.put(chunk).await {
                        Ok(_) => vec![Ok(()); n],
                        Err(e) => vec![Err(e); n],
                    }
                }
            })
            .collect();
        stream::iter(writes)
            .buffered(STATE_WRITES_PARALLEL)
            .flat_map(stream::iter)
            .collect()
            .await
    }

    /// One conditional batch on the row's partition: the row as a plain insert (a TTL, when
    /// set, on every cell, as every terminal write has) and `condition`, an update whose `IF`
    /// (SCHEDULED at a generation) decides whether both apply. True when they did.
    async fn put_row_if(
        &self,
        s: &TxState,
        ttl_seconds: Option<u32>,
        condition: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> StoreResult<bool> {
        not_legacy(s)?;
        let io = &self.state.io;
        // Above every plain write time it may read (`WriteClock::lwt_wait`).
        if let Some(wait) = io.clock.lwt_wait() {
            tokio::time::sleep(wait).await;
        }
        let mut batch = Batch::new(BatchType::Logged);
        batch.append_statement(io.put.clone());
        batch.append_statement(condition.clone());
        let (res, logged) = futures::join!(
            observed(
                condition.get_statement(),
                self.session
                    .batch(&batch, (io.values(s, ttl_seconds), values)),
            ),
            io.finished.log(std::iter::once((s, ttl_seconds)))
        );
        let applied = super::lwt_result(res.map_err(|e| map_execution_error(&e))?)?.0;
        if applied {
            logged.map_err(|e| {
                StoreError::Timeout(format!(
                    "the state row was written, its finished-log entry may not be: {e}"
                ))
            })?;
        }
        Ok(applied)
    }
}

/// The conditional writes go in the layout of 0007 and after only (a row of before is
/// rewritten in it by its next plain write).
fn not_legacy(s: &TxState) -> StoreResult<()> {
    if s.legacy_columns {
        return Err(StoreError::Internal(format!(
            "state row {}/{} is in the layout of before 0007: it cannot be written conditionally",
            s.service, s.transaction_id
        )));
    }
    Ok(())
}

/// One statement of a state-row batch: a row, or the finished rows' chunk of the finished log.
enum Stmt<'a> {
    Row(AtValues<'a>),
    Chunk(ChunkValues<'a>),
}

impl scylla::serialize::row::SerializeRow for Stmt<'_> {
    fn serialize(
        &self,
        ctx: &scylla::serialize::row::RowSerializationContext<'_>,
        writer: &mut scylla::serialize::writers::RowWriter,
    ) -> Result<(), scylla::serialize::SerializationError> {
        match self {
            Stmt::Row(v) => v.serialize(ctx, writer),
            Stmt::Chunk(v) => v.serialize(ctx, writer),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Stmt::Row(v) => v.is_empty(),
            Stmt::Chunk(v) => v.is_empty(),
        }
    }
}

/// The transaction a write's values are for (`batchable`).
trait Keyed {
    fn key(&self) -> (&str, &str);
}

impl Keyed for BodyValues<'_> {
    fn key(&self) -> (&str, &str) {
        (self.service, self.transaction_id)
    }
}

impl Keyed for AtValues<'_> {
    fn key(&self) -> (&str, &str) {
        self.row.key()
    }
}

#[derive(DeserializeRow)]
struct BodyRow {
    transaction_id: String,
    status: Option<String>,
    generation: Option<i64>,
    payload: Option<Vec<u8>>,
    body: Option<Vec<u8>>,
    cancelled_generation: Option<i64>,
    succeeded_generation: Option<i64>,
    written: Option<i64>,
}

impl BodyRow {
    fn into_state(self, service: &str, transaction_id: &str) -> StoreResult<TxState> {
        let status = parse_status(self.status, service, transaction_id)?;
        let body = Body::decode_stored(
            self.body.as_deref().unwrap_or_default(),
            service,
            transaction_id,
        )?;
        Ok(body.into_state(
            service,
            transaction_id,
            StateCells {
                status,
                generation: self.generation.unwrap_or(0),
                payload: self.payload.unwrap_or_default(),
                cancelled_generation: self.cancelled_generation,
                succeeded_generation: self.succeeded_generation,
                written: WriteTime(self.written),
            },
        ))
    }
}

#[async_trait]
impl StateStore for CassandraStore {
    async fn put_state(&self, s: &TxState, ttl_seconds: Option<u32>) -> StoreResult<()> {
        self.state
            .io
            .put(vec![(s.clone(), ttl_seconds, None)])
            .await?;
        Ok(())
    }

    async fn settle_state(&self, s: &TxState, ttl_seconds: u32) -> StoreResult<()> {
        let at = settle_time(s)?;
        self.state
            .io
            .put(vec![(s.clone(), Some(ttl_seconds), Some(at))])
            .await?;
        Ok(())
    }

    async fn settle_states(&self, rows: Vec<(TxState, u32)>) -> Vec<StoreResult<()>> {
        // Rows without a known write time fail alone; the others go in batches.
        let mut results: Vec<Option<StoreResult<()>>> = Vec::with_capacity(rows.len());
        let mut writes = Vec::new();
        let mut at = Vec::new();
        for (i, (s, ttl)) in rows.into_iter().enumerate() {
            match settle_time(&s) {
                Ok(ts) => {
                    results.push(None);
                    at.push(i);
                    writes.push((s, Some(ttl), Some(ts)));
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        for (i, r) in at.into_iter().zip(self.write_chunked(writes).await) {
            results[i] = Some(r);
        }
        results
            .into_iter()
            .map(|r| r.expect("every row has its result"))
            .collect()
    }

    async fn put_state_if(
        &self,
        s: &TxState,
        ttl_seconds: Option<u32>,
        if_generation: i64,
    ) -> StoreResult<bool> {
        let condition = (
            ttl_of(ttl_seconds),
            s.status.as_str(),
            &self.region,
            &self.cluster,
            &s.service,
            &s.transaction_id,
            if_generation,
        );
        self.put_row_if(s, ttl_seconds, &self.state.put_if, condition)
            .await
    }

    async fn cancel_state_if(
        &self,
        s: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<bool> {
        let cancel = (
            ttl_of(Some(cancel_ttl_seconds)),
            s.generation,
            &self.region,
            &self.cluster,
            &s.service,
            &s.transaction_id,
            s.generation,
        );
        self.put_row_if(s, Some(ttl_seconds), &self.state.put_cancel_if, cancel)
            .await
    }

    async fn cancel_state(
        &self,
        state: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<()> {
        // One partition, one batch: the CANCELLED row and the cancel cell land together.
        let io = &self.state.io;
        let mut batch = Batch::new(BatchType::Unlogged);
        batch.set_is_idempotent(true);
        // Both statements at the store's next write time, as every plain write.
        batch.set_timestamp(Some(io.clock.next()));
        let cancel = (
            ttl_of(Some(cancel_ttl_seconds)),
            state.generation,
            &self.region,
            &self.cluster,
            &state.service,
            &state.transaction_id,
        );
        let batch_written = async {
            if state.legacy_columns {
                batch.append_statement(io.legacy.put.clone());
                batch.append_statement(self.state.put_cancel.clone());
                observed(
                    self.state.put_cancel.get_statement(),
                    self.session
                        .batch(&batch, (io.legacy_values(state, Some(ttl_seconds)), cancel)),
                )
                .await
            } else {
                batch.append_statement(io.put.clone());
                batch.append_statement(self.state.put_cancel.clone());
                observed(
                    self.state.put_cancel.get_statement(),
                    self.session
                        .batch(&batch, (io.values(state, Some(ttl_seconds)), cancel)),
                )
                .await
            }
        };
        // The finished log beside the batch (`StateIo::put`).
        let (r, logged) = futures::join!(
            batch_written,
            io.finished.log(std::iter::once((state, Some(ttl_seconds))))
        );
        r.map_err(|e| map_execution_error(&e))?;
        logged.map_err(|e| {
            StoreError::Timeout(format!(
                "the cancel was written, its finished-log entry may not be: {e}"
            ))
        })
    }

    async fn get_state(&self, service: &str, txid: &str) -> StoreResult<Option<TxState>> {
        let mut rows = self
            .state
            .io
            .get(service.to_string(), vec![txid.to_string()])
            .await?;
        Ok(rows.pop().flatten())
    }

    async fn get_states(&self, service: &str, ids: &[String]) -> StoreResult<Vec<Option<TxState>>> {
        // Futures made up front (they start only when polled): a closure over borrowed chunks
        // would not satisfy async_trait's lifetimes.
        let reads: Vec<_> = ids
            .chunks(STATE_READ_BATCH)
            .map(|chunk| {
                let (io, service, chunk) =
                    (self.state.io.clone(), service.to_string(), chunk.to_vec());
                async move { io.get(service, chunk).await }
            })
            .collect();
        let parts: Vec<Vec<Option<TxState>>> = stream::iter(reads)
            .buffered(STATE_READS_PARALLEL)
            .try_collect()
            .await?;
        Ok(parts.into_iter().flatten().collect())
    }

    async fn list_finished(
        &self,
        service: &str,
        status: Status,
        from: FinishedAt,
        until_second: i64,
        limit: usize,
    ) -> StoreResult<FinishedPage> {
        self.state
            .io
            .finished
            .list(service, status, from, until_second, limit)
            .await
    }

    async fn put_states(&self, rows: Vec<(TxState, Option<u32>)>) -> Vec<StoreResult<()>> {
        let rows = rows.into_iter().map(|(s, ttl)| (s, ttl, None)).collect();
        self.write_chunked(rows).await
    }
}
