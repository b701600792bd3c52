//! The gates a due retry passes before it is delivered (docs/architecture.md, "Dependency
//! holds" and "Compensation chains"): a held dependency postpones it, a chain's first
//! compensation waits for its step. Both paths (`offer`) and redeliveries use them.

use rand::Rng;

use super::Dispatcher;
use crate::{
    metric_definitions as metrics,
    saga::{self, StepGate},
};
use rebound_store::TxState;

impl Dispatcher {
    /// Postpones a retry whose dependency is held to the hold's end (`postpone`).
    pub(super) async fn postpone_held(&self, state: &TxState, until: i64) -> bool {
        let done = self.postpone(state, until).await;
        if done {
            metrics::metrics().held_postponed(&state.service);
        }
        done
    }

    /// Postpones a retry to `until` (plus up to a second, so that the retries postponed
    /// together do not all come back at once), without using an attempt or a delivery, as a
    /// snooze would. Under the transaction's lock and on a fresh read, as an ack: a cancel or
    /// enqueue made since wins. False when it could not be written (the bucket is kept, and
    /// replayed).
    async fn postpone(&self, state: &TxState, until: i64) -> bool {
        let (service, txid) = (&state.service, &state.transaction_id);
        let _lock = self.lock_transaction(service, txid).await;
        let current = match self.store.get_state(service, txid).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(service, transaction_id = txid, error = %e, "cannot read a retry to postpone; its bucket is replayed");
                return false;
            }
        };
        let Some(current) = current.filter(|s| s.is_live(state.generation)) else {
            return true;
        };
        let due = until + rand::rng().random_range(0..1000);
        match self.writer.reschedule(current, due).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(service, transaction_id = txid, error = %e, "cannot postpone a retry; its bucket is replayed");
                false
            }
        }
    }

    /// Whether `state` may be delivered as far as its saga goes: every retry but a chain's first
    /// compensation may. That one goes out only once its step reads DEAD, which is final
    /// (docs/architecture.md, "Compensation chains"): a step that has not ended yet postpones
    /// it (as a hold does, without using an attempt), a step that ended SUCCEEDED or
    /// CANCELLED cancels it. Some(false): postponed or cancelled. None: the step or the write
    /// could not be done (the bucket is kept, and replayed).
    pub(super) async fn step_gate(&self, state: &TxState) -> Option<bool> {
        let Some((service, txid)) = saga::step_of(state) else {
            return Some(true);
        };
        let step = match self.store.get_state(service, txid).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(service, transaction_id = txid, error = %e, "cannot read the step of a compensation; its bucket is replayed");
                return None;
            }
        };
        match saga::step_gate(step.as_ref(), self.clock.now_ms()) {
            StepGate::Deliver => Some(true),
            StepGate::Wait(until) => self.postpone(state, until).await.then_some(false),
            StepGate::Cancel => {
                let (comp, comp_tx) = (&state.service, &state.transaction_id);
                match self.writer.cancel(comp, comp_tx).await {
                    Ok(_) => {
                        tracing::info!(
                            saga_service = service, saga_transaction_id = txid,
                            service = %comp, transaction_id = %comp_tx,
                            step_status = ?step.map(|s| s.status),
                            "a compensation was cancelled: its step did not die"
                        );
                        Some(false)
                    }
                    Err(e) => {
                        tracing::warn!(service = %comp, transaction_id = %comp_tx, error = %e, "cannot cancel the compensation of a step that did not die; its bucket is replayed");
                        None
                    }
                }
            }
        }
    }
}
