//! The executor's side of a delivery: its acknowledgement (`ack`, then `settle` under the
//! transaction's lock, then `resolve` on the state row), deadline extensions, and the
//! redelivery of work handed back or overdue (`requeue`, the reaper).

use std::{sync::Arc, time::Duration};

use rand::Rng;
use tracing::Instrument;

use super::{
    hub::{InFlight, Work},
    AttemptOutcome, Dispatcher, Resolution,
};
use crate::metric_definitions as metrics;
use crate::policy::Rules as _;
use crate::{
    error::Error,
    holds::{Gate, ProbeAnswer},
    saga, spans,
    writer::changed_meanwhile,
};
use rebound_store::{
    history::{AttemptEnd, AttemptRecord},
    DeadLetter, Status, TxState,
};

impl Dispatcher {
    /// Applies an executor's acknowledgement of `delivery_id`. NOT_FOUND when it is not in
    /// flight here, FAILED_PRECONDITION when its retry changed since it was delivered; when
    /// the outcome cannot be stored the delivery stays in flight, to be acknowledged again.
    pub async fn ack(
        self: &Arc<Self>,
        delivery_id: &str,
        outcome: AttemptOutcome,
    ) -> Result<Resolution, Error> {
        self.ack_as(delivery_id, outcome, false).await
    }

    /// `ack`; `held` when the ack held the retry's dependency (`ack_holding`), so that its
    /// attempt is recorded as HELD.
    async fn ack_as(
        self: &Arc<Self>,
        delivery_id: &str,
        outcome: AttemptOutcome,
        held: bool,
    ) -> Result<Resolution, Error> {
        let kind = match &outcome {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Retry { snooze: true, .. } => "snoozed",
            AttemptOutcome::Retry { .. } => "retry",
            AttemptOutcome::Failed { .. } => "failed",
        };
        let m = metrics::metrics();
        let Some(inflight) = self.hub.take(delivery_id) else {
            m.ack("_unknown", "refused");
            return Err(Error::NotFound(format!(
                "delivery {delivery_id:?} is not in flight on this node: unknown, already acknowledged, or its deadline passed"
            )));
        };
        let state = &inflight.work.state;
        let span = spans::settle(&state.service, &state.transaction_id, kind, &state.trace);
        let service = state.service.clone();
        let dependency = state.dependency.clone();
        // What the ack says of its dependency, should this delivery be its probe.
        let answer = match &outcome {
            AttemptOutcome::Succeeded | AttemptOutcome::Failed { .. } => {
                Some(ProbeAnswer::Answered)
            }
            AttemptOutcome::Retry { snooze: false, .. } => Some(ProbeAnswer::Retry(None)),
            AttemptOutcome::Retry { snooze: true, .. } => None,
        };
        let record = self.attempt_record(&inflight.work, &outcome, held);
        let r = self
            .settle(delivery_id, inflight, outcome, record)
            .instrument(span.clone())
            .await;
        if let (Ok(_), false, Some(answer)) = (&r, dependency.is_empty(), answer) {
            self.holds.probe_answered(&dependency, answer).await;
        }
        match &r {
            Ok(_) => m.ack(&service, kind),
            Err(e) => {
                m.ack(&service, "refused");
                rebound_common::trace::failed(
                    &span,
                    rebound_common::trace::code_name(e.code() as i32),
                );
            }
        }
        r
    }

    /// An ack with outcome RETRY that holds the delivery's dependency (`AckRequest.hold`):
    /// the hold is written first, so that no other retry naming it goes out, then the ack
    /// (made a snooze to the hold's end by the caller) settles this one. INVALID_ARGUMENT,
    /// nothing changed, when the retry names no dependency.
    pub async fn ack_holding(
        self: &Arc<Self>,
        delivery_id: &str,
        outcome: AttemptOutcome,
        duration: Duration,
        reason: &str,
        prefix: &str,
    ) -> Result<Resolution, Error> {
        if let Some(dependency) = self.hub.dependency_of(delivery_id) {
            if dependency.is_empty() {
                return Err(Error::invalid(
                    format!("{prefix}hold"),
                    "the delivery's retry names no dependency (EnqueueRetryRequest.dependency); nothing changed",
                ));
            }
            self.holds
                .hold(&dependency, duration, reason, "executor", 0)
                .await?;
        }
        self.ack_as(delivery_id, outcome, true).await
    }

    /// The history's record of the attempt `work` was delivered for, ending now with
    /// `outcome` (docs/architecture.md, "Attempt history").
    fn attempt_record(&self, work: &Work, outcome: &AttemptOutcome, held: bool) -> AttemptRecord {
        let (end, error, error_class, retry_after) = match outcome {
            AttemptOutcome::Succeeded => (AttemptEnd::Succeeded, "", "", None),
            AttemptOutcome::Failed { error } => (AttemptEnd::Failed, error.as_str(), "", None),
            AttemptOutcome::Retry {
                after,
                error,
                error_class,
                snooze,
            } => (
                match (held, snooze) {
                    (true, _) => AttemptEnd::Held,
                    (false, true) => AttemptEnd::Snoozed,
                    (false, false) => AttemptEnd::Retry,
                },
                error.as_str(),
                error_class.as_str(),
                *after,
            ),
        };
        self.record_of(work, end, error, error_class, retry_after)
    }

    fn record_of(
        &self,
        work: &Work,
        end: AttemptEnd,
        error: &str,
        error_class: &str,
        retry_after: Option<Duration>,
    ) -> AttemptRecord {
        let (delivered_at_ms, executor_id) = match &work.delivered {
            Some((at, executor)) => (*at, executor.to_string()),
            None => (0, String::new()),
        };
        AttemptRecord {
            attempt: work.state.attempt.saturating_add(1),
            delivered_at_ms,
            ended_at_ms: self.clock.now_ms(),
            node_id: self.writer.identity().0.to_string(),
            executor_id,
            end,
            error: error.to_string(),
            error_class: error_class.to_string(),
            retry_after_ms: retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            deliveries: work.deliveries.saturating_add(1),
        }
    }

    /// `ack` once the delivery is taken out of flight.
    async fn settle(
        self: &Arc<Self>,
        delivery_id: &str,
        inflight: InFlight,
        outcome: AttemptOutcome,
        record: AttemptRecord,
    ) -> Result<Resolution, Error> {
        // A saga step's SUCCEEDED is decided against its FAILED (`Writer::end`), so it reads
        // the row as the other answers do.
        if matches!(outcome, AttemptOutcome::Succeeded)
            && inflight.work.state.written.0.is_some()
            && !inflight.work.state.conditional_writes()
        {
            return self.settle_succeeded(delivery_id, inflight, record).await;
        }
        let (service, txid) = (
            inflight.work.state.service.clone(),
            inflight.work.state.transaction_id.clone(),
        );
        // The read, the generation check and the write happen under the transaction's lock,
        // so a cancel or enqueue on this node cannot land between them and be undone.
        let _lock = self.lock_transaction(&service, &txid).await;
        let current = match self.store.get_state(&service, &txid).await {
            Ok(s) => s,
            Err(e) => {
                self.keep_in_flight(delivery_id, inflight);
                return Err(e.into());
            }
        };
        let live = current
            .as_ref()
            .is_some_and(|s| s.is_live(inflight.work.state.generation));
        if !live {
            inflight.work.resolve();
            return Err(Error::FailedPrecondition(format!(
                "delivery {delivery_id:?} is stale: transaction {txid:?} was rescheduled, cancelled or finished since; nothing changed"
            )));
        }
        let mut state = current.expect("checked live");
        state.history.record(record);
        // Boxed: the future of `resolve` is several KiB, and every ack future (the common
        // SUCCEEDED one included) would otherwise carry its size.
        match Box::pin(self.resolve(state, inflight.work.deliveries + 1, outcome)).await {
            Ok(res) => {
                inflight.work.resolve();
                Ok(res)
            }
            // Another answer ended it first (`changed_meanwhile`): stale, as above.
            Err(e @ Error::FailedPrecondition(_)) => {
                inflight.work.resolve();
                Err(e)
            }
            Err(e) => {
                self.keep_in_flight(delivery_id, inflight);
                Err(e)
            }
        }
    }

    /// A SUCCEEDED ack: one write, no read. The state row is written as the feed read it,
    /// SUCCEEDED, just above that read's write time, so whatever changed the row since (a
    /// cancel, a new schedule, on any node) wins over it in every order of arrival; the
    /// succeeded cell it carries makes a schedule derived from this generation read as
    /// SUCCEEDED (`TxState::apply_settled`). When the write fails the delivery stays in
    /// flight, to be acknowledged again.
    async fn settle_succeeded(
        self: &Arc<Self>,
        delivery_id: &str,
        mut inflight: InFlight,
        record: AttemptRecord,
    ) -> Result<Resolution, Error> {
        // The row is written from the delivered state itself (no copy of it); should the
        // write fail, the delivery goes back in flight as it was.
        let state = &mut inflight.work.state;
        let was = (
            state.status,
            state.updated_at_ms,
            state.delivery_count,
            state.attempt,
        );
        let deliveries = inflight.work.deliveries.saturating_add(1);
        state.delivery_count = state.delivery_count.saturating_add(deliveries);
        // The attempt that succeeded counts as made: `attempt` is then the delivered one's.
        state.attempt = state.attempt.saturating_add(1);
        let recorded = state.history.record(record);
        let settled = match self
            .hand_off(state, saga::continues_on_success(state))
            .await
        {
            Ok(()) => self.writer.settle_succeeded(state).await,
            Err(e) => Err(e),
        };
        match settled {
            Ok(()) => {
                inflight.work.resolve();
                Ok(Resolution::Succeeded)
            }
            Err(e) => {
                let state = &mut inflight.work.state;
                (
                    state.status,
                    state.updated_at_ms,
                    state.delivery_count,
                    state.attempt,
                ) = was;
                state.history.undo(recorded);
                self.keep_in_flight(delivery_id, inflight);
                Err(e)
            }
        }
    }

    /// An ack whose outcome could not be stored: the delivery goes back in flight, to be
    /// acknowledged again, or (its stream gone) is delivered again.
    fn keep_in_flight(self: &Arc<Self>, delivery_id: &str, inflight: InFlight) {
        if let Some(w) = self.hub.put_back(delivery_id.to_string(), inflight) {
            self.requeue(w, None);
        }
    }

    /// Pushes the ack deadline of `delivery_id` to now plus `extension`; returns the new
    /// deadline. NOT_FOUND when it is not in flight here.
    pub fn extend(&self, delivery_id: &str, extension: Duration) -> Result<i64, Error> {
        self.hub.extend(delivery_id, extension).ok_or_else(|| {
            Error::NotFound(format!(
                "delivery {delivery_id:?} is not in flight on this node"
            ))
        })
    }

    /// Applies an attempt's outcome to the state row of `state`'s transaction. The caller has
    /// checked that `state` is current (same generation, SCHEDULED). `state.attempt` counts
    /// the attempts made, so every outcome but a snooze adds the one delivered (whose number
    /// was `attempt + 1`): after it, `attempt` is that delivery's number.
    pub async fn resolve(
        &self,
        mut state: TxState,
        deliveries: u32,
        outcome: AttemptOutcome,
    ) -> Result<Resolution, Error> {
        let now = self.clock.now_ms();
        state.delivery_count = state.delivery_count.saturating_add(deliveries.max(1));
        match outcome {
            AttemptOutcome::Succeeded => {
                // As `settle_succeeded`: the attempt that succeeded counts as made.
                state.attempt = state.attempt.saturating_add(1);
                self.hand_off(&state, saga::continues_on_success(&state))
                    .await?;
                if state.conditional_writes() {
                    let (service, txid) = (state.service.clone(), state.transaction_id.clone());
                    if !self.writer.end(state, Status::Succeeded).await? {
                        return Err(changed_meanwhile(&service, &txid));
                    }
                } else {
                    self.writer.finish(state, Status::Succeeded).await?;
                }
                Ok(Resolution::Succeeded)
            }
            AttemptOutcome::Failed { error } => {
                state.attempt += 1;
                state.last_error = error;
                self.dead_letter(state, now).await?;
                Ok(Resolution::Dead)
            }
            AttemptOutcome::Retry {
                after,
                error,
                error_class,
                snooze,
            } => {
                if !snooze && state.policy.is_non_retryable(&error_class) {
                    state.attempt += 1;
                    state.last_error =
                        format!("{error} (error class {error_class:?} is non-retryable)");
                    self.dead_letter(state, now).await?;
                    return Ok(Resolution::Dead);
                }
                if !snooze {
                    state.attempt += 1;
                }
                if !error.is_empty() || !snooze {
                    state.last_error = error;
                }
                if !snooze && state.policy.attempts_exhausted(state.attempt) {
                    state.last_error = format!(
                        "{} (attempts exhausted: {} of {})",
                        state.last_error, state.attempt, state.policy.max_attempts
                    );
                    self.dead_letter(state, now).await?;
                    return Ok(Resolution::Dead);
                }
                let delay = after.unwrap_or_else(|| {
                    state
                        .policy
                        .backoff(state.attempt, rand::rng().random::<f64>())
                });
                let due = now + delay.min(self.writer.max_delay()).as_millis() as i64;
                if let Some(max) = state.policy.max_retry_duration {
                    if due - state.first_enqueued_at_ms > max.as_millis() as i64 {
                        state.last_error = format!(
                            "{} (max_retry_duration of {}s exhausted)",
                            state.last_error,
                            max.as_secs()
                        );
                        self.dead_letter(state, now).await?;
                        return Ok(Resolution::Dead);
                    }
                }
                let state = self.writer.reschedule(state, due).await?;
                Ok(Resolution::Rescheduled {
                    due_at_ms: state.due_at_ms,
                    snoozed: snooze,
                })
            }
        }
    }

    /// Enqueues the compensation after `state` in its chain when `due` (docs/architecture.md,
    /// "Compensation chains"), before the write that ends `state`: a crash in between leaves
    /// `state` live, and its next ending enqueues the same compensation again, which is
    /// deduplicated, or refused as ALREADY_EXISTS once it succeeded (done either way). A chain
    /// that can no longer be enqueued as stored (its service's policy changed since) is logged
    /// and stops there, so that the retry still ends.
    async fn hand_off(&self, state: &TxState, due: bool) -> Result<(), Error> {
        if !due {
            return Ok(());
        }
        let Some(input) = saga::next_enqueue(state)? else {
            return Ok(());
        };
        let (service, transaction_id) = (input.service.clone(), input.transaction_id.clone());
        let position = input.saga.chain.as_ref().map_or(0, |c| c.position);
        // Not through the group commit and without the compensation's lock: the caller may
        // hold the step's (`Writer::enqueue_unlocked`). Boxed: only saga steps get here, and
        // the enqueue's future would otherwise make every ack's future several KiB larger.
        match Box::pin(self.writer.enqueue_unlocked(input)).await {
            Ok(_) | Err(Error::AlreadyExists(_)) => {
                tracing::info!(
                    saga_service = %state.service,
                    saga_transaction_id = %state.transaction_id,
                    %service, %transaction_id, position,
                    "compensation enqueued"
                );
                metrics::metrics().compensation(&service);
                Ok(())
            }
            Err(Error::InvalidArgument { field, message }) => {
                tracing::error!(
                    %service, %transaction_id, position, %field, %message,
                    "a compensation could not be enqueued as stored; its chain stops here"
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Dead letter first, then the terminal state: a crash in between leaves the retry
    /// SCHEDULED (delivered again later), never DEAD without its letter. A saga step's first
    /// compensation is enqueued before both.
    pub(crate) async fn dead_letter(&self, state: TxState, now: i64) -> Result<(), Error> {
        self.hand_off(&state, saga::starts_on_dead(&state)).await?;
        let letter = DeadLetter {
            service: state.service.clone(),
            transaction_id: state.transaction_id.clone(),
            day: self.grid.window_of(now).day,
            dead_at_ms: now,
            attempt: state.attempt,
            last_error: state.last_error.clone(),
            generation: state.generation,
        };
        self.store
            .put_dead_letter(&letter, self.opts.dead_letter_ttl_seconds)
            .await?;
        let (service, txid) = (state.service.clone(), state.transaction_id.clone());
        if state.conditional_writes() {
            // Another delivery's answer ended or changed it first: its letter stays listed
            // (a redrive skips a retry that is not DEAD), and its first compensation, enqueued
            // above, is cancelled before it is delivered (`Dispatcher::step_gate`).
            if !self.writer.end(state, Status::Dead).await? {
                return Err(changed_meanwhile(&service, &txid));
            }
        } else {
            self.writer.finish(state, Status::Dead).await?;
        }
        metrics::metrics().dead_letter(&service);
        Ok(())
    }

    /// Redelivers work handed back by a closed stream or an expired deadline; after
    /// `max_deliveries_per_attempt` deliveries the attempt counts as failed.
    pub fn requeue(self: &Arc<Self>, work: Work, avoid: Option<u64>) {
        let this = self.clone();
        // Once shut down the work is dropped unresolved: the bucket stays and is replayed.
        let _ = self.tasks.spawn(async move {
            if work.deliveries >= work.state.policy.max_deliveries_per_attempt {
                let error = format!("not acknowledged after {} deliveries", work.deliveries);
                this.resolve_expired(work, error).await;
                return;
            }
            // Cancelled, purged or finished meanwhile: nothing to redeliver. Only a state read
            // that answered says so: on a read error the check is repeated (an unchecked
            // redelivery could run a step whose SUCCEEDED ack another node already took).
            loop {
                match this
                    .store
                    .get_state(&work.state.service, &work.state.transaction_id)
                    .await
                {
                    Ok(current) => {
                        if !current.is_some_and(|s| s.is_live(work.state.generation)) {
                            work.resolve();
                            return;
                        }
                        break;
                    }
                    Err(e) => {
                        if this.stopping() {
                            // Dropped unresolved: the bucket stays and is replayed.
                            return;
                        }
                        tracing::warn!(error = %e, "cannot read the state of a delivery to redeliver, will retry");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
            // Its dependency held meanwhile: postponed to the hold's end, as the feed does,
            // rather than delivered during the hold. Should that write fail, it is delivered.
            if let Gate::Wait(until) = this.holds.gate(&work.state.dependency).await {
                if this.postpone_held(&work.state, until).await {
                    work.resolve();
                    return;
                }
            }
            let keep = {
                let this = this.clone();
                move || !this.stopping()
            };
            // Dropped unresolved on shutdown: the bucket stays and is replayed.
            let _ = this.hub.deliver(work, avoid, &keep).await;
        });
    }

    async fn resolve_expired(self: &Arc<Self>, mut work: Work, error: String) {
        loop {
            let lock = self
                .lock_transaction(&work.state.service, &work.state.transaction_id)
                .await;
            let current = match self
                .store
                .get_state(&work.state.service, &work.state.transaction_id)
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read state of an expired delivery, will retry");
                    drop(lock);
                    if self.stopping() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let live = current
                .as_ref()
                .is_some_and(|s| s.is_live(work.state.generation));
            if live {
                let mut state = current.expect("checked");
                let record = self.record_of(&work, AttemptEnd::DeadlineExpired, &error, "", None);
                // `record_of` counts the delivery being answered; none is here.
                state.history.record(AttemptRecord {
                    deliveries: work.deliveries,
                    ..record
                });
                let outcome = AttemptOutcome::Retry {
                    after: None,
                    error: error.clone(),
                    error_class: String::new(),
                    snooze: false,
                };
                if let Err(e) = self.resolve(state, work.deliveries, outcome).await {
                    tracing::warn!(error = %e, "cannot record an expired delivery, will retry");
                    drop(lock);
                    if self.stopping() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            }
            work.deliveries = 0;
            work.resolve();
            return;
        }
    }

    /// Expires overdue deliveries every `tick` until the node stops.
    pub async fn run_reaper(self: Arc<Self>, tick: Duration) {
        let mut stop = self.stopping.clone();
        loop {
            for (sub, work) in self.hub.expired() {
                tracing::debug!(transaction_id = %work.state.transaction_id, "ack deadline passed, redelivering");
                self.requeue(work, Some(sub));
            }
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}
