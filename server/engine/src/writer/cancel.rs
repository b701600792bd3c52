//! The cancel (`Writer::cancel`): the CANCELLED row with its cancel cell, written again over
//! each schedule derived meanwhile, and the conditional cancel of a saga step.

use rebound_store::history::AttemptRecord;

use super::{Error, Status, TxState, Writer};

impl Writer {
    /// Cancels a scheduled retry. Returns the status after the call and whether this call
    /// cancelled it (false when it had already finished).
    ///
    /// Across nodes (docs/architecture.md, "Guarantees across nodes"): the CANCELLED row goes out
    /// with the cancel cell (`cancelled_generation`, schema 0008), which no ack or enqueue writes.
    /// An ack or enqueue elsewhere that read the retry before this write derives its schedule from
    /// a generation the cell covers, so its write, landing before or after this one, reads as
    /// CANCELLED and is never delivered; a SUCCEEDED ack or a dead letter written that way reads as
    /// CANCELLED too (`TxState::apply_settled`). The row is read once more after the write, and a
    /// schedule derived meanwhile from a newer generation is cancelled too.
    pub async fn cancel(
        &self,
        service: &str,
        transaction_id: &str,
    ) -> Result<(Status, bool), Error> {
        self.cancel_as(service, transaction_id, |_| true, |_| None)
            .await
    }

    /// `cancel`, when the row first read passes `pick` (else it is answered as it stands, not
    /// cancelled), with what `note` makes of each row it writes recorded in that row's history
    /// (an operator's action: `admin::act`).
    pub async fn cancel_as(
        &self,
        service: &str,
        transaction_id: &str,
        pick: impl FnOnce(&TxState) -> bool,
        note: impl Fn(&TxState) -> Option<AttemptRecord>,
    ) -> Result<(Status, bool), Error> {
        let _lock = self.tx_locks.lock(service, transaction_id).await;
        let mut state = self.get(service, transaction_id).await?;
        if state.status.is_terminal() || !pick(&state) {
            return Ok((state.status, false));
        }
        let cancel_ttl = self.cancel_ttl();
        if state.conditional_writes() {
            return self.cancel_conditionally(state, cancel_ttl, &note).await;
        }
        for _ in 0..CANCEL_ROUNDS {
            if let Some(r) = note(&state) {
                state.history.record(r);
            }
            state.status = Status::Cancelled;
            state.updated_at_ms = self.clock.now_ms();
            self.store
                .cancel_state(&state, self.opts.terminal_ttl_seconds, cancel_ttl)
                .await?;
            match self.store.get_state(service, transaction_id).await? {
                Some(now) if now.status == Status::Scheduled => state = now,
                _ => break,
            }
        }
        Ok((Status::Cancelled, true))
    }
}

/// Writes of one cancel at most (the first, and one per schedule derived meanwhile).
const CANCEL_ROUNDS: usize = 3;

impl Writer {
    /// The cancel of a saga step (`TxState::conditional_writes`): the CANCELLED row and its
    /// cell land only over the SCHEDULED row that was read (`StateStore::cancel_state_if`),
    /// so that it never lands over the step's DEAD or SUCCEEDED end, and a DEAD end never
    /// lands over it. A new schedule meanwhile is read and cancelled in its turn; an end
    /// meanwhile is answered as it stands (not cancelled by this call).
    async fn cancel_conditionally(
        &self,
        mut state: TxState,
        cancel_ttl: u32,
        note: &impl Fn(&TxState) -> Option<AttemptRecord>,
    ) -> Result<(Status, bool), Error> {
        let (service, transaction_id) = (state.service.clone(), state.transaction_id.clone());
        for _ in 0..CANCEL_ROUNDS {
            let generation = state.generation;
            if let Some(r) = note(&state) {
                state.history.record(r);
            }
            state.status = Status::Cancelled;
            state.updated_at_ms = self.clock.now_ms();
            if self
                .store
                .cancel_state_if(&state, self.opts.terminal_ttl_seconds, cancel_ttl)
                .await?
            {
                return Ok((Status::Cancelled, true));
            }
            state = self.get(&service, &transaction_id).await?;
            match state.status {
                Status::Scheduled => continue,
                // This call's own write, repeated after an unknown outcome.
                Status::Cancelled if state.generation == generation => {
                    return Ok((Status::Cancelled, true))
                }
                other => return Ok((other, false)),
            }
        }
        Err(Error::Unavailable(format!(
            "retry {transaction_id:?} of service {service:?} was rescheduled {CANCEL_ROUNDS} times while it was being cancelled; nothing was cancelled, try again"
        )))
    }
}
