//! Validation of `EnqueueRetryRequest` (single and batch items): the request's fields, its
//! compensations (`EnqueueRetryRequest.compensations`), and what the writer gets from it.

use std::{collections::BTreeMap, time::Duration};

use rebound_proto::v1 as pb;

use super::{
    dependency, duration, policy, service, show, timestamp_ms, transaction_id, MAX_ATTRIBUTES,
    MAX_ATTRIBUTE_KEY_BYTES, MAX_ATTRIBUTE_VALUE_BYTES, MAX_LAST_ERROR_BYTES,
};
use crate::error::Error;
use crate::policy::PolicyOverrides;
use crate::trace_context::TraceText as _;
use rebound_store::{context::TextContext, Saga};

/// When the caller wants the retry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    /// Neither delay nor due_time: the policy's backoff for the attempts already made.
    PolicyBackoff,
    Delay(Duration),
    DueAt(i64),
}

/// An enqueue request that passed every context-free check.
#[derive(Debug, Clone, PartialEq)]
pub struct EnqueueInput {
    pub service: String,
    pub transaction_id: String,
    pub payload: Vec<u8>,
    pub attributes: BTreeMap<String, String>,
    pub schedule: Schedule,
    pub policy: PolicyOverrides,
    pub attempt: u32,
    pub last_error: String,
    /// The trace context to store: the item's own `trace_context`, else (set by the API) the
    /// request's or its `send` span's.
    pub trace: TextContext,
    /// The dependency the retry waits on (empty: none).
    pub dependency: String,
    /// Its compensations (`EnqueueRetryRequest.compensations`, encoded as validated), or, for
    /// a compensation the node enqueues, the rest of its chain.
    pub saga: Saga,
    /// Each compensation's service and policy overrides (with the compensation defaults),
    /// which the writer checks against that service's policy before anything is written.
    pub compensation_policies: Vec<(String, PolicyOverrides)>,
}

/// Most compensations one enqueue may carry (`EnqueueRetryRequest.compensations`).
pub const MAX_COMPENSATIONS: usize = 32;

/// Validated compensations: each encoded, and each one's service and policy overrides.
type Compensations = (Vec<Vec<u8>>, Vec<(String, PolicyOverrides)>);

/// Validates `EnqueueRetryRequest.compensations` of the retry `own` (service, transaction id):
/// at most `MAX_COMPENSATIONS`, at most `max_payload_bytes` of payloads in all, each
/// (service, transaction id) once and not `own`, and each field by the rules of an enqueue.
/// Returns them encoded, and each one's service and policy overrides.
pub fn compensations(
    prefix: &str,
    list: Vec<pb::Compensation>,
    own: (&str, &str),
    max_payload_bytes: usize,
) -> Result<Compensations, Error> {
    use prost::Message;
    let field = format!("{prefix}compensations");
    if list.len() > MAX_COMPENSATIONS {
        return Err(Error::invalid(
            field,
            format!(
                "has {} entries, over the limit of {MAX_COMPENSATIONS}",
                list.len()
            ),
        ));
    }
    let total: usize = list.iter().map(|c| c.payload.len()).sum();
    if total > max_payload_bytes {
        return Err(Error::invalid(
            field,
            format!(
                "payloads are {total} bytes in all, over the limit of {max_payload_bytes} bytes (REBOUND_MAX_PAYLOAD_BYTES)"
            ),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    let mut encoded = Vec::with_capacity(list.len());
    let mut policies = Vec::with_capacity(list.len());
    for (i, c) in list.into_iter().enumerate() {
        let f = |name: &str| format!("{field}[{i}].{name}");
        service(&f("service"), &c.service)?;
        transaction_id(&f("transaction_id"), &c.transaction_id)?;
        attributes(&f("attributes"), &c.attributes)?;
        if (c.service.as_str(), c.transaction_id.as_str()) == own {
            return Err(Error::invalid(
                f("transaction_id"),
                "names the retry itself: a compensation is a retry of its own",
            ));
        }
        if !seen.insert((c.service.clone(), c.transaction_id.clone())) {
            return Err(Error::invalid(
                f("transaction_id"),
                "appears twice in one chain",
            ));
        }
        let overrides = policy(&f("policy"), c.policy.as_ref())?;
        policies.push((
            c.service.clone(),
            crate::policy::compensation_overrides(overrides),
        ));
        encoded.push(c.encode_to_vec());
    }
    Ok((encoded, policies))
}

/// A map of attributes: at most `MAX_ATTRIBUTES` entries, keys of 1-`MAX_ATTRIBUTE_KEY_BYTES`
/// bytes with no control characters, values of at most `MAX_ATTRIBUTE_VALUE_BYTES`.
pub(crate) fn attributes(
    field: &str,
    map: &std::collections::HashMap<String, String>,
) -> Result<(), Error> {
    if map.len() > MAX_ATTRIBUTES {
        return Err(Error::invalid(
            field,
            format!(
                "has {} entries, over the limit of {MAX_ATTRIBUTES}",
                map.len()
            ),
        ));
    }
    for (k, v) in map {
        if k.is_empty() || k.len() > MAX_ATTRIBUTE_KEY_BYTES || k.chars().any(char::is_control) {
            return Err(Error::invalid(
                field,
                format!(
                    "key {} must be 1-{MAX_ATTRIBUTE_KEY_BYTES} bytes with no control characters",
                    show(k)
                ),
            ));
        }
        if v.len() > MAX_ATTRIBUTE_VALUE_BYTES {
            return Err(Error::invalid(
                field,
                format!(
                    "value of {} is {} bytes, over the limit of {MAX_ATTRIBUTE_VALUE_BYTES}",
                    show(k),
                    v.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Validates an `EnqueueRetryRequest`; `prefix` is prepended to field names (batch items).
pub fn enqueue(
    prefix: &str,
    r: pb::EnqueueRetryRequest,
    max_payload_bytes: usize,
) -> Result<EnqueueInput, Error> {
    let f = |name: &str| format!("{prefix}{name}");
    service(&f("service"), &r.service)?;
    transaction_id(&f("transaction_id"), &r.transaction_id)?;
    if r.payload.len() > max_payload_bytes {
        return Err(Error::invalid(
            f("payload"),
            format!(
                "is {} bytes, over the limit of {max_payload_bytes} bytes (REBOUND_MAX_PAYLOAD_BYTES)",
                r.payload.len()
            ),
        ));
    }
    attributes(&f("attributes"), &r.attributes)?;
    if r.last_error.len() > MAX_LAST_ERROR_BYTES {
        return Err(Error::invalid(
            f("last_error"),
            format!(
                "is {} bytes, over the limit of {MAX_LAST_ERROR_BYTES} bytes",
                r.last_error.len()
            ),
        ));
    }
    let schedule = match &r.schedule {
        None => Schedule::PolicyBackoff,
        Some(pb::enqueue_retry_request::Schedule::Delay(d)) => {
            Schedule::Delay(duration(&f("delay"), d)?)
        }
        Some(pb::enqueue_retry_request::Schedule::DueTime(t)) => {
            Schedule::DueAt(timestamp_ms(&f("due_time"), t)?)
        }
    };
    let policy = policy(&f("policy"), r.policy.as_ref())?;
    let trace = match r.trace_context {
        None => TextContext::default(),
        Some(t) => {
            let t = TextContext {
                traceparent: t.traceparent,
                tracestate: t.tracestate,
            };
            t.check()
                .map_err(|m| Error::invalid(f("trace_context"), m))?;
            t
        }
    };
    if !r.dependency.is_empty() {
        dependency(&f("dependency"), &r.dependency)?;
    }
    let (compensations, compensation_policies) = compensations(
        prefix,
        r.compensations,
        (&r.service, &r.transaction_id),
        max_payload_bytes,
    )?;
    Ok(EnqueueInput {
        saga: Saga {
            compensations,
            chain: None,
        },
        compensation_policies,
        dependency: r.dependency,
        service: r.service,
        transaction_id: r.transaction_id,
        payload: r.payload,
        attributes: r.attributes.into_iter().collect(),
        schedule,
        policy,
        attempt: r.attempt,
        last_error: r.last_error,
        trace,
    })
}
