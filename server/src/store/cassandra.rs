//! The Cassandra implementation of the store. Every statement is prepared once
//! at start and marked idempotent: each one is an upsert of fixed values or a read, so the
//! driver may retry or speculate it safely, and a caller that saw a timeout may replay it.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use async_trait::async_trait;
use futures::{stream, StreamExt, TryStreamExt};
use scylla::value::MaybeUnset;
use scylla::{
    client::{
        execution_profile::ExecutionProfile, session::Session, session_builder::SessionBuilder,
    },
    errors::{DbError, ExecutionError, PagerExecutionError, RequestAttemptError},
    statement::{
        batch::{Batch, BatchType},
        prepared::PreparedStatement,
    },
    value::{CqlDate, CqlTimestamp},
    DeserializeRow, SerializeRow,
};

use prost::Message;

use super::{
    body::{Body, LocationBody, PolicyBody},
    Cas, DeadLetter, DeadLetterRow, DeadLetterStore, DirectoryStore, InstanceRow, LeaseChange,
    LeaseRow, LeaseStore, Location, Member, MigrationStore, Pointer, ServiceRow, ServiceStore,
    StateStore, Status, StoreError, StoreResult, TokenRange, TxState,
};
use crate::{
    coalesce::{Coalescer, Counts, Limits},
    config::Config,
    policy::RetryPolicy,
    window::WindowId,
};

/// Connection settings, taken from the node configuration.
#[derive(Debug, Clone)]
pub struct CassandraOptions {
    pub contact_points: Vec<String>,
    pub keyspace: String,
    pub replication: String,
    pub region: String,
    pub cluster: String,
    pub consistency: scylla::statement::Consistency,
    pub serial_consistency: scylla::statement::SerialConsistency,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
}

impl CassandraOptions {
    /// Reads of lease rows use the serial level, so they see every committed LWT.
    fn serial_as_read_consistency(&self) -> scylla::statement::Consistency {
        match self.serial_consistency {
            scylla::statement::SerialConsistency::Serial => scylla::statement::Consistency::Serial,
            scylla::statement::SerialConsistency::LocalSerial => {
                scylla::statement::Consistency::LocalSerial
            }
        }
    }

    pub fn from_config(c: &Config) -> Self {
        Self {
            contact_points: c.cassandra_contact_points.clone(),
            keyspace: c.keyspace.clone(),
            replication: c.replication.clone(),
            region: c.region.clone(),
            cluster: c.cluster.clone(),
            consistency: crate::config::parse_consistency(&c.consistency)
                .expect("validated consistency"),
            serial_consistency: crate::config::parse_serial_consistency(&c.serial_consistency)
                .expect("validated serial consistency"),
            request_timeout: Duration::from_millis(c.cassandra_request_timeout_ms),
            connect_timeout: Duration::from_millis(c.cassandra_connect_timeout_ms),
        }
    }
}

/// Opens a session with the configured consistency levels and client-side timeout.
pub async fn connect(o: &CassandraOptions) -> StoreResult<Session> {
    let profile = ExecutionProfile::builder()
        .consistency(o.consistency)
        .serial_consistency(Some(o.serial_consistency))
        .request_timeout(Some(o.request_timeout))
        .build();
    SessionBuilder::new()
        .known_nodes(&o.contact_points)
        .connection_timeout(o.connect_timeout)
        .default_execution_profile_handle(profile.into_handle())
        .build()
        .await
        .map_err(|e| {
            StoreError::Unavailable(format!("cannot connect to {:?}: {e}", o.contact_points))
        })
}

/// Keeps trying to connect until `wait` has passed: a node started together with its database
/// waits for it instead of failing.
pub async fn connect_with_wait(o: &CassandraOptions, wait: Duration) -> StoreResult<Session> {
    // A wait too long for the clock is no deadline at all.
    let deadline = tokio::time::Instant::now().checked_add(wait);
    let mut pause = Duration::from_millis(200);
    loop {
        match connect(o).await {
            Ok(s) => return Ok(s),
            Err(e) if deadline.is_none_or(|d| tokio::time::Instant::now() + pause < d) => {
                tracing::warn!(error = %e, retry_in_ms = pause.as_millis() as u64, "cassandra not reachable yet");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

struct Statements {
    put_day: PreparedStatement,
    put_window: PreparedStatement,
    put_instance: PreparedStatement,
    put_bucket: PreparedStatement,
    put_pointer: PreparedStatement,
    put_state: PreparedStatement,
    put_state_legacy: PreparedStatement,
    put_cancel: PreparedStatement,
    get_states: PreparedStatement,
    get_states_legacy: PreparedStatement,
    list_days: PreparedStatement,
    list_years: PreparedStatement,
    list_instances: PreparedStatement,
    list_buckets: PreparedStatement,
    list_pointers: PreparedStatement,
    put_dead_letter: PreparedStatement,
    delete_pointer_partition: PreparedStatement,
    delete_pointer: PreparedStatement,
    delete_bucket: PreparedStatement,
    delete_instance: PreparedStatement,
    any_instance: PreparedStatement,
    delete_window_instances: PreparedStatement,
    delete_window: PreparedStatement,
    delete_day: PreparedStatement,
    get_low_water: PreparedStatement,
    /// None when the database has no `currentTimestamp()` (clock sync then reports an error
    /// and the node runs on its own clock).
    server_time: Option<PreparedStatement>,
    set_low_water: PreparedStatement,
    delete_low_water: PreparedStatement,
    list_windows_from: PreparedStatement,
    heartbeat: PreparedStatement,
    list_members: PreparedStatement,
    read_lease: PreparedStatement,
    peek_leases: PreparedStatement,
    create_lease: PreparedStatement,
    replace_lease: PreparedStatement,
    take_lease: PreparedStatement,
    release_lease: PreparedStatement,
    list_services: PreparedStatement,
    touch_service: PreparedStatement,
    pause_service: PreparedStatement,
    resume_service: PreparedStatement,
    set_service_policy: PreparedStatement,
    set_service_limits: PreparedStatement,
    list_dead_letters: PreparedStatement,
    mark_redriven: PreparedStatement,
    delete_dead_letter_day: PreparedStatement,
    delete_dead_letter_range: PreparedStatement,
    count_pointers: PreparedStatement,
    day_listed: PreparedStatement,
    window_listed: PreparedStatement,
}

/// The coalescer of state-row writes (see `state_writes`).
type StateWrites = Coalescer<(), (TxState, Option<u32>), (), StoreError>;

/// The Cassandra store for one keyspace and one `ns` (region, cluster).
pub struct CassandraStore {
    session: Arc<Session>,
    keyspace: String,
    replication: String,
    region: String,
    cluster: String,
    st: Statements,
    /// State-row reads of one service coalesced into `IN` queries.
    state_reads: Arc<Coalescer<String, String, Option<TxState>, StoreError>>,
    /// State-row writes coalesced into small unlogged batches.
    state_writes: Arc<StateWrites>,
    /// The same statements, for callers that bring many rows at once.
    state_io: Arc<StateIo>,
}

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
        + s.location.as_ref().map_or(0, |l| l.instance.len());
    if s.legacy_columns {
        768 + variable
    } else {
        320 + variable
    }
}

/// Whether rows with these keys can go out as one batch: more than one, and no key twice (the
/// cells of a batch share one timestamp, so Cassandra would merge two writes of one row cell by
/// cell; those go one after the other instead, in the order they were made).
fn batchable<K: std::hash::Hash + Eq>(keys: impl ExactSizeIterator<Item = K>) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    keys.len() > 1 && keys.into_iter().all(|k| seen.insert(k))
}

/// The state-row statements and what they bind, owned, so coalesced flushes can run them.
struct StateIo {
    session: Arc<Session>,
    region: String,
    cluster: String,
    put: PreparedStatement,
    put_legacy: PreparedStatement,
    get: PreparedStatement,
    get_legacy: PreparedStatement,
}

impl StateIo {
    fn values<'a>(&'a self, s: &'a TxState, ttl_seconds: Option<u32>) -> BodyValues<'a> {
        let body = Body {
            attempt: s.attempt,
            attributes: s.attributes.clone(),
            policy: Some(PolicyBody::of(&s.policy)),
            first_enqueued_at_ms: s.first_enqueued_at_ms,
            last_enqueued_at_ms: s.last_enqueued_at_ms,
            updated_at_ms: s.updated_at_ms,
            due_at_ms: s.due_at_ms,
            last_error: s.last_error.clone(),
            location: s.location.as_ref().map(LocationBody::of),
            enqueue_count: s.enqueue_count,
            delivery_count: s.delivery_count,
            base_generation: s.base_generation,
        };
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

    fn legacy_values<'a>(&'a self, s: &'a TxState, ttl_seconds: Option<u32>) -> StateValues<'a> {
        let loc = s.location.as_ref();
        StateValues {
            region: &self.region,
            cluster: &self.cluster,
            service: &s.service,
            transaction_id: &s.transaction_id,
            status: s.status.as_str(),
            generation: s.generation,
            attempt: s.attempt as i32,
            payload: &s.payload,
            attributes: &s.attributes,
            max_attempts: s.policy.max_attempts as i32,
            initial_backoff_ms: ms_i64(s.policy.initial_backoff),
            max_backoff_ms: ms_i64(s.policy.max_backoff),
            multiplier: s.policy.multiplier,
            jitter: s.policy.jitter,
            max_retry_duration_ms: s.policy.max_retry_duration.map_or(0, ms_i64),
            ack_timeout_ms: ms_i64(s.policy.ack_timeout),
            max_deliveries_per_attempt: s.policy.max_deliveries_per_attempt as i32,
            first_enqueued_at: CqlTimestamp(s.first_enqueued_at_ms),
            last_enqueued_at: CqlTimestamp(s.last_enqueued_at_ms),
            updated_at: CqlTimestamp(s.updated_at_ms),
            due_at: CqlTimestamp(s.due_at_ms),
            last_error: &s.last_error,
            loc_day: loc.map(|l| cql_date(l.window.day)),
            loc_window: loc.map(|l| l.window.index as i32),
            loc_instance: loc.map(|l| l.instance.as_str()),
            loc_bucket: loc.map(|l| l.bucket as i32),
            enqueue_count: s.enqueue_count as i32,
            delivery_count: s.delivery_count as i32,
            non_retryable: s.policy.non_retryable.join("\n"),
            ttl: ttl_of(ttl_seconds),
        }
    }

    /// Writes the rows: one statement, or one unlogged batch (each row its own partition).
    /// Two writes of one transaction never share a batch (see `batchable`).
    async fn put(&self, rows: Vec<(TxState, Option<u32>)>) -> StoreResult<Vec<()>> {
        let n = rows.len();
        // Rows in the layout of before 0007 (rare: live when the node was upgraded) go one by
        // one, the rest together.
        let (legacy, rows): (Vec<_>, Vec<_>) =
            rows.into_iter().partition(|(s, _)| s.legacy_columns);
        for (s, ttl) in &legacy {
            self.session
                .execute_unpaged(&self.put_legacy, self.legacy_values(s, *ttl))
                .await
                .map_err(|e| map_execution_error(&e))?;
        }
        let result = if !batchable(rows.iter().map(|(s, _)| (&s.service, &s.transaction_id))) {
            let mut result = Ok(());
            for (s, ttl) in &rows {
                result = self
                    .session
                    .execute_unpaged(&self.put, self.values(s, *ttl))
                    .await
                    .map(|_| ());
                if result.is_err() {
                    break;
                }
            }
            result
        } else {
            let mut batch = Batch::new(BatchType::Unlogged);
            batch.set_is_idempotent(true);
            let values: Vec<BodyValues<'_>> = rows
                .iter()
                .map(|(s, ttl)| {
                    batch.append_statement(self.put.clone());
                    self.values(s, *ttl)
                })
                .collect();
            self.session.batch(&batch, values).await.map(|_| ())
        };
        result.map_err(|e| map_execution_error(&e))?;
        Ok(vec![(); n])
    }

    /// Reads the rows of `ids` (of one service) in one query; None where there is none.
    async fn get(&self, service: String, ids: Vec<String>) -> StoreResult<Vec<Option<TxState>>> {
        let rows: Vec<BodyRow> = self.select(&self.get, &service, &ids).await?;
        let mut found = std::collections::HashMap::with_capacity(ids.len());
        let mut legacy = Vec::new();
        for row in rows {
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
            let rows: Vec<StateRow> = self.select(&self.get_legacy, &service, &legacy).await?;
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
        self.session
            .execute_unpaged(ps, (&self.region, &self.cluster, service, ids))
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

impl std::fmt::Debug for CassandraStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CassandraStore")
            .field("region", &self.region)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

/// The columns of a state row written before schema 0007 (one per field).
const LEGACY_STATE_COLUMNS: &str =
    "status, generation, attempt, payload, attributes, max_attempts, \
     initial_backoff_ms, max_backoff_ms, multiplier, jitter, max_retry_duration_ms, \
     ack_timeout_ms, max_deliveries_per_attempt, first_enqueued_at, last_enqueued_at, updated_at, \
     due_at, last_error, loc_day, loc_window, loc_instance, loc_bucket, enqueue_count, \
     delivery_count, non_retryable";

impl CassandraStore {
    /// Prepares every statement against `keyspace`, which must already be migrated.
    pub async fn new(session: Arc<Session>, o: &CassandraOptions) -> StoreResult<Self> {
        let ks = &o.keyspace;
        let prep = |cql: String| {
            let session = session.clone();
            async move {
                let mut ps = session
                    .prepare(cql.clone())
                    .await
                    .map_err(|e| map_prepare_error(&e, &cql))?;
                ps.set_is_idempotent(true);
                Ok::<_, StoreError>(ps)
            }
        };
        let legacy_binds = vec!["?"; 4 + LEGACY_STATE_COLUMNS.split(',').count()].join(", ");
        let st = Statements {
            put_day: prep(format!(
                "INSERT INTO {ks}.days_by_year (region, cluster, year, day) VALUES (?, ?, ?, ?)"
            ))
            .await?,
            put_window: prep(format!(
                "INSERT INTO {ks}.windows_by_day (region, cluster, day, window) VALUES (?, ?, ?, ?)"
            ))
            .await?,
            put_instance: prep(format!(
                "INSERT INTO {ks}.instances_by_window \
                 (region, cluster, day, window, instance_token, service, instance) \
                 VALUES (?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            put_bucket: prep(format!(
                "INSERT INTO {ks}.buckets_by_instance \
                 (region, cluster, day, window, service, instance, bucket) \
                 VALUES (?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            put_pointer: prep(format!(
                "INSERT INTO {ks}.retry_transactions_by_bucket \
                 (region, cluster, day, window, service, instance, bucket, transaction_id, \
                  generation, attempt, enqueued_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
            put_state: prep(format!(
                "INSERT INTO {ks}.transactions (region, cluster, service, transaction_id, \
                 status, generation, payload, body, succeeded_generation) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
            ))
            .await?,
            put_state_legacy: prep(format!(
                "INSERT INTO {ks}.transactions (region, cluster, service, transaction_id, \
                 {LEGACY_STATE_COLUMNS}) VALUES ({legacy_binds}) USING TTL ?"
            ))
            .await?,
            put_cancel: prep(format!(
                "UPDATE {ks}.transactions USING TTL ? SET cancelled_generation = ? \
                 WHERE region = ? AND cluster = ? AND service = ? AND transaction_id = ?"
            ))
            .await?,
            get_states: prep(format!(
                "SELECT transaction_id, status, generation, payload, body, cancelled_generation, \
                 succeeded_generation FROM {ks}.transactions \
                 WHERE region = ? AND cluster = ? AND service = ? AND transaction_id IN ?"
            ))
            .await?,
            get_states_legacy: prep(format!(
                "SELECT transaction_id, {LEGACY_STATE_COLUMNS}, cancelled_generation, \
                 succeeded_generation FROM {ks}.transactions \
                 WHERE region = ? AND cluster = ? AND service = ? AND transaction_id IN ?"
            ))
            .await?,
            list_days: prep(format!(
                "SELECT day FROM {ks}.days_by_year WHERE region = ? AND cluster = ? AND year = ?"
            ))
            .await?,
            // The years that hold a day: one partition key per (ns, year), a handful in all,
            // read by key only (DISTINCT cannot restrict part of a partition key).
            list_years: prep(format!(
                "SELECT DISTINCT region, cluster, year FROM {ks}.days_by_year"
            ))
            .await?,
            list_instances: prep(format!(
                "SELECT instance_token, service, instance FROM {ks}.instances_by_window \
                 WHERE region = ? AND cluster = ? AND day = ? AND window = ? \
                 AND instance_token >= ? AND instance_token <= ?"
            ))
            .await?,
            list_buckets: prep(format!(
                "SELECT bucket FROM {ks}.buckets_by_instance WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND service = ? AND instance = ?"
            ))
            .await?,
            list_pointers: prep(format!(
                "SELECT transaction_id, generation, attempt, enqueued_at \
                 FROM {ks}.retry_transactions_by_bucket WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND service = ? AND instance = ? AND bucket = ?"
            ))
            .await?,
            put_dead_letter: prep(format!(
                "INSERT INTO {ks}.dead_letters (region, cluster, service, day, dead_at, \
                 transaction_id, attempt, last_error, generation) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
            ))
            .await?,
            delete_pointer_partition: prep(format!(
                "DELETE FROM {ks}.retry_transactions_by_bucket WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND service = ? AND instance = ? AND bucket = ?"
            ))
            .await?,
            delete_pointer: prep(format!(
                "DELETE FROM {ks}.retry_transactions_by_bucket WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND service = ? AND instance = ? AND bucket = ? \
                 AND transaction_id = ?"
            ))
            .await?,
            delete_bucket: prep(format!(
                "DELETE FROM {ks}.buckets_by_instance WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND service = ? AND instance = ? AND bucket = ?"
            ))
            .await?,
            delete_instance: prep(format!(
                "DELETE FROM {ks}.instances_by_window WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ? AND instance_token = ? AND service = ? AND instance = ?"
            ))
            .await?,
            any_instance: prep(format!(
                "SELECT instance_token FROM {ks}.instances_by_window WHERE region = ? \
                 AND cluster = ? AND day = ? AND window = ? LIMIT 1"
            ))
            .await?,
            delete_window_instances: prep(format!(
                "DELETE FROM {ks}.instances_by_window WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ?"
            ))
            .await?,
            delete_window: prep(format!(
                "DELETE FROM {ks}.windows_by_day WHERE region = ? AND cluster = ? AND day = ? \
                 AND window = ?"
            ))
            .await?,
            delete_day: prep(format!(
                "DELETE FROM {ks}.days_by_year WHERE region = ? AND cluster = ? AND year = ? \
                 AND day = ?"
            ))
            .await?,
            get_low_water: prep(format!(
                "SELECT low_window FROM {ks}.window_low_water WHERE region = ? AND cluster = ? \
                 AND day = ?"
            ))
            .await?,
            server_time: match prep("SELECT currentTimestamp() FROM system.local".to_string()).await
            {
                Ok(ps) => Some(ps),
                Err(e) => {
                    tracing::warn!(error = %e, "this database cannot report its clock; clock sync is off");
                    None
                }
            },
            set_low_water: prep(format!(
                "INSERT INTO {ks}.window_low_water (region, cluster, day, low_window) \
                 VALUES (?, ?, ?, ?)"
            ))
            .await?,
            delete_low_water: prep(format!(
                "DELETE FROM {ks}.window_low_water WHERE region = ? AND cluster = ? AND day = ?"
            ))
            .await?,
            list_windows_from: prep(format!(
                "SELECT window FROM {ks}.windows_by_day WHERE region = ? AND cluster = ? \
                 AND day = ? AND window >= ?"
            ))
            .await?,
            heartbeat: prep(format!(
                "INSERT INTO {ks}.ring_members (region, cluster, node_id, address, boot_epoch, \
                 heartbeat_at) VALUES (?, ?, ?, ?, ?, ?) USING TTL ?"
            ))
            .await?,
            list_members: prep(format!(
                "SELECT node_id, address, boot_epoch, heartbeat_at, WRITETIME(heartbeat_at) \
                 FROM {ks}.ring_members WHERE region = ? AND cluster = ?"
            ))
            .await?,
            read_lease: {
                let mut ps = prep(format!(
                    "SELECT slot, owner, epoch, expires_at, address, taken_at, released_at, \
                     released_epoch FROM {ks}.ring_leases \
                     WHERE region = ? AND cluster = ? AND slot = ?"
                ))
                .await?;
                ps.set_consistency(o.serial_as_read_consistency());
                ps
            },
            peek_leases: prep(format!(
                "SELECT slot, owner, epoch, expires_at, address, taken_at, released_at, \
                 released_epoch FROM {ks}.ring_leases WHERE region = ? AND cluster = ? AND slot IN ?"
            ))
            .await?,
            create_lease: {
                // A lightweight transaction: never retried blindly by the driver.
                let mut ps = prep(format!(
                    "INSERT INTO {ks}.ring_leases (region, cluster, slot, owner, epoch, \
                     expires_at, address, taken_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
                ))
                .await?;
                ps.set_is_idempotent(false);
                ps
            },
            replace_lease: {
                let mut ps = prep(format!(
                    "UPDATE {ks}.ring_leases SET owner = ?, epoch = ?, expires_at = ?, address = ? \
                     WHERE region = ? AND cluster = ? AND slot = ? IF epoch = ?"
                ))
                .await?;
                ps.set_is_idempotent(false);
                ps
            },
            take_lease: {
                let mut ps = prep(format!(
                    "UPDATE {ks}.ring_leases SET owner = ?, epoch = ?, expires_at = ?, address = ?, \
                     taken_at = ? WHERE region = ? AND cluster = ? AND slot = ? IF epoch = ?"
                ))
                .await?;
                ps.set_is_idempotent(false);
                ps
            },
            release_lease: {
                let mut ps = prep(format!(
                    "UPDATE {ks}.ring_leases SET owner = ?, epoch = ?, expires_at = ?, address = ?, \
                     released_at = ?, released_epoch = ? \
                     WHERE region = ? AND cluster = ? AND slot = ? IF epoch = ?"
                ))
                .await?;
                ps.set_is_idempotent(false);
                ps
            },
            list_services: prep(format!(
                "SELECT service, seen_at, paused, paused_at, policy, limits, updated_at \
                 FROM {ks}.services WHERE region = ? AND cluster = ?"
            ))
            .await?,
            touch_service: prep(format!(
                "UPDATE {ks}.services SET seen_at = ? WHERE region = ? AND cluster = ? \
                 AND service = ?"
            ))
            .await?,
            pause_service: prep(format!(
                "UPDATE {ks}.services SET paused = true, paused_at = ?, updated_at = ? \
                 WHERE region = ? AND cluster = ? AND service = ?"
            ))
            .await?,
            // Resuming keeps paused_at (the last pause) rather than writing a null cell.
            resume_service: prep(format!(
                "UPDATE {ks}.services SET paused = false, updated_at = ? \
                 WHERE region = ? AND cluster = ? AND service = ?"
            ))
            .await?,
            set_service_policy: prep(format!(
                "UPDATE {ks}.services SET policy = ?, updated_at = ? \
                 WHERE region = ? AND cluster = ? AND service = ?"
            ))
            .await?,
            set_service_limits: prep(format!(
                "UPDATE {ks}.services SET limits = ?, updated_at = ? \
                 WHERE region = ? AND cluster = ? AND service = ?"
            ))
            .await?,
            list_dead_letters: prep(format!(
                "SELECT dead_at, transaction_id, attempt, last_error, generation, redriven_at \
                 FROM {ks}.dead_letters WHERE region = ? AND cluster = ? AND service = ? \
                 AND day = ? AND dead_at >= ? AND dead_at < ?"
            ))
            .await?,
            mark_redriven: prep(format!(
                "UPDATE {ks}.dead_letters SET redriven_at = ? WHERE region = ? AND cluster = ? \
                 AND service = ? AND day = ? AND dead_at = ? AND transaction_id = ?"
            ))
            .await?,
            delete_dead_letter_day: prep(format!(
                "DELETE FROM {ks}.dead_letters WHERE region = ? AND cluster = ? AND service = ? \
                 AND day = ?"
            ))
            .await?,
            delete_dead_letter_range: prep(format!(
                "DELETE FROM {ks}.dead_letters WHERE region = ? AND cluster = ? AND service = ? \
                 AND day = ? AND dead_at >= ? AND dead_at < ?"
            ))
            .await?,
            count_pointers: prep(format!(
                "SELECT COUNT(*) FROM {ks}.retry_transactions_by_bucket WHERE region = ? \
                 AND cluster = ? AND day = ? AND window = ? AND service = ? AND instance = ? \
                 AND bucket = ?"
            ))
            .await?,
            day_listed: prep(format!(
                "SELECT day FROM {ks}.days_by_year WHERE region = ? AND cluster = ? AND year = ? \
                 AND day = ?"
            ))
            .await?,
            window_listed: prep(format!(
                "SELECT window FROM {ks}.windows_by_day WHERE region = ? AND cluster = ? \
                 AND day = ? AND window = ?"
            ))
            .await?,
        };
        let io = Arc::new(StateIo {
            session: session.clone(),
            region: o.region.clone(),
            cluster: o.cluster.clone(),
            put: st.put_state.clone(),
            put_legacy: st.put_state_legacy.clone(),
            get: st.get_states.clone(),
            get_legacy: st.get_states_legacy.clone(),
        });
        let reader = io.clone();
        let state_io = io.clone();
        let state_reads = Coalescer::new(
            Limits {
                max_items: STATE_READ_BATCH,
                max_weight: usize::MAX,
                parallel: STATE_READS_PARALLEL,
            },
            Arc::new(move |service, ids| {
                let io = reader.clone();
                Box::pin(async move { io.get(service, ids).await })
            }),
        );
        let state_writes = Coalescer::new(
            Limits {
                max_items: STATE_WRITE_BATCH,
                max_weight: STATE_WRITE_BATCH_BYTES,
                parallel: STATE_WRITES_PARALLEL,
            },
            Arc::new(move |(), rows| {
                let io = io.clone();
                Box::pin(async move { io.put(rows).await })
            }),
        );
        Ok(Self {
            session,
            keyspace: o.keyspace.clone(),
            replication: o.replication.clone(),
            region: o.region.clone(),
            cluster: o.cluster.clone(),
            st,
            state_reads,
            state_writes,
            state_io,
        })
    }

    /// State-row reads and writes issued so far, and the rows they carried (coalescing).
    pub fn state_io_counts(&self) -> (Counts, Counts) {
        (self.state_reads.counts(), self.state_writes.counts())
    }

    async fn exec(
        &self,
        ps: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> StoreResult<()> {
        self.session
            .execute_unpaged(ps, values)
            .await
            .map(|_| ())
            .map_err(|e| map_execution_error(&e))
    }

    /// Runs a paged read as a stream of rows, fetched page by page.
    async fn pages<R>(
        &self,
        ps: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> StoreResult<futures::stream::BoxStream<'static, StoreResult<R>>>
    where
        R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm> + Send + 'static,
    {
        let pager = self
            .session
            .execute_iter(ps.clone(), values)
            .await
            .map_err(|e| map_pager_error(&e))?;
        Ok(pager
            .rows_stream::<R>()
            .map_err(|e| StoreError::Internal(format!("unexpected row type: {e}")))?
            .map(|r| r.map_err(|e| map_next_row_error(&e)))
            .boxed())
    }

    /// Runs a paged read and collects every row (directory partitions are small and bounded).
    async fn collect<R>(
        &self,
        ps: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> StoreResult<Vec<R>>
    where
        R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm> + Send + 'static,
    {
        self.pages(ps, values).await?.try_collect().await
    }
}

pub fn cql_date(day: i32) -> CqlDate {
    CqlDate((i64::from(day) + (1i64 << 31)) as u32)
}

pub fn from_cql_date(d: CqlDate) -> i32 {
    (i64::from(d.0) - (1i64 << 31)) as i32
}

fn ms_i64(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Bind values of the state-row upsert, in column order (the last one is the TTL).
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct StateValues<'a> {
    region: &'a str,
    cluster: &'a str,
    service: &'a str,
    transaction_id: &'a str,
    status: &'a str,
    generation: i64,
    attempt: i32,
    payload: &'a [u8],
    attributes: &'a BTreeMap<String, String>,
    max_attempts: i32,
    initial_backoff_ms: i64,
    max_backoff_ms: i64,
    multiplier: f64,
    jitter: f64,
    max_retry_duration_ms: i64,
    ack_timeout_ms: i64,
    max_deliveries_per_attempt: i32,
    first_enqueued_at: CqlTimestamp,
    last_enqueued_at: CqlTimestamp,
    updated_at: CqlTimestamp,
    due_at: CqlTimestamp,
    last_error: &'a str,
    loc_day: Option<CqlDate>,
    loc_window: Option<i32>,
    loc_instance: Option<&'a str>,
    loc_bucket: Option<i32>,
    enqueue_count: i32,
    delivery_count: i32,
    non_retryable: String,
    ttl: i32,
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

/// TTL 0 means "no TTL": live rows are kept until they reach a terminal state.
fn ttl_of(ttl_seconds: Option<u32>) -> i32 {
    ttl_seconds.map_or(0, |t| t.min(i32::MAX as u32) as i32)
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
}

impl BodyRow {
    fn into_state(self, service: &str, transaction_id: &str) -> StoreResult<TxState> {
        let status = parse_status(self.status, service, transaction_id)?;
        let what = format!("{service}/{transaction_id}");
        let mut body = Body::decode_stored(self.body.as_deref().unwrap_or_default(), &what)?;
        Ok(TxState {
            service: service.to_string(),
            transaction_id: transaction_id.to_string(),
            status,
            generation: self.generation.unwrap_or(0),
            attempt: body.attempt,
            payload: self.payload.unwrap_or_default(),
            policy: body.policy_or_default(),
            attributes: body.attributes,
            first_enqueued_at_ms: body.first_enqueued_at_ms,
            last_enqueued_at_ms: body.last_enqueued_at_ms,
            updated_at_ms: body.updated_at_ms,
            due_at_ms: body.due_at_ms,
            last_error: body.last_error,
            location: body.location.map(LocationBody::location),
            enqueue_count: body.enqueue_count,
            delivery_count: body.delivery_count,
            legacy_columns: false,
            base_generation: body.base_generation,
            cancelled_generation: self.cancelled_generation,
            succeeded_generation: self.succeeded_generation,
        }
        .apply_settled())
    }
}

fn parse_status(
    status: Option<String>,
    service: &str,
    transaction_id: &str,
) -> StoreResult<Status> {
    let status_text = status.unwrap_or_default();
    Status::parse(&status_text).ok_or_else(|| {
        StoreError::Internal(format!(
            "state row {service}/{transaction_id} has unknown status {status_text:?}"
        ))
    })
}

/// A state row written before schema 0007, one column per field.
#[derive(DeserializeRow)]
struct StateRow {
    transaction_id: String,
    status: Option<String>,
    generation: Option<i64>,
    attempt: Option<i32>,
    payload: Option<Vec<u8>>,
    attributes: Option<BTreeMap<String, String>>,
    max_attempts: Option<i32>,
    initial_backoff_ms: Option<i64>,
    max_backoff_ms: Option<i64>,
    multiplier: Option<f64>,
    jitter: Option<f64>,
    max_retry_duration_ms: Option<i64>,
    ack_timeout_ms: Option<i64>,
    max_deliveries_per_attempt: Option<i32>,
    first_enqueued_at: Option<CqlTimestamp>,
    last_enqueued_at: Option<CqlTimestamp>,
    updated_at: Option<CqlTimestamp>,
    due_at: Option<CqlTimestamp>,
    last_error: Option<String>,
    loc_day: Option<CqlDate>,
    loc_window: Option<i32>,
    loc_instance: Option<String>,
    loc_bucket: Option<i32>,
    enqueue_count: Option<i32>,
    delivery_count: Option<i32>,
    non_retryable: Option<String>,
    cancelled_generation: Option<i64>,
    succeeded_generation: Option<i64>,
}

impl StateRow {
    fn into_state(self, service: &str, transaction_id: &str) -> StoreResult<TxState> {
        let d = RetryPolicy::default();
        let dur = |v: Option<i64>, dflt: Duration| {
            v.map(|ms| Duration::from_millis(ms.max(0) as u64))
                .unwrap_or(dflt)
        };
        let status = parse_status(self.status, service, transaction_id)?;
        let location = match (
            self.loc_day,
            self.loc_window,
            self.loc_instance,
            self.loc_bucket,
        ) {
            (Some(day), Some(window), Some(instance), Some(bucket)) => Some(Location {
                window: WindowId {
                    day: from_cql_date(day),
                    index: window.max(0) as u32,
                },
                instance,
                bucket: bucket.max(0) as u32,
            }),
            _ => None,
        };
        Ok(TxState {
            service: service.to_string(),
            transaction_id: transaction_id.to_string(),
            status,
            generation: self.generation.unwrap_or(0),
            attempt: self.attempt.unwrap_or(0).max(0) as u32,
            payload: self.payload.unwrap_or_default(),
            attributes: self.attributes.unwrap_or_default(),
            policy: RetryPolicy {
                // 0: unlimited (only ever written for an explicit unlimited_attempts).
                max_attempts: self
                    .max_attempts
                    .map(|v| v.max(0) as u32)
                    .unwrap_or(d.max_attempts),
                initial_backoff: dur(self.initial_backoff_ms, d.initial_backoff),
                max_backoff: dur(self.max_backoff_ms, d.max_backoff),
                multiplier: self.multiplier.unwrap_or(d.multiplier),
                jitter: self.jitter.unwrap_or(d.jitter),
                max_retry_duration: self
                    .max_retry_duration_ms
                    .filter(|ms| *ms > 0)
                    .map(|ms| Duration::from_millis(ms as u64)),
                ack_timeout: dur(self.ack_timeout_ms, d.ack_timeout),
                max_deliveries_per_attempt: self
                    .max_deliveries_per_attempt
                    .map(|v| v.max(1) as u32)
                    .unwrap_or(d.max_deliveries_per_attempt),
                non_retryable: self
                    .non_retryable
                    .unwrap_or_default()
                    .split('\n')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
            },
            first_enqueued_at_ms: self.first_enqueued_at.map_or(0, |t| t.0),
            last_enqueued_at_ms: self.last_enqueued_at.map_or(0, |t| t.0),
            updated_at_ms: self.updated_at.map_or(0, |t| t.0),
            due_at_ms: self.due_at.map_or(0, |t| t.0),
            last_error: self.last_error.unwrap_or_default(),
            location,
            enqueue_count: self.enqueue_count.unwrap_or(0).max(0) as u32,
            delivery_count: self.delivery_count.unwrap_or(0).max(0) as u32,
            legacy_columns: true,
            base_generation: 0,
            cancelled_generation: self.cancelled_generation,
            succeeded_generation: self.succeeded_generation,
        }
        .apply_settled())
    }
}

#[async_trait]
impl DirectoryStore for CassandraStore {
    async fn put_day(&self, year: i32, day: i32) -> StoreResult<()> {
        self.exec(
            &self.st.put_day,
            (&self.region, &self.cluster, year, cql_date(day)),
        )
        .await
    }

    async fn put_window(&self, w: WindowId) -> StoreResult<()> {
        self.exec(
            &self.st.put_window,
            (&self.region, &self.cluster, cql_date(w.day), w.index as i32),
        )
        .await
    }

    async fn put_instance(&self, w: WindowId, row: &InstanceRow) -> StoreResult<()> {
        self.exec(
            &self.st.put_instance,
            (
                &self.region,
                &self.cluster,
                cql_date(w.day),
                w.index as i32,
                row.instance_token,
                &row.service,
                &row.instance,
            ),
        )
        .await
    }

    async fn put_bucket(
        &self,
        w: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()> {
        self.exec(
            &self.st.put_bucket,
            (
                &self.region,
                &self.cluster,
                cql_date(w.day),
                w.index as i32,
                service,
                instance,
                bucket as i32,
            ),
        )
        .await
    }

    async fn put_pointer(&self, service: &str, loc: &Location, p: &Pointer) -> StoreResult<()> {
        self.exec(
            &self.st.put_pointer,
            (
                &self.region,
                &self.cluster,
                cql_date(loc.window.day),
                loc.window.index as i32,
                service,
                &loc.instance,
                loc.bucket as i32,
                &p.transaction_id,
                p.generation,
                p.attempt as i32,
                CqlTimestamp(p.enqueued_at_ms),
            ),
        )
        .await
    }

    async fn put_pointers(
        &self,
        service: &str,
        loc: &Location,
        pointers: &[Pointer],
    ) -> StoreResult<()> {
        // Two pointers of one transaction never share a batch (see `batchable`).
        if !batchable(pointers.iter().map(|p| &p.transaction_id)) {
            for p in pointers {
                self.put_pointer(service, loc, p).await?;
            }
            return Ok(());
        }
        let mut batch = Batch::new(BatchType::Unlogged);
        batch.set_is_idempotent(true);
        let day = cql_date(loc.window.day);
        let window = loc.window.index as i32;
        let bucket = loc.bucket as i32;
        let mut values = Vec::with_capacity(pointers.len());
        for p in pointers {
            batch.append_statement(self.st.put_pointer.clone());
            values.push((
                &self.region,
                &self.cluster,
                day,
                window,
                service,
                &loc.instance,
                bucket,
                &p.transaction_id,
                p.generation,
                p.attempt as i32,
                CqlTimestamp(p.enqueued_at_ms),
            ));
        }
        self.session
            .batch(&batch, values)
            .await
            .map(|_| ())
            .map_err(|e| map_execution_error(&e))
    }

    async fn list_years(&self) -> StoreResult<Vec<i32>> {
        let rows: Vec<(String, String, i32)> = self.collect(&self.st.list_years, ()).await?;
        let mut years: Vec<i32> = rows
            .into_iter()
            .filter(|(r, c, _)| *r == self.region && *c == self.cluster)
            .map(|(_, _, y)| y)
            .collect();
        years.sort_unstable();
        years.dedup();
        Ok(years)
    }

    async fn list_days(&self, year: i32) -> StoreResult<Vec<i32>> {
        let rows: Vec<(CqlDate,)> = self
            .collect(&self.st.list_days, (&self.region, &self.cluster, year))
            .await?;
        Ok(rows.into_iter().map(|(d,)| from_cql_date(d)).collect())
    }

    async fn list_instances(&self, w: WindowId, r: TokenRange) -> StoreResult<Vec<InstanceRow>> {
        let rows: Vec<(i64, String, String)> = self
            .collect(
                &self.st.list_instances,
                (
                    &self.region,
                    &self.cluster,
                    cql_date(w.day),
                    w.index as i32,
                    r.start,
                    r.end,
                ),
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|(instance_token, service, instance)| InstanceRow {
                instance_token,
                service,
                instance,
            })
            .collect())
    }

    async fn list_buckets(
        &self,
        w: WindowId,
        service: &str,
        instance: &str,
    ) -> StoreResult<Vec<u32>> {
        let rows: Vec<(i32,)> = self
            .collect(
                &self.st.list_buckets,
                (
                    &self.region,
                    &self.cluster,
                    cql_date(w.day),
                    w.index as i32,
                    service,
                    instance,
                ),
            )
            .await?;
        Ok(rows.into_iter().map(|(b,)| b.max(0) as u32).collect())
    }

    async fn stream_pointers(
        &self,
        service: &str,
        loc: &Location,
    ) -> StoreResult<futures::stream::BoxStream<'static, StoreResult<Pointer>>> {
        let rows = self
            .pages::<(String, i64, i32, CqlTimestamp)>(
                &self.st.list_pointers,
                (
                    &self.region,
                    &self.cluster,
                    cql_date(loc.window.day),
                    loc.window.index as i32,
                    service,
                    &loc.instance,
                    loc.bucket as i32,
                ),
            )
            .await?;
        Ok(rows
            .map_ok(|(transaction_id, generation, attempt, at)| Pointer {
                transaction_id,
                generation,
                attempt: attempt.max(0) as u32,
                enqueued_at_ms: at.0,
            })
            .boxed())
    }

    async fn delete_pointer_partition(&self, service: &str, loc: &Location) -> StoreResult<()> {
        self.exec(
            &self.st.delete_pointer_partition,
            (
                &self.region,
                &self.cluster,
                cql_date(loc.window.day),
                loc.window.index as i32,
                service,
                &loc.instance,
                loc.bucket as i32,
            ),
        )
        .await
    }

    async fn delete_late_pointer(
        &self,
        service: &str,
        loc: &Location,
        transaction_id: &str,
    ) -> StoreResult<()> {
        self.exec(
            &self.st.delete_pointer,
            (
                &self.region,
                &self.cluster,
                cql_date(loc.window.day),
                loc.window.index as i32,
                service,
                &loc.instance,
                loc.bucket as i32,
                transaction_id,
            ),
        )
        .await
    }

    async fn delete_bucket(
        &self,
        w: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()> {
        self.exec(
            &self.st.delete_bucket,
            (
                &self.region,
                &self.cluster,
                cql_date(w.day),
                w.index as i32,
                service,
                instance,
                bucket as i32,
            ),
        )
        .await
    }

    async fn delete_instance(&self, w: WindowId, row: &InstanceRow) -> StoreResult<()> {
        self.exec(
            &self.st.delete_instance,
            (
                &self.region,
                &self.cluster,
                cql_date(w.day),
                w.index as i32,
                row.instance_token,
                &row.service,
                &row.instance,
            ),
        )
        .await
    }

    async fn window_has_instances(&self, w: WindowId) -> StoreResult<bool> {
        let rows: Vec<(i64,)> = self
            .collect(
                &self.st.any_instance,
                (&self.region, &self.cluster, cql_date(w.day), w.index as i32),
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn delete_window_instances(&self, w: WindowId) -> StoreResult<()> {
        self.exec(
            &self.st.delete_window_instances,
            (&self.region, &self.cluster, cql_date(w.day), w.index as i32),
        )
        .await
    }

    async fn delete_window(&self, w: WindowId) -> StoreResult<()> {
        self.exec(
            &self.st.delete_window,
            (&self.region, &self.cluster, cql_date(w.day), w.index as i32),
        )
        .await
    }

    async fn delete_day(&self, year: i32, day: i32) -> StoreResult<()> {
        self.exec(
            &self.st.delete_day,
            (&self.region, &self.cluster, year, cql_date(day)),
        )
        .await
    }

    async fn count_pointers(&self, service: &str, loc: &Location) -> StoreResult<u64> {
        let rows: Vec<(i64,)> = self
            .collect(
                &self.st.count_pointers,
                (
                    &self.region,
                    &self.cluster,
                    cql_date(loc.window.day),
                    loc.window.index as i32,
                    service,
                    &loc.instance,
                    loc.bucket as i32,
                ),
            )
            .await?;
        Ok(rows.first().map_or(0, |r| r.0.max(0) as u64))
    }

    async fn day_listed(&self, year: i32, day: i32) -> StoreResult<bool> {
        let rows: Vec<(CqlDate,)> = self
            .collect(
                &self.st.day_listed,
                (&self.region, &self.cluster, year, cql_date(day)),
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn window_listed(&self, w: WindowId) -> StoreResult<bool> {
        let rows: Vec<(i32,)> = self
            .collect(
                &self.st.window_listed,
                (&self.region, &self.cluster, cql_date(w.day), w.index as i32),
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn low_water(&self, day: i32) -> StoreResult<u32> {
        let rows: Vec<(Option<i32>,)> = self
            .collect(
                &self.st.get_low_water,
                (&self.region, &self.cluster, cql_date(day)),
            )
            .await?;
        Ok(rows
            .first()
            .and_then(|r| r.0)
            .map_or(0, |w| w.max(0) as u32))
    }

    async fn set_low_water(&self, day: i32, window: u32) -> StoreResult<()> {
        self.exec(
            &self.st.set_low_water,
            (&self.region, &self.cluster, cql_date(day), window as i32),
        )
        .await
    }

    async fn delete_low_water(&self, day: i32) -> StoreResult<()> {
        self.exec(
            &self.st.delete_low_water,
            (&self.region, &self.cluster, cql_date(day)),
        )
        .await
    }

    async fn list_windows_from(&self, day: i32, from: u32) -> StoreResult<Vec<u32>> {
        let rows: Vec<(i32,)> = self
            .collect(
                &self.st.list_windows_from,
                (&self.region, &self.cluster, cql_date(day), from as i32),
            )
            .await?;
        Ok(rows.into_iter().map(|(w,)| w.max(0) as u32).collect())
    }
}

#[async_trait]
impl StateStore for CassandraStore {
    async fn put_state(&self, s: &TxState, ttl_seconds: Option<u32>) -> StoreResult<()> {
        self.state_writes
            .submit((), (s.clone(), ttl_seconds), state_write_weight(s))
            .await
    }

    async fn cancel_state(
        &self,
        state: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<()> {
        // One partition, one batch: the CANCELLED row and the cancel cell land together.
        let io = &self.state_io;
        let mut batch = Batch::new(BatchType::Unlogged);
        batch.set_is_idempotent(true);
        let cancel = (
            ttl_of(Some(cancel_ttl_seconds)),
            state.generation,
            &self.region,
            &self.cluster,
            &state.service,
            &state.transaction_id,
        );
        let r = if state.legacy_columns {
            batch.append_statement(io.put_legacy.clone());
            batch.append_statement(self.st.put_cancel.clone());
            self.session
                .batch(&batch, (io.legacy_values(state, Some(ttl_seconds)), cancel))
                .await
        } else {
            batch.append_statement(io.put.clone());
            batch.append_statement(self.st.put_cancel.clone());
            self.session
                .batch(&batch, (io.values(state, Some(ttl_seconds)), cancel))
                .await
        };
        r.map(|_| ()).map_err(|e| map_execution_error(&e))
    }

    async fn get_state(&self, service: &str, txid: &str) -> StoreResult<Option<TxState>> {
        self.state_reads
            .submit(service.to_string(), txid.to_string(), 1)
            .await
    }

    async fn get_states(&self, service: &str, ids: &[String]) -> StoreResult<Vec<Option<TxState>>> {
        // Futures made up front (they start only when polled): a closure over borrowed chunks
        // would not satisfy async_trait's lifetimes.
        let reads: Vec<_> = ids
            .chunks(STATE_READ_BATCH)
            .map(|chunk| {
                self.state_reads.record(chunk.len());
                let (io, service, chunk) =
                    (self.state_io.clone(), service.to_string(), chunk.to_vec());
                async move { io.get(service, chunk).await }
            })
            .collect();
        let parts: Vec<Vec<Option<TxState>>> = stream::iter(reads)
            .buffered(STATE_READS_PARALLEL)
            .try_collect()
            .await?;
        Ok(parts.into_iter().flatten().collect())
    }

    async fn put_states(&self, rows: Vec<(TxState, Option<u32>)>) -> Vec<StoreResult<()>> {
        // The same limits as coalesced writes: at most STATE_WRITE_BATCH rows and
        // STATE_WRITE_BATCH_BYTES per batch; a heavier row goes alone.
        let mut chunks: Vec<Vec<(TxState, Option<u32>)>> = Vec::new();
        let mut weight = 0;
        for row in rows {
            let w = state_write_weight(&row.0);
            match chunks.last_mut() {
                Some(last)
                    if last.len() < STATE_WRITE_BATCH && weight + w <= STATE_WRITE_BATCH_BYTES =>
                {
                    weight += w;
                    last.push(row);
                }
                _ => {
                    weight = w;
                    chunks.push(vec![row]);
                }
            }
        }
        let writes: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                self.state_writes.record(chunk.len());
                let io = self.state_io.clone();
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
}

#[async_trait]
impl LeaseStore for CassandraStore {
    async fn server_time_ms(&self) -> StoreResult<i64> {
        let ps = self.st.server_time.as_ref().ok_or_else(|| {
            StoreError::Internal("the database has no currentTimestamp() function".into())
        })?;
        let rows: Vec<(CqlTimestamp,)> = self.collect(ps, ()).await?;
        rows.first()
            .map(|r| r.0 .0)
            .ok_or_else(|| StoreError::Internal("system.local returned no row".into()))
    }

    async fn heartbeat(&self, m: &Member, ttl_seconds: u32) -> StoreResult<()> {
        self.exec(
            &self.st.heartbeat,
            (
                &self.region,
                &self.cluster,
                &m.node_id,
                &m.address,
                m.boot_epoch,
                CqlTimestamp(m.heartbeat_at_ms),
                ttl_seconds.min(i32::MAX as u32) as i32,
            ),
        )
        .await
    }

    async fn list_members(&self) -> StoreResult<Vec<Member>> {
        type Row = (
            String,
            Option<String>,
            Option<i64>,
            Option<CqlTimestamp>,
            Option<i64>,
        );
        let rows: Vec<Row> = self
            .collect(&self.st.list_members, (&self.region, &self.cluster))
            .await?;
        Ok(rows
            .into_iter()
            .map(|(node_id, address, boot_epoch, at, written)| Member {
                node_id,
                address: address.unwrap_or_default(),
                boot_epoch: boot_epoch.unwrap_or(0),
                heartbeat_at_ms: at.map_or(0, |t| t.0),
                written_at_ms: written.map_or(0, |us| us.div_euclid(1000)),
            })
            .collect())
    }

    async fn read_lease(&self, slot: i32) -> StoreResult<Option<LeaseRow>> {
        let rows: Vec<LeaseTuple> = self
            .collect(&self.st.read_lease, (&self.region, &self.cluster, slot))
            .await?;
        Ok(rows.into_iter().next().map(lease_row))
    }

    async fn peek_leases(&self, slots: &[i32]) -> StoreResult<Vec<LeaseRow>> {
        let rows: Vec<LeaseTuple> = self
            .collect(&self.st.peek_leases, (&self.region, &self.cluster, slots))
            .await?;
        Ok(rows.into_iter().map(lease_row).collect())
    }

    async fn create_lease(&self, l: &LeaseRow) -> StoreResult<Cas> {
        let res = self
            .session
            .execute_unpaged(
                &self.st.create_lease,
                (
                    &self.region,
                    &self.cluster,
                    l.slot,
                    &l.owner,
                    l.epoch,
                    CqlTimestamp(l.expires_at_ms),
                    &l.address,
                    CqlTimestamp(l.taken_at_ms),
                ),
            )
            .await
            .map_err(|e| map_execution_error(&e))?;
        cas_outcome(res, l.slot)
    }

    async fn replace_lease(
        &self,
        l: &LeaseRow,
        expected_epoch: i64,
        change: LeaseChange,
    ) -> StoreResult<Cas> {
        let (owner, epoch, exp, addr) =
            (&l.owner, l.epoch, CqlTimestamp(l.expires_at_ms), &l.address);
        let key = (&self.region, &self.cluster, l.slot, expected_epoch);
        let res = match change {
            LeaseChange::Renew => {
                self.session
                    .execute_unpaged(
                        &self.st.replace_lease,
                        (owner, epoch, exp, addr, key.0, key.1, key.2, key.3),
                    )
                    .await
            }
            LeaseChange::Take => {
                self.session
                    .execute_unpaged(
                        &self.st.take_lease,
                        (
                            owner,
                            epoch,
                            exp,
                            addr,
                            CqlTimestamp(l.taken_at_ms),
                            key.0,
                            key.1,
                            key.2,
                            key.3,
                        ),
                    )
                    .await
            }
            LeaseChange::Release => {
                self.session
                    .execute_unpaged(
                        &self.st.release_lease,
                        (
                            owner,
                            epoch,
                            exp,
                            addr,
                            CqlTimestamp(l.released_at_ms),
                            l.released_epoch,
                            key.0,
                            key.1,
                            key.2,
                            key.3,
                        ),
                    )
                    .await
            }
        }
        .map_err(|e| map_execution_error(&e))?;
        cas_outcome(res, l.slot)
    }
}

#[async_trait]
impl ServiceStore for CassandraStore {
    async fn list_services(&self) -> StoreResult<Vec<ServiceRow>> {
        type Row = (
            String,
            Option<CqlTimestamp>,
            Option<bool>,
            Option<CqlTimestamp>,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Option<CqlTimestamp>,
        );
        let rows: Vec<Row> = self
            .collect(&self.st.list_services, (&self.region, &self.cluster))
            .await?;
        Ok(rows
            .into_iter()
            .map(
                |(service, seen, paused, paused_at, policy, limits, updated)| ServiceRow {
                    service,
                    seen_at_ms: seen.map(|t| t.0),
                    paused: paused.unwrap_or(false),
                    paused_at_ms: paused_at.map(|t| t.0),
                    policy: policy.unwrap_or_default(),
                    limits: limits.unwrap_or_default(),
                    updated_at_ms: updated.map(|t| t.0),
                },
            )
            .collect())
    }

    async fn touch_service(&self, service: &str, now_ms: i64) -> StoreResult<()> {
        self.exec(
            &self.st.touch_service,
            (CqlTimestamp(now_ms), &self.region, &self.cluster, service),
        )
        .await
    }

    async fn set_service_paused(&self, service: &str, paused: bool, now: i64) -> StoreResult<()> {
        if paused {
            self.exec(
                &self.st.pause_service,
                (
                    CqlTimestamp(now),
                    CqlTimestamp(now),
                    &self.region,
                    &self.cluster,
                    service,
                ),
            )
            .await
        } else {
            self.exec(
                &self.st.resume_service,
                (CqlTimestamp(now), &self.region, &self.cluster, service),
            )
            .await
        }
    }

    async fn set_service_policy(&self, service: &str, policy: &[u8], now: i64) -> StoreResult<()> {
        self.exec(
            &self.st.set_service_policy,
            (
                policy,
                CqlTimestamp(now),
                &self.region,
                &self.cluster,
                service,
            ),
        )
        .await
    }

    async fn set_service_limits(&self, service: &str, limits: &[u8], now: i64) -> StoreResult<()> {
        self.exec(
            &self.st.set_service_limits,
            (
                limits,
                CqlTimestamp(now),
                &self.region,
                &self.cluster,
                service,
            ),
        )
        .await
    }
}

#[async_trait]
impl MigrationStore for CassandraStore {
    async fn migrate(&self, now_ms: i64) -> StoreResult<Vec<i32>> {
        super::migrate::migrate(&self.session, &self.keyspace, &self.replication, now_ms).await
    }

    async fn applied_migrations(&self) -> StoreResult<Vec<i32>> {
        super::migrate::applied(&self.session, &self.keyspace).await
    }
}

#[async_trait]
impl DeadLetterStore for CassandraStore {
    async fn put_dead_letter(&self, d: &DeadLetter, ttl_seconds: u32) -> StoreResult<()> {
        self.exec(
            &self.st.put_dead_letter,
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
                &self.st.list_dead_letters,
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
        self.exec(
            &self.st.mark_redriven,
            (
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
            &self.st.delete_dead_letter_day,
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
            &self.st.delete_dead_letter_range,
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

type LeaseTuple = (
    i32,
    Option<String>,
    Option<i64>,
    Option<CqlTimestamp>,
    Option<String>,
    Option<CqlTimestamp>,
    Option<CqlTimestamp>,
    Option<i64>,
);

fn lease_row(
    (slot, owner, epoch, expires, address, taken, released, released_epoch): LeaseTuple,
) -> LeaseRow {
    LeaseRow {
        slot,
        owner: owner.unwrap_or_default(),
        epoch: epoch.unwrap_or(0),
        expires_at_ms: expires.map_or(0, |t| t.0),
        address: address.unwrap_or_default(),
        taken_at_ms: taken.map_or(0, |t| t.0),
        released_at_ms: released.map_or(0, |t| t.0),
        released_epoch: released_epoch.unwrap_or(0),
    }
}

/// Reads an LWT result. Cassandra answers `[applied]` alone when applied, and `[applied]`
/// plus the current row when not; the first column is the verdict either way.
fn cas_outcome(res: scylla::response::query_result::QueryResult, slot: i32) -> StoreResult<Cas> {
    use scylla::value::CqlValue;
    let rows = res
        .into_rows_result()
        .map_err(|e| StoreError::Internal(format!("LWT returned no rows result: {e}")))?;
    let names: Vec<String> = rows
        .column_specs()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    let Some(row) = rows
        .rows::<scylla::value::Row>()
        .map_err(|e| StoreError::Internal(format!("LWT result: {e}")))?
        .next()
        .transpose()
        .map_err(|e| StoreError::Internal(format!("LWT result: {e}")))?
    else {
        return Err(StoreError::Internal("LWT returned no row".into()));
    };
    let applied = matches!(row.columns.first(), Some(Some(CqlValue::Boolean(true))));
    if applied {
        return Ok(Cas::Applied);
    }
    let col = |name: &str| {
        names
            .iter()
            .position(|n| n == name)
            .and_then(|i| row.columns.get(i).cloned().flatten())
    };
    let current = col("epoch").map(|epoch| LeaseRow {
        slot,
        owner: match col("owner") {
            Some(CqlValue::Text(s)) => s,
            _ => String::new(),
        },
        epoch: match epoch {
            CqlValue::BigInt(v) => v,
            _ => 0,
        },
        expires_at_ms: match col("expires_at") {
            Some(CqlValue::Timestamp(t)) => t.0,
            _ => 0,
        },
        address: match col("address") {
            Some(CqlValue::Text(s)) => s,
            _ => String::new(),
        },
        taken_at_ms: 0,
        released_at_ms: 0,
        released_epoch: 0,
    });
    Ok(Cas::Rejected(current))
}

/// Maps a driver error to the three kinds of `StoreError`: the only place that knows them.
pub fn map_execution_error(e: &ExecutionError) -> StoreError {
    match e {
        ExecutionError::RequestTimeout(_) => StoreError::Timeout(e.to_string()),
        ExecutionError::ConnectionPoolError(_) | ExecutionError::EmptyPlan => {
            StoreError::Unavailable(e.to_string())
        }
        ExecutionError::LastAttemptError(a) => map_attempt_error(a, e),
        _ => StoreError::Internal(e.to_string()),
    }
}

fn map_attempt_error(a: &RequestAttemptError, whole: &dyn std::fmt::Display) -> StoreError {
    match a {
        // An unknown outcome (DESIGN.md "Guarantees across nodes"): the request reached the
        // database, which may have applied it on some replicas (a timeout, a replica's write
        // or read failure, an LWT whose outcome Paxos could not tell, 0x1700 CAS_WRITE_UNKNOWN),
        // or the connection broke after it was sent. Never "nothing was written".
        RequestAttemptError::DbError(db, _) => match db {
            DbError::ReadTimeout { .. }
            | DbError::WriteTimeout { .. }
            | DbError::ReadFailure { .. }
            | DbError::WriteFailure { .. }
            | DbError::Other(0x1700) => StoreError::Timeout(whole.to_string()),
            // Refused before it ran: nothing was written.
            DbError::Unavailable { .. }
            | DbError::Overloaded
            | DbError::IsBootstrapping
            | DbError::RateLimitReached { .. } => StoreError::Unavailable(whole.to_string()),
            _ => StoreError::Internal(whole.to_string()),
        },
        RequestAttemptError::BrokenConnectionError(_) => StoreError::Timeout(whole.to_string()),
        // Not sent.
        RequestAttemptError::UnableToAllocStreamId => StoreError::Unavailable(whole.to_string()),
        _ => StoreError::Internal(whole.to_string()),
    }
}

fn map_pager_error(e: &PagerExecutionError) -> StoreError {
    match e {
        PagerExecutionError::NextPageError(n) => map_next_page_error(n, e),
        _ => StoreError::Internal(e.to_string()),
    }
}

fn map_next_page_error(
    n: &scylla::errors::NextPageError,
    whole: &dyn std::fmt::Display,
) -> StoreError {
    use scylla::errors::NextPageError as N;
    match n {
        N::RequestFailure(r) => map_request_error(r, whole),
        _ => StoreError::Internal(whole.to_string()),
    }
}

fn map_request_error(
    r: &scylla::errors::RequestError,
    whole: &dyn std::fmt::Display,
) -> StoreError {
    use scylla::errors::RequestError as R;
    match r {
        R::RequestTimeout(_) => StoreError::Timeout(whole.to_string()),
        R::ConnectionPoolError(_) | R::EmptyPlan => StoreError::Unavailable(whole.to_string()),
        R::LastAttemptError(a) => map_attempt_error(a, whole),
        _ => StoreError::Internal(whole.to_string()),
    }
}

fn map_next_row_error(e: &scylla::errors::NextRowError) -> StoreError {
    use scylla::errors::NextRowError as N;
    match e {
        N::NextPageError(n) => map_next_page_error(n, e),
        _ => StoreError::Internal(e.to_string()),
    }
}

fn map_prepare_error(e: &scylla::errors::PrepareError, cql: &str) -> StoreError {
    use scylla::errors::PrepareError as P;
    let msg = format!("cannot prepare {cql:?}: {e}");
    match e {
        P::ConnectionPoolError(_) => StoreError::Unavailable(msg),
        P::AllAttemptsFailed { .. } => StoreError::Unavailable(msg),
        _ => StoreError::Internal(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scylla::errors::{BrokenConnectionErrorKind, WriteType};
    use scylla::statement::Consistency;

    fn kind(a: RequestAttemptError) -> &'static str {
        match map_attempt_error(&a, &"x") {
            StoreError::Timeout(_) => "unknown",
            StoreError::Unavailable(_) => "not written",
            StoreError::Internal(_) => "internal",
        }
    }

    #[test]
    fn outcomes_the_database_did_not_confirm_are_unknown_never_not_written() {
        let db = |e| RequestAttemptError::DbError(e, String::new());
        let c = Consistency::LocalQuorum;
        assert_eq!(
            kind(db(DbError::WriteFailure {
                consistency: c,
                received: 0,
                required: 1,
                numfailures: 1,
                write_type: WriteType::Simple,
            })),
            "unknown"
        );
        assert_eq!(
            kind(db(DbError::ReadFailure {
                consistency: c,
                received: 0,
                required: 1,
                numfailures: 1,
                data_present: false,
            })),
            "unknown"
        );
        assert_eq!(
            kind(db(DbError::WriteTimeout {
                consistency: c,
                received: 0,
                required: 1,
                write_type: WriteType::Cas,
            })),
            "unknown"
        );
        assert_eq!(kind(db(DbError::Other(0x1700))), "unknown");
        let broken = BrokenConnectionErrorKind::UnexpectedStreamId(3).into();
        assert_eq!(
            kind(RequestAttemptError::BrokenConnectionError(broken)),
            "unknown"
        );
        // Refused before running, or never sent: nothing was written.
        assert_eq!(
            kind(db(DbError::Unavailable {
                consistency: c,
                required: 1,
                alive: 0,
            })),
            "not written"
        );
        assert_eq!(kind(db(DbError::Overloaded)), "not written");
        assert_eq!(
            kind(RequestAttemptError::UnableToAllocStreamId),
            "not written"
        );
    }
}
