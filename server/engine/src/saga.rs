//! Compensation chains (docs/architecture.md, "Compensation chains"): what a saga step's
//! retry carries (`EnqueueRetryRequest.compensations`), and the enqueue that runs the next
//! compensation, when the step ends DEAD or a compensation is acknowledged SUCCEEDED.
//!
//! The chain lives in the state rows, nowhere else: the step's body keeps every compensation,
//! and each compensation's body keeps the ones after it and the chain's names. A hand-off is
//! an ordinary idempotent enqueue made before the write that ends the retry handing off, so a
//! crash in between hands off again and the enqueue is deduplicated (or refused as
//! ALREADY_EXISTS once the next one has succeeded, which counts as done).

use std::time::Duration;

use prost::Message;
use rebound_proto::v1 as pb;

use crate::{
    error::Error,
    validate::{EnqueueInput, Schedule},
};
use rebound_store::{Chain, Saga, Status, TxState};

use crate::policy::compensation_overrides as overrides;

/// Whether a retry ending DEAD starts a chain: a saga step with compensations (a dead
/// compensation stops its chain instead).
pub fn starts_on_dead(state: &TxState) -> bool {
    state.saga.chain.is_none() && !state.saga.compensations.is_empty()
}

/// Whether a retry acknowledged SUCCEEDED hands its chain on: a compensation with more after it.
pub fn continues_on_success(state: &TxState) -> bool {
    state.saga.chain.is_some() && !state.saga.compensations.is_empty()
}

/// The saga step (service, transaction id) whose death enqueued `state`, when `state` is the
/// first compensation of a chain. It goes out only once that step reads DEAD ([`step_gate`]).
pub fn step_of(state: &TxState) -> Option<(&str, &str)> {
    state
        .saga
        .chain
        .as_ref()
        .filter(|c| c.position == 1)
        .map(|c| (c.saga_service.as_str(), c.saga_transaction_id.as_str()))
}

/// What the feed does with a chain's first compensation, given its step's state row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepGate {
    /// The step is DEAD, which is final (no answer or cancel lands over it:
    /// `TxState::conditional_writes`), or its row is gone.
    Deliver,
    /// The step has not ended (its hand-off landed, its DEAD row not yet, or a node died in
    /// between): postponed to this time, when the step may have ended.
    Wait(i64),
    /// The step ended SUCCEEDED or CANCELLED: the compensation is cancelled, never delivered.
    Cancel,
}

/// The gate of a chain's first compensation at `now`, given its step's row.
pub fn step_gate(step: Option<&TxState>, now: i64) -> StepGate {
    match step {
        None => StepGate::Deliver,
        Some(s) => match s.status {
            Status::Dead => StepGate::Deliver,
            Status::Succeeded | Status::Cancelled => StepGate::Cancel,
            // Not before the step's own next delivery can end it; checked at least every
            // STEP_RECHECK_MS meanwhile, as a cancel or an ack in flight may end it sooner.
            Status::Scheduled => StepGate::Wait(
                s.due_at_ms
                    .saturating_add(1_000)
                    .clamp(now + 1_000, now + STEP_RECHECK_MS),
            ),
        },
    }
}

/// The longest a chain's first compensation waits before its step is read again.
pub const STEP_RECHECK_MS: i64 = 60_000;

/// The stored compensations of `saga`, decoded. They were validated when stored.
pub fn decode(saga: &Saga) -> Result<Vec<pb::Compensation>, Error> {
    saga.compensations
        .iter()
        .map(|b| {
            pb::Compensation::decode(b.as_slice())
                .map_err(|e| Error::Internal(format!("a stored compensation does not decode: {e}")))
        })
        .collect()
}

/// The enqueue of the compensation after `state` in its chain (the first, for a saga step):
/// due at once (the next window), attempt 0, linked to the trace of the step's first failure,
/// carrying the compensations after it and the chain. None when there is none.
pub fn next_enqueue(state: &TxState) -> Result<Option<EnqueueInput>, Error> {
    let mut rest = decode(&state.saga)?.into_iter();
    let Some(next) = rest.next() else {
        return Ok(None);
    };
    let chain = match &state.saga.chain {
        Some(c) => Chain {
            position: c.position + 1,
            ..c.clone()
        },
        None => Chain {
            saga_service: state.service.clone(),
            saga_transaction_id: state.transaction_id.clone(),
            position: 1,
            members: std::iter::once(&next)
                .chain(rest.as_slice())
                .map(|c| (c.service.clone(), c.transaction_id.clone()))
                .collect(),
        },
    };
    let policy = crate::validate::policy("policy", next.policy.as_ref()).map(overrides)?;
    Ok(Some(EnqueueInput {
        compensation_policies: Vec::new(),
        saga: Saga {
            compensations: state.saga.compensations[1..].to_vec(),
            chain: Some(chain),
        },
        service: next.service,
        transaction_id: next.transaction_id,
        payload: next.payload,
        attributes: next.attributes.into_iter().collect(),
        schedule: Schedule::Delay(Duration::ZERO),
        policy,
        attempt: 0,
        last_error: String::new(),
        trace: state.trace.clone(),
        dependency: String::new(),
    }))
}

/// Where the chain of `state` stands, for `Retry.chain` and `DeadLetter.chain`: its saga, its
/// place, and every compensation with `status` of it (none: not read). None when `state` has
/// no chain and no compensations.
pub fn chain_pb(
    state: &TxState,
    status: impl Fn(&str, &str) -> pb::RetryStatus,
) -> Result<Option<pb::CompensationChain>, Error> {
    let (saga_service, saga_transaction_id, position, members) = match &state.saga.chain {
        Some(c) => (
            c.saga_service.clone(),
            c.saga_transaction_id.clone(),
            c.position,
            c.members.clone(),
        ),
        None if state.saga.compensations.is_empty() => return Ok(None),
        None => (
            state.service.clone(),
            state.transaction_id.clone(),
            0,
            decode(&state.saga)?
                .into_iter()
                .map(|c| (c.service, c.transaction_id))
                .collect(),
        ),
    };
    Ok(Some(pb::CompensationChain {
        saga_service,
        saga_transaction_id,
        position,
        compensations: members
            .into_iter()
            .map(|(service, transaction_id)| pb::CompensationProgress {
                status: status(&service, &transaction_id) as i32,
                service,
                transaction_id,
            })
            .collect(),
    }))
}

/// The (service, transaction id) of every compensation in the chain of `state`.
pub fn members(state: &TxState) -> Result<Vec<(String, String)>, Error> {
    Ok(chain_pb(state, |_, _| pb::RetryStatus::Unspecified)?
        .map(|c| {
            c.compensations
                .into_iter()
                .map(|m| (m.service, m.transaction_id))
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyOverrides;
    use crate::policy::COMPENSATION_RETRY_DURATION;
    use rebound_store::policy::UNLIMITED_ATTEMPTS;

    fn comp(service: &str, tx: &str) -> Vec<u8> {
        pb::Compensation {
            service: service.into(),
            transaction_id: tx.into(),
            payload: tx.as_bytes().to_vec(),
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn step() -> TxState {
        let mut s = TxState::cancelled_ghost("orders", "o-1", 7);
        s.saga.compensations = vec![comp("payments", "refund-1"), comp("stock", "release-1")];
        s
    }

    #[test]
    fn a_chain_hands_on_in_order_and_ends() {
        let head = step();
        assert!(starts_on_dead(&head) && !continues_on_success(&head));
        let first = next_enqueue(&head).unwrap().unwrap();
        assert_eq!(
            (first.service.as_str(), first.transaction_id.as_str()),
            ("payments", "refund-1")
        );
        assert_eq!(first.payload, b"refund-1");
        assert_eq!(first.schedule, Schedule::Delay(Duration::ZERO));
        assert_eq!(first.policy.max_attempts, Some(UNLIMITED_ATTEMPTS));
        assert_eq!(
            first.policy.max_retry_duration,
            Some(COMPENSATION_RETRY_DURATION)
        );
        let chain = first.saga.chain.clone().unwrap();
        assert_eq!(chain.position, 1);
        assert_eq!(chain.saga_transaction_id, "o-1");
        assert_eq!(chain.members.len(), 2);
        let mut s1 = TxState::cancelled_ghost("payments", "refund-1", 9);
        s1.saga = first.saga;
        assert!(continues_on_success(&s1) && !starts_on_dead(&s1));
        let second = next_enqueue(&s1).unwrap().unwrap();
        assert_eq!(second.transaction_id, "release-1");
        assert_eq!(second.saga.chain.as_ref().unwrap().position, 2);
        let mut s2 = TxState::cancelled_ghost("stock", "release-1", 11);
        s2.saga = second.saga;
        assert!(!continues_on_success(&s2));
        assert!(next_enqueue(&s2).unwrap().is_none());
        let shown = chain_pb(&s2, |_, tx| {
            if tx == "refund-1" {
                pb::RetryStatus::Succeeded
            } else {
                pb::RetryStatus::Scheduled
            }
        })
        .unwrap()
        .unwrap();
        assert_eq!(shown.position, 2);
        assert_eq!(shown.saga_service, "orders");
        assert_eq!(
            shown.compensations[0].status,
            pb::RetryStatus::Succeeded as i32
        );
        assert_eq!(members(&head).unwrap(), members(&s2).unwrap());
    }

    #[test]
    fn a_first_compensation_goes_out_only_once_its_step_reads_dead() {
        let head = step();
        let first = next_enqueue(&head).unwrap().unwrap();
        let mut c1 = TxState::cancelled_ghost("payments", "refund-1", 9);
        c1.saga = first.saga;
        assert_eq!(step_of(&c1), Some(("orders", "o-1")));
        assert_eq!(step_of(&head), None);
        let mut c2 = c1.clone();
        c2.saga = next_enqueue(&c1).unwrap().unwrap().saga;
        assert_eq!(step_of(&c2), None, "only the first compensation is gated");

        let now = 1_000_000;
        let at = |status: Status, due: i64| {
            let mut s = head.clone();
            s.status = status;
            s.due_at_ms = due;
            step_gate(Some(&s), now)
        };
        assert_eq!(step_gate(None, now), StepGate::Deliver);
        assert_eq!(at(Status::Dead, 0), StepGate::Deliver);
        assert_eq!(at(Status::Succeeded, 0), StepGate::Cancel);
        assert_eq!(at(Status::Cancelled, 0), StepGate::Cancel);
        // Being delivered (due in the past): looked at again a second later.
        assert_eq!(
            at(Status::Scheduled, now - 5_000),
            StepGate::Wait(now + 1_000)
        );
        assert_eq!(
            at(Status::Scheduled, now + 9_000),
            StepGate::Wait(now + 10_000)
        );
        assert_eq!(
            at(Status::Scheduled, now + 3_600_000),
            StepGate::Wait(now + STEP_RECHECK_MS)
        );
    }

    #[test]
    fn a_policy_that_sets_attempts_keeps_them() {
        let o = overrides(PolicyOverrides {
            max_attempts: Some(3),
            ..Default::default()
        });
        assert_eq!(o.max_attempts, Some(3));
        assert_eq!(o.max_retry_duration, Some(COMPENSATION_RETRY_DURATION));
    }
}
