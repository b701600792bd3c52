//! The protobuf encodings of the domain types, in one place: the handlers (`api`) and the
//! operator API (`admin`) answer with these, and nothing below them names a protobuf type for
//! what they return. Decoding (with its checks) is `validate`'s.

use std::time::Duration;

use rebound_proto::v1 as pb;

use crate::{
    dispatch::hub::Delivery,
    error::Error,
    outcome::Resolution,
    saga,
    writer::{EnqueueOutcome, Writer},
};
use rebound_store::{self as store, TokenRange, TxState};
use rebound_store::{
    history::{AttemptEnd, AttemptRecord},
    policy::{RetryPolicy, UNLIMITED_ATTEMPTS},
    window::day_to_date,
};

use rebound_proto::time::{dur, ts};

pub fn status_pb(s: store::Status) -> pb::RetryStatus {
    match s {
        store::Status::Scheduled => pb::RetryStatus::Scheduled,
        store::Status::Succeeded => pb::RetryStatus::Succeeded,
        store::Status::Dead => pb::RetryStatus::Dead,
        store::Status::Cancelled => pb::RetryStatus::Cancelled,
    }
}

/// A retry's compensation chain (`saga::chain_pb`), with each compensation's status read
/// from its state row (one `IN` read per service of the chain).
pub async fn chain_progress(
    writer: &Writer,
    state: &TxState,
) -> Result<Option<pb::CompensationChain>, Error> {
    let members = saga::members(state)?;
    let mut by_service: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (service, tx) in &members {
        by_service.entry(service).or_default().push(tx.clone());
    }
    let mut statuses = std::collections::HashMap::new();
    for (service, ids) in by_service {
        for (tx, row) in ids.iter().zip(writer.get_many(service, &ids).await?) {
            if let Some(row) = row {
                statuses.insert((service.to_string(), tx.clone()), row.status);
            }
        }
    }
    saga::chain_pb(state, |service, tx| {
        statuses
            .get(&(service.to_string(), tx.to_string()))
            .map_or(pb::RetryStatus::Unspecified, |s| status_pb(*s))
    })
}

pub fn policy_pb(p: &RetryPolicy) -> pb::RetryPolicy {
    let unlimited = p.max_attempts == UNLIMITED_ATTEMPTS;
    pb::RetryPolicy {
        max_attempts: (!unlimited).then_some(p.max_attempts),
        unlimited_attempts: unlimited.then_some(true),
        non_retryable_error_classes: p.non_retryable.clone(),
        initial_backoff: Some(dur(p.initial_backoff)),
        max_backoff: Some(dur(p.max_backoff)),
        multiplier: Some(p.multiplier),
        jitter: Some(p.jitter),
        max_retry_duration: p.max_retry_duration.map(dur),
        ack_timeout: Some(dur(p.ack_timeout)),
        max_deliveries_per_attempt: Some(p.max_deliveries_per_attempt),
    }
}

pub fn retry_pb(s: TxState) -> pb::Retry {
    pb::Retry {
        status: status_pb(s.status) as i32,
        attempt: s.attempt,
        generation: s.generation as u64,
        due_time: Some(ts(s.due_at_ms)),
        last_error: s.last_error,
        payload: s.payload,
        attributes: s.attributes.into_iter().collect(),
        policy: Some(policy_pb(&s.policy)),
        first_enqueued_at: Some(ts(s.first_enqueued_at_ms)),
        last_enqueued_at: Some(ts(s.last_enqueued_at_ms)),
        updated_at: Some(ts(s.updated_at_ms)),
        location: s.location.map(|l| pb::Location {
            day: day_to_date(l.window.day).to_string(),
            window: l.window.index,
            instance: l.instance,
            bucket: l.bucket,
        }),
        enqueue_count: s.enqueue_count,
        delivery_count: s.delivery_count,
        dependency: s.dependency,
        // Stored as validated; one that does not decode (never written so) is left out.
        compensations: s
            .saga
            .compensations
            .iter()
            .filter_map(|b| prost::Message::decode(b.as_slice()).ok())
            .collect(),
        chain: None,
        attempts: s.history.attempts.iter().map(attempt_pb).collect(),
        attempts_dropped: s.history.dropped,
        service: s.service,
        transaction_id: s.transaction_id,
    }
}

/// One attempt of a retry's history (`Retry.attempts`).
pub fn attempt_pb(a: &AttemptRecord) -> pb::Attempt {
    let outcome = match a.end {
        AttemptEnd::Succeeded => pb::AttemptOutcome::Succeeded,
        AttemptEnd::Retry => pb::AttemptOutcome::Retry,
        AttemptEnd::Failed => pb::AttemptOutcome::Failed,
        AttemptEnd::DeadlineExpired => pb::AttemptOutcome::DeadlineExpired,
        AttemptEnd::Held => pb::AttemptOutcome::Held,
        AttemptEnd::Snoozed => pb::AttemptOutcome::Snoozed,
        AttemptEnd::RunNow => pb::AttemptOutcome::RunNow,
        AttemptEnd::Rescheduled => pb::AttemptOutcome::Rescheduled,
        AttemptEnd::Cancelled => pb::AttemptOutcome::Cancelled,
        AttemptEnd::DeadLettered => pb::AttemptOutcome::DeadLettered,
    };
    pb::Attempt {
        attempt: a.attempt,
        delivered_at: Some(ts(a.delivered_at_ms)),
        ended_at: Some(ts(a.ended_at_ms)),
        node_id: a.node_id.clone(),
        executor_id: a.executor_id.clone(),
        outcome: outcome as i32,
        error: a.error.clone(),
        error_class: a.error_class.clone(),
        retry_after: a.retry_after_ms.map(|ms| dur(Duration::from_millis(ms))),
        duration: Some(dur(Duration::from_millis(a.duration_ms() as u64))),
        deliveries: a.deliveries,
    }
}

pub fn enqueue_pb(o: EnqueueOutcome) -> pb::EnqueueRetryResponse {
    pb::EnqueueRetryResponse {
        transaction_id: o.transaction_id,
        due_time: Some(ts(o.due_at_ms)),
        generation: o.generation as u64,
        deduplicated: o.deduplicated,
    }
}

/// One item of an `EnqueueRetryBatch` answer.
pub fn enqueue_result_pb(res: Result<EnqueueOutcome, Error>) -> pb::EnqueueRetryResult {
    pb::EnqueueRetryResult {
        result: Some(match res {
            Ok(o) => pb::enqueue_retry_result::Result::Response(enqueue_pb(o)),
            Err(e) => pb::enqueue_retry_result::Result::Error(pb::ItemError {
                code: e.code() as i32,
                message: e.to_string(),
            }),
        }),
    }
}

pub fn ack_response(r: Resolution) -> pb::AckResponse {
    match r {
        Resolution::Succeeded => pb::AckResponse::default(),
        Resolution::Rescheduled { due_at_ms, snoozed } => pb::AckResponse {
            next_due_time: Some(ts(due_at_ms)),
            snoozed,
            ..Default::default()
        },
        Resolution::Dead => pb::AckResponse {
            dead_lettered: true,
            ..Default::default()
        },
    }
}

/// One item of an `AckBatch` answer.
pub fn ack_result_pb(res: Result<Resolution, Error>) -> pb::AckBatchResult {
    pb::AckBatchResult {
        result: Some(match res {
            Ok(r) => pb::ack_batch_result::Result::Response(ack_response(r)),
            Err(e) => pb::ack_batch_result::Result::Error(pb::AckError {
                code: e.code() as i32,
                message: e.to_string(),
            }),
        }),
    }
}

pub fn delivery_pb(d: Delivery) -> pb::Delivery {
    pb::Delivery {
        delivery_id: d.delivery_id,
        service: d.service,
        transaction_id: d.transaction_id,
        attempt: d.attempt,
        payload: d.payload,
        attributes: d.attributes.into_iter().collect(),
        due_time: Some(ts(d.due_at_ms)),
        first_enqueued_at: Some(ts(d.first_enqueued_at_ms)),
        ack_deadline: Some(ts(d.ack_deadline_ms)),
        last_error: d.last_error,
        trace_context: (!d.trace.is_empty()).then_some(pb::TraceContext {
            traceparent: d.trace.traceparent,
            tracestate: d.trace.tracestate,
        }),
        dependency: d.dependency,
    }
}

pub fn token_range_pb(r: &TokenRange) -> pb::TokenRange {
    pb::TokenRange {
        start: r.start,
        end: r.end,
    }
}
