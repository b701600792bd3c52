//! The state-row layout of before schema 0007, one column per field. Rows still live in it
//! when the node was upgraded are read and written back in it until they finish
//! (`TxState::legacy_columns`); new rows use the `body` cell (`state.rs`).

use std::{collections::BTreeMap, time::Duration};

use scylla::{
    statement::prepared::PreparedStatement,
    value::{CqlDate, CqlTimestamp},
    DeserializeRow, SerializeRow,
};

use super::{cql_date, from_cql_date, parse_status, ttl_of, Prep};
use rebound_store::{policy::RetryPolicy, window::WindowId, Location, StoreResult, TxState};

/// The columns of a state row written before schema 0007 (one per field).
const LEGACY_STATE_COLUMNS: &str =
    "status, generation, attempt, payload, attributes, max_attempts, \
     initial_backoff_ms, max_backoff_ms, multiplier, jitter, max_retry_duration_ms, \
     ack_timeout_ms, max_deliveries_per_attempt, first_enqueued_at, last_enqueued_at, updated_at, \
     due_at, last_error, loc_day, loc_window, loc_instance, loc_bucket, enqueue_count, \
     delivery_count, non_retryable";

/// The state-row upsert and read of this layout.
pub(super) struct Statements {
    pub(super) put: PreparedStatement,
    pub(super) get: PreparedStatement,
}

impl Statements {
    pub(super) async fn prepare(p: &Prep) -> StoreResult<Self> {
        let ks = p.ks();
        let legacy_binds = vec!["?"; 4 + LEGACY_STATE_COLUMNS.split(',').count()].join(", ");
        Ok(Self {
            put: p
                .prepare(format!(
                    "INSERT INTO {ks}.transactions (region, cluster, service, transaction_id, \
                 {LEGACY_STATE_COLUMNS}) VALUES ({legacy_binds}) USING TTL ?"
                ))
                .await?,
            get: p
                .prepare(format!(
                    "SELECT transaction_id, {LEGACY_STATE_COLUMNS}, cancelled_generation, \
                 succeeded_generation FROM {ks}.transactions \
                 WHERE region = ? AND cluster = ? AND service = ? AND transaction_id IN ?"
                ))
                .await?,
        })
    }
}

/// The bind values of `put` for `s`.
pub(super) fn values<'a>(
    region: &'a str,
    cluster: &'a str,
    s: &'a TxState,
    ttl_seconds: Option<u32>,
) -> StateValues<'a> {
    let loc = s.location.as_ref();
    StateValues {
        region,
        cluster,
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

fn ms_i64(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Bind values of the state-row upsert, in column order (the last one is the TTL).
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub(super) struct StateValues<'a> {
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

/// A state row written before schema 0007, one column per field.
#[derive(DeserializeRow)]
pub(super) struct StateRow {
    pub(super) transaction_id: String,
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
    pub(super) fn into_state(self, service: &str, transaction_id: &str) -> StoreResult<TxState> {
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
            dependency: String::new(),
            saga: Default::default(),
            // The layout before 0007 has no body, so no history.
            history: Default::default(),
            legacy_columns: true,
            base_generation: 0,
            cancelled_generation: self.cancelled_generation,
            succeeded_generation: self.succeeded_generation,
            trace: Default::default(),
            // Settled after a read of their own (`StateStore::settle_state` is not for them).
            written: Default::default(),
        }
        .apply_settled())
    }
}
