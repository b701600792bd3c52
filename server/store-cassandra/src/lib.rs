//! The Cassandra implementation of the store. Every statement is prepared once
//! at start and marked idempotent: each one is an upsert of fixed values or a read, so the
//! driver may retry or speculate it safely, and a caller that saw a timeout may replay it.
//! The lease LWTs are the exception, and say so where they are prepared.
//!
//! This file holds the connection, the paging helpers and the driver-error mapping; each
//! table group prepares its own statements and implements its trait in a file of its own
//! (`directory`, `state` with `legacy`, `leases`, `services`, `dead_letters`).

pub mod consistency;
mod dead_letters;
mod directory;
mod finished;
mod holds;
mod leases;
mod legacy;
pub mod metric_definitions;
pub mod migrate;
mod services;
mod state;
mod write_clock;

pub use state::COALESCING;

use std::{collections::HashMap, sync::Arc, time::Duration};

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use scylla::{
    client::{
        execution_profile::ExecutionProfile, session::Session, session_builder::SessionBuilder,
    },
    errors::{DbError, ExecutionError, PagerExecutionError, RequestAttemptError},
    statement::{prepared::PreparedStatement, Consistency, SerialConsistency},
    value::CqlDate,
};

use rebound_store::{MigrationStore, Status, StoreError, StoreResult};

/// Connection settings, in plain values (the node builds them from its configuration).
#[derive(Debug, Clone)]
pub struct CassandraOptions {
    pub contact_points: Vec<String>,
    pub keyspace: String,
    pub replication: String,
    pub region: String,
    pub cluster: String,
    /// A CQL consistency level name (`crate::consistency::Level`), e.g. `LOCAL_QUORUM`.
    pub consistency: String,
    /// `SERIAL` or `LOCAL_SERIAL` (`crate::consistency::Serial`).
    pub serial_consistency: String,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// TLS to Cassandra (None: in clear). Node certificates are checked against the IP
    /// address connected to.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Coordinate every request in this datacenter only (no failover to another): LOCAL_*
    /// consistency then means this DC, for every node that names it. None: the driver's
    /// default (token-aware, any DC).
    pub local_dc: Option<String>,
}

impl CassandraOptions {
    fn consistency(&self) -> StoreResult<Consistency> {
        parse_consistency(&self.consistency).ok_or_else(|| {
            StoreError::Internal(format!("unknown consistency level {:?}", self.consistency))
        })
    }

    fn serial_consistency(&self) -> StoreResult<SerialConsistency> {
        parse_serial_consistency(&self.serial_consistency).ok_or_else(|| {
            StoreError::Internal(format!(
                "unknown serial consistency level {:?}",
                self.serial_consistency
            ))
        })
    }

    /// Reads of lease rows use the serial level, so they see every committed LWT.
    fn serial_as_read_consistency(&self) -> StoreResult<Consistency> {
        Ok(match self.serial_consistency()? {
            SerialConsistency::Serial => Consistency::Serial,
            SerialConsistency::LocalSerial => Consistency::LocalSerial,
        })
    }
}

/// The driver's level for a configured name (`crate::consistency`).
fn parse_consistency(s: &str) -> Option<Consistency> {
    use crate::consistency::Level as L;
    use Consistency as C;
    Some(match L::parse(s)? {
        L::One => C::One,
        L::Two => C::Two,
        L::Three => C::Three,
        L::Quorum => C::Quorum,
        L::All => C::All,
        L::LocalQuorum => C::LocalQuorum,
        L::EachQuorum => C::EachQuorum,
        L::LocalOne => C::LocalOne,
    })
}

fn parse_serial_consistency(s: &str) -> Option<SerialConsistency> {
    use crate::consistency::Serial as S;
    Some(match S::parse(s)? {
        S::Serial => SerialConsistency::Serial,
        S::LocalSerial => SerialConsistency::LocalSerial,
    })
}

/// An open session to the cluster: enough to migrate the keyspace, then to prepare the store
/// on it (`CassandraStore::new`).
#[derive(Clone)]
pub struct Connection {
    session: Arc<Session>,
}

impl Connection {
    /// Brings `keyspace` up to date (see `migrate::migrate`); the versions this call applied.
    pub async fn migrate(
        &self,
        keyspace: &str,
        replication: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<i32>> {
        migrate::migrate(&self.session, keyspace, replication, now_ms).await
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

/// Opens a session with the configured consistency levels and client-side timeout.
pub async fn connect(o: &CassandraOptions) -> StoreResult<Connection> {
    let mut profile = ExecutionProfile::builder();
    if let Some(dc) = &o.local_dc {
        profile = profile.load_balancing_policy(
            scylla::policies::load_balancing::DefaultPolicy::builder()
                .prefer_datacenter(dc.clone())
                .token_aware(true)
                .permit_dc_failover(false)
                .build(),
        );
    }
    let profile = profile
        .consistency(o.consistency()?)
        .serial_consistency(Some(o.serial_consistency()?))
        .request_timeout(Some(o.request_timeout))
        .build();
    SessionBuilder::new()
        .known_nodes(&o.contact_points)
        .tls_context(
            o.tls
                .clone()
                .map(scylla::client::session::TlsContext::Rustls023),
        )
        .connection_timeout(o.connect_timeout)
        .default_execution_profile_handle(profile.into_handle())
        .build()
        .await
        .map(|session| Connection {
            session: Arc::new(session),
        })
        .map_err(|e| {
            StoreError::Unavailable(format!("cannot connect to {:?}: {e}", o.contact_points))
        })
}

/// Keeps trying to connect until `wait` has passed: a node started together with its database
/// waits for it instead of failing.
pub async fn connect_with_wait(o: &CassandraOptions, wait: Duration) -> StoreResult<Connection> {
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

/// Prepares the statements of one keyspace, each marked idempotent (the lease LWTs unmark
/// theirs).
struct Prep {
    session: Arc<Session>,
    keyspace: String,
}

impl Prep {
    fn ks(&self) -> &str {
        &self.keyspace
    }

    async fn prepare(&self, cql: String) -> StoreResult<PreparedStatement> {
        let mut ps = self
            .session
            .prepare(cql.clone())
            .await
            .map_err(|e| map_prepare_error(&e, &cql))?;
        ps.set_is_idempotent(true);
        Ok(ps)
    }
}

/// Interned operation names by statement text.
type OperationNames = std::collections::HashMap<String, (Arc<str>, &'static str)>;

/// The operation label and span name of a statement: its verb and table, as
/// `SELECT transactions` (interned: the statements are a fixed set).
fn operation(cql: &str) -> (Arc<str>, &'static str) {
    static NAMES: std::sync::OnceLock<std::sync::RwLock<OperationNames>> =
        std::sync::OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    if let Some(n) = names.read().expect("operation names").get(cql) {
        return n.clone();
    }
    let words: Vec<&str> = cql.split_whitespace().collect();
    let verb: &'static str = match words.first().map(|w| w.to_ascii_uppercase()) {
        Some(w) if w == "SELECT" => "SELECT",
        Some(w) if w == "INSERT" => "INSERT",
        Some(w) if w == "UPDATE" => "UPDATE",
        Some(w) if w == "DELETE" => "DELETE",
        Some(w) if w == "BEGIN" => "BATCH",
        _ => "OTHER",
    };
    let table = words
        .iter()
        .position(|w| {
            let w = w.to_ascii_uppercase();
            (verb == "UPDATE" && w == "UPDATE") || w == "FROM" || w == "INTO"
        })
        .and_then(|i| words.get(i + 1))
        .map(|t| {
            let t = t.rsplit('.').next().unwrap_or(t);
            t.trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .to_string()
        })
        .unwrap_or_default();
    let name: Arc<str> = if table.is_empty() {
        verb.into()
    } else {
        format!("{verb} {table}").into()
    };
    let mut names = names.write().expect("operation names");
    // Bounded: the node prepares a fixed set of statements.
    if names.len() < 256 {
        names.insert(cql.to_string(), (name.clone(), verb));
    }
    (name, verb)
}

/// The kind of a failed request, for `rebound_store_request_errors_total`.
trait FailureKind {
    fn kind(&self) -> &'static str;
}

impl FailureKind for StoreError {
    fn kind(&self) -> &'static str {
        StoreError::kind(self)
    }
}

impl FailureKind for ExecutionError {
    fn kind(&self) -> &'static str {
        map_execution_error(self).kind()
    }
}

impl FailureKind for PagerExecutionError {
    fn kind(&self) -> &'static str {
        map_pager_error(self).kind()
    }
}

/// Runs `fut`, one request of the statement `cql`, timed into the store metrics, inside a
/// CLIENT span of the database conventions when the current span is traced and sampled.
async fn observed<T, E: FailureKind>(
    cql: &str,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    use opentelemetry::trace::TraceContextExt;
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let (op, verb) = operation(cql);
    let span = if rebound_common::trace::enabled()
        && tracing::Span::current()
            .context()
            .span()
            .span_context()
            .is_sampled()
    {
        let table = op.split_once(' ').map_or("", |(_, t)| t);
        tracing::info_span!(
            target: "rebound_server::store",
            "db",
            otel.name = &*op,
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            db.system.name = "cassandra",
            db.operation.name = verb,
            db.collection.name = table,
            error.type = tracing::field::Empty,
        )
    } else {
        tracing::Span::none()
    };
    let started = std::time::Instant::now();
    let r = fut.instrument(span.clone()).await;
    let failed = r.as_ref().err().map(FailureKind::kind);
    crate::metric_definitions::metrics().store_request(
        &op,
        started.elapsed().as_secs_f64(),
        failed,
    );
    if let Some(kind) = failed {
        rebound_common::trace::failed(&span, kind);
    }
    r
}

/// The Cassandra store for one keyspace and one `ns` (region, cluster).
pub struct CassandraStore {
    session: Arc<Session>,
    keyspace: String,
    replication: String,
    region: String,
    cluster: String,
    directory: directory::Statements,
    state: state::States,
    leases: leases::Statements,
    services: services::Statements,
    holds: holds::Statements,
    dead_letters: dead_letters::Statements,
}

impl std::fmt::Debug for CassandraStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CassandraStore")
            .field("region", &self.region)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl CassandraStore {
    /// Prepares every statement against `keyspace`, which must already be migrated.
    pub async fn new(connection: &Connection, o: &CassandraOptions) -> StoreResult<Self> {
        let session = connection.session.clone();
        let p = Prep {
            session: session.clone(),
            keyspace: o.keyspace.clone(),
        };
        Ok(Self {
            directory: directory::Statements::prepare(&p).await?,
            state: state::States::prepare(&p, &o.region, &o.cluster).await?,
            leases: leases::Statements::prepare(&p, o.serial_as_read_consistency()?).await?,
            services: services::Statements::prepare(&p).await?,
            holds: holds::Statements::prepare(&p).await?,
            dead_letters: dead_letters::Statements::prepare(&p).await?,
            session,
            keyspace: o.keyspace.clone(),
            replication: o.replication.clone(),
            region: o.region.clone(),
            cluster: o.cluster.clone(),
        })
    }

    async fn exec(
        &self,
        ps: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> StoreResult<()> {
        observed(ps.get_statement(), self.session.execute_unpaged(ps, values))
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
        let pager = observed(
            ps.get_statement(),
            self.session.execute_iter(ps.clone(), values),
        )
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

#[async_trait]
impl MigrationStore for CassandraStore {
    async fn migrate(&self, now_ms: i64) -> StoreResult<Vec<i32>> {
        migrate::migrate(&self.session, &self.keyspace, &self.replication, now_ms).await
    }

    async fn applied_migrations(&self) -> StoreResult<Vec<i32>> {
        migrate::applied(&self.session, &self.keyspace).await
    }

    async fn record_settings(
        &self,
        node_id: &str,
        settings: &[(String, String)],
    ) -> StoreResult<Vec<String>> {
        // Once per start: prepared here, not with the data path's statements.
        let ks = &self.keyspace;
        let insert = self
            .session
            .prepare(format!(
                "INSERT INTO {ks}.settings (region, cluster, name, value, recorded_at, \
                 recorded_by) VALUES (?, ?, ?, ?, toTimestamp(now()), ?) IF NOT EXISTS"
            ))
            .await
            .map_err(|e| StoreError::Internal(format!("preparing the settings insert: {e}")))?;
        let mut recorded = Vec::with_capacity(settings.len());
        for (name, value) in settings {
            let res = observed(
                insert.get_statement(),
                self.session
                    .execute_unpaged(&insert, (&self.region, &self.cluster, name, value, node_id)),
            )
            .await
            .map_err(|e| map_execution_error(&e))?;
            let (applied, current) = lwt_result(res)?;
            if applied {
                recorded.push(value.clone());
                continue;
            }
            match current.get("value") {
                Some(scylla::value::CqlValue::Text(v)) => recorded.push(v.clone()),
                other => {
                    return Err(StoreError::Internal(format!(
                        "setting {name} is recorded without a value: {other:?}"
                    )))
                }
            }
        }
        Ok(recorded)
    }
}

pub fn cql_date(day: i32) -> CqlDate {
    CqlDate((i64::from(day) + (1i64 << 31)) as u32)
}

pub fn from_cql_date(d: CqlDate) -> i32 {
    (i64::from(d.0) - (1i64 << 31)) as i32
}

/// Whether rows with these keys can go out as one batch: more than one, and no key twice (the
/// cells of a batch share one timestamp, so Cassandra would merge two writes of one row cell by
/// cell; those go one after the other instead, in the order they were made).
fn batchable<K: std::hash::Hash + Eq>(keys: impl ExactSizeIterator<Item = K>) -> bool {
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    keys.len() > 1 && keys.into_iter().all(|k| seen.insert(k))
}

/// Maps a driver error to the three kinds of `StoreError`: the only place that knows them.
/// A lightweight transaction's answer: whether it applied, and the row as it stands (by column
/// name) when it did not. Cassandra answers `[applied]` alone when applied, and `[applied]`
/// plus the current row (if any) when not; the first column is the verdict either way.
pub(crate) fn lwt_result(
    res: scylla::response::query_result::QueryResult,
) -> StoreResult<(bool, HashMap<String, scylla::value::CqlValue>)> {
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
    let current = names
        .into_iter()
        .zip(row.columns)
        .skip(1)
        .filter_map(|(n, v)| Some((n, v?)))
        .collect();
    Ok((applied, current))
}

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
        // An unknown outcome (docs/architecture.md, "Guarantees across nodes"): the request reached
        // the database, which may have applied it on some replicas (a timeout, a replica's write or
        // read failure, an LWT whose outcome Paxos could not tell, 0x1700 CAS_WRITE_UNKNOWN), or
        // the connection broke after it was sent. Never "nothing was written".
        RequestAttemptError::DbError(db, _) => match db {
            DbError::ReadTimeout { .. }
            | DbError::WriteTimeout { .. }
            | DbError::ReadFailure { .. }
            | DbError::WriteFailure { .. }
            | DbError::Other(0x1700) => StoreError::Timeout(whole.to_string()),
            // Refused before it ran: nothing was written. (Unprepared: the driver has already
            // prepared it again once, and the statement was dropped from Cassandra's cache again
            // before it ran; a later call may succeed.)
            DbError::Unavailable { .. }
            | DbError::Unprepared { .. }
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

/// TTL 0 means "no TTL": live rows are kept until they reach a terminal state.
fn ttl_of(ttl_seconds: Option<u32>) -> i32 {
    ttl_seconds.map_or(0, |t| t.min(i32::MAX as u32) as i32)
}

/// A state row's status cell, in either layout.
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

#[cfg(test)]
mod tests {
    use super::*;
    use scylla::errors::{BrokenConnectionErrorKind, WriteType};
    use scylla::statement::Consistency;

    mod tokens {
        use proptest::prelude::*;
        use rebound_store::token::{instance_token, token_of};
        use scylla::routing::partitioner::{Murmur3Partitioner, Partitioner, PartitionerHasher};

        proptest! {
            /// The contract's own Murmur3 (it does not depend on the driver) is the driver's,
            /// which is Cassandra's: the instance tokens split work as the lease ring does.
            #[test]
            fn the_contract_computes_the_tokens_the_driver_does(
                key in proptest::collection::vec(any::<u8>(), 0..80),
                service in "[a-z-]{1,40}",
                instance in "[0-9a-f-]{0,40}",
            ) {
                prop_assert_eq!(token_of(&key), Murmur3Partitioner.hash_one(&key).value());
                let mut h = Murmur3Partitioner.build_hasher();
                for part in [service.as_bytes(), instance.as_bytes()] {
                    h.write(&(part.len() as u16).to_be_bytes());
                    h.write(part);
                    h.write(&[0]);
                }
                prop_assert_eq!(instance_token(&service, &instance), h.finish().value());
            }
        }
    }

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
