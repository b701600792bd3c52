//! An enqueue, top to bottom: `Writer::enqueue` (one retry) queues it for group commit; the
//! call that finds no group being written starts `write_groups`, which writes the queued
//! single enqueues group after group through the batch path; `enqueue_many` (a batch) takes
//! that path directly. No callback: the group commit's queues (`coalesce::Group`) hand the
//! slot to this module's code. `write_items` then runs its steps in order: lock, check
//! (`check`, below), read the state rows, decide (`plan`, below), place the new schedules
//! (`place` in the module above), write the pointers, then the state rows, in few requests
//! (one read round, one pointer round, one state round) and in the write order of the module
//! above.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    sync::Arc,
};

use futures::{stream, StreamExt};
use tracing::Instrument;

use rand::Rng;

use super::{new_generation, DirRow, EnqueueOutcome, Writer};
use crate::policy::Rules as _;
use crate::{
    error::Error,
    validate::{EnqueueInput, Schedule},
};
use rebound_common::coalesce::{Group, Limits, Slot};
use rebound_store::{
    policy::RetryPolicy, window::WindowId, Location, Pointer, Status, StoreError, TxState,
    MAX_GROUPED_PARTITIONS, MAX_GROUPED_POINTERS,
};

/// One pointer batch of an `enqueue_many`: the schedules it carries and how it went.
type PointerBatch = futures::future::BoxFuture<'static, (Vec<usize>, Result<(), StoreError>)>;

/// Most items of one batch handled together (one read round, one pointer round, one state
/// round); a larger batch goes in chunks of this size, one after the other.
const ENQUEUE_CHUNK: usize = 512;

/// What one chunk of a batch counts against `max_concurrent_writes`.
const CHUNK_PERMITS: usize = 32;

/// Most pointers one batch carries.
const MAX_POINTER_BATCH: usize = 256;
/// Coalesced pointer writes of one bucket partition in flight at once. At 32 concurrent
/// single enqueues 1 made 4,316 enqueues/s against 3,412 with 4 (more pointers share a
/// write); batches do not go through this.
const POINTER_WRITES_PARALLEL: usize = 1;
/// Pointer batches of one `EnqueueRetryBatch` chunk in flight at once (different buckets).
const BATCH_POINTER_WRITES_PARALLEL: usize = 8;

/// Pointer writes coalesced per bucket partition: while writes to a partition are in flight,
/// later pointers for it queue and go out together as one single-partition unlogged batch. At
/// low load nothing waits; under load a busy bucket costs one mutation per round trip instead
/// of one per pointer. Each caller still returns only once its own pointer is durable, so the
/// write order (pointer, then state) is unchanged.
pub(super) type PointerWrites = Group<(String, Location), Pointer, (), StoreError>;

pub(super) fn pointer_writes() -> Arc<PointerWrites> {
    Group::new(Limits {
        max_items: MAX_POINTER_BATCH,
        max_weight: usize::MAX,
        parallel: POINTER_WRITES_PARALLEL,
    })
}

/// Group commit: single enqueues (`EnqueueRetry`) that arrive while earlier ones are being written
/// go out together through the batch path (`write_chunk`): one `IN` read of their state rows, one
/// pointer batch per bucket, a few state-row batches. At low load a call goes out at once, alone;
/// under load a call pays a share of a batch instead of three requests of its own. Each caller
/// still returns only once its own state row is durable, and every item keeps the write order of
/// docs/architecture.md, invariant 2 (directory, pointer, state row).
pub(super) type EnqueueGroup =
    Group<(), (EnqueueInput, tracing::Span), Result<EnqueueOutcome, Error>, Error>;

pub(super) fn group_commit() -> Arc<EnqueueGroup> {
    Group::new(Limits {
        max_items: GROUP_COMMIT_MAX,
        max_weight: ENQUEUE_GROUP_BYTES,
        parallel: GROUP_COMMIT_PARALLEL,
    })
}

/// Group-commit flushes in flight at once. One: the calls that arrive while a flush is being
/// written all go out in the next. Cassandra's CPU bounds single enqueues on a small box, and
/// it follows the requests: at 32 concurrent callers, 1 made 0.27 requests per enqueue and
/// 81-130 µs of Cassandra CPU, against 0.75 and 158-196 µs with 4 (`scripts/bench`, alternating
/// runs of 2026-12-03). A flush in flight holds the next one back, so a slow Cassandra request
/// delays every single enqueue behind it by as much (batches do not queue here).
const GROUP_COMMIT_PARALLEL: usize = 1;
/// Most single enqueues one group-commit flush carries, and their bytes.
const GROUP_COMMIT_MAX: usize = 256;
const ENQUEUE_GROUP_BYTES: usize = 8 << 20;

/// What a queued enqueue weighs in a group (its bytes, roughly).
fn input_weight(input: &EnqueueInput) -> usize {
    256 + input.payload.len()
        + input.saga.compensations.iter().map(Vec::len).sum::<usize>()
        + input.last_error.len()
        + input
            .attributes
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}

impl Writer {
    /// Enqueues one retry (`EnqueueRetry`), grouped with the single enqueues in flight at the
    /// same moment (see `EnqueueGroup`); the same rules and write order as a batch item, and
    /// errors name the fields without a `requests[i].` prefix.
    pub async fn enqueue(&self, input: EnqueueInput) -> Result<EnqueueOutcome, Error> {
        // The caller's permit is held until its item is written, so at most
        // REBOUND_MAX_CONCURRENT_WRITES single enqueues are queued or in flight.
        let _permit = self.permits.try_acquire().map_err(|_| self.busy())?;
        let weight = input_weight(&input);
        let joined = self
            .group
            .join((), (input, tracing::Span::current()), weight);
        if let Some(slot) = joined.slot {
            // No group was being written: this call starts the task that writes the queued
            // enqueues, group after group, until none is left. The group owns that task, so a
            // caller that hangs up stalls no one; once shut down, this call carries it itself.
            let Some(writer) = self.me.upgrade() else {
                return Err(Error::Unavailable(
                    "the node is stopping; nothing was scheduled".into(),
                ));
            };
            // Boxed, so that this call's future (moved through every layer of the gRPC
            // stack) does not carry the group's several KiB twice.
            let carry = Box::pin(async move { writer.write_groups(slot).await });
            if let Err(carry) = self.group.tasks().spawn(carry) {
                carry.await;
            }
        }
        joined.answer.get().await?
    }

    /// Writes the groups of a group-commit slot, one after the other, until its queue is empty.
    /// A group runs in the span of the call that opened it, so its store calls appear in that
    /// call's trace (the others' traces show their own RPC spans).
    async fn write_groups(
        &self,
        mut slot: Slot<(), (EnqueueInput, tracing::Span), Result<EnqueueOutcome, Error>, Error>,
    ) {
        while let Some(mut group) = slot.next_batch() {
            let queued = std::mem::take(&mut group.items);
            let span = queued
                .first()
                .map_or_else(tracing::Span::none, |(_, span)| span.clone());
            let inputs: Vec<EnqueueInput> = queued.into_iter().map(|(input, _)| input).collect();
            rebound_store::metric_definitions::metrics().coalesced("enqueue_group", inputs.len());
            let results = self.enqueue_group(inputs).instrument(span).await;
            group.answer(Ok(results));
        }
    }

    /// One group-commit flush: the queued single enqueues, as batch chunks in which each
    /// transaction appears once (a transaction enqueued twice at once goes in a second chunk,
    /// after the first, as two calls one after the other would).
    async fn enqueue_group(&self, inputs: Vec<EnqueueInput>) -> Vec<Result<EnqueueOutcome, Error>> {
        let n = inputs.len();
        let mut rounds: Vec<Vec<(usize, EnqueueInput)>> = Vec::new();
        let mut seen: HashMap<(String, String), usize> = HashMap::new();
        for (i, input) in inputs.into_iter().enumerate() {
            let round = seen
                .entry((input.service.clone(), input.transaction_id.clone()))
                .and_modify(|r| *r += 1)
                .or_insert(0);
            if rounds.len() <= *round {
                rounds.push(Vec::new());
            }
            rounds[*round].push((i, input));
        }
        let mut results: Vec<Option<Result<EnqueueOutcome, Error>>> = vec![None; n];
        for round in rounds {
            let (at, inputs): (Vec<usize>, Vec<_>) =
                round.into_iter().map(|(i, input)| (i, Ok(input))).unzip();
            let written = self.write_chunk(&|_| String::new(), inputs).await;
            for (i, r) in at.into_iter().zip(written) {
                results[i] = Some(r);
            }
        }
        results
            .into_iter()
            .map(|r| r.expect("every item is in one round"))
            .collect()
    }

    /// Enqueues many retries at once (`EnqueueRetryBatch`), with the same rules and the same
    /// write order per item as [`Writer::enqueue`], in few Cassandra requests: the state rows
    /// are read with `IN` queries, the pointers of one bucket go out as one single-partition
    /// batch, and then the state rows in small batches. One result per input, in order; a
    /// transaction may appear only once (the API refuses repeats before this).
    pub async fn enqueue_many(
        &self,
        inputs: Vec<Result<EnqueueInput, Error>>,
    ) -> Vec<Result<EnqueueOutcome, Error>> {
        let mut results = Vec::with_capacity(inputs.len());
        let mut inputs = inputs.into_iter().peekable();
        while inputs.peek().is_some() {
            let chunk: Vec<_> = inputs.by_ref().take(ENQUEUE_CHUNK).collect();
            results.extend(self.enqueue_chunk(results.len(), chunk).await);
        }
        results
    }

    /// Items `first..` of a batch (`first` names them in errors).
    async fn enqueue_chunk(
        &self,
        first: usize,
        inputs: Vec<Result<EnqueueInput, Error>>,
    ) -> Vec<Result<EnqueueOutcome, Error>> {
        let valid = inputs.iter().filter(|i| i.is_ok()).count();
        // A chunk has at most about CHUNK_PERMITS Cassandra requests in flight at once (its
        // reads, pointer batches and state batches are bounded), and counts that many against
        // REBOUND_MAX_CONCURRENT_WRITES, as the same number of concurrent single enqueues would.
        let Ok(_permits) = self
            .permits
            .try_acquire_many(valid.min(CHUNK_PERMITS) as u32)
        else {
            return inputs
                .into_iter()
                .map(|i| i.and_then(|_| Err(self.busy())))
                .collect();
        };
        self.write_chunk(&|i| format!("requests[{}].", first + i), inputs)
            .await
    }

    /// An enqueue made by the node itself while it may hold another transaction's lock: a
    /// compensation chain's hand-off (the `saga` module's). It goes straight out, neither queued
    /// behind a group-commit flush nor taking the transaction's lock: a flush that takes the
    /// held transaction's lock after this one's, in its order, would wait for the caller while
    /// the caller waits for it. Two writers of one transaction are safe without the lock, as
    /// they are on two nodes (the state row names one generation).
    pub async fn enqueue_unlocked(&self, input: EnqueueInput) -> Result<EnqueueOutcome, Error> {
        self.write_items(&|_| String::new(), vec![Ok(input)], false)
            .await
            .pop()
            .expect("one result per item")
    }

    /// Writes items that hold their permits: `prefix(i)` names item `i` in errors.
    async fn write_chunk(
        &self,
        prefix: &(dyn Fn(usize) -> String + Sync),
        inputs: Vec<Result<EnqueueInput, Error>>,
    ) -> Vec<Result<EnqueueOutcome, Error>> {
        self.write_items(prefix, inputs, true).await
    }

    /// `write_chunk`, taking the transactions' locks when `lock`.
    async fn write_items(
        &self,
        prefix: &(dyn Fn(usize) -> String + Sync),
        inputs: Vec<Result<EnqueueInput, Error>>,
        lock: bool,
    ) -> Vec<Result<EnqueueOutcome, Error>> {
        let n = inputs.len();
        let mut results: Vec<Option<Result<EnqueueOutcome, Error>>> = vec![None; n];
        let valid = inputs.iter().filter(|i| i.is_ok()).count();
        // 1. Lock every transaction, in one global order so two batches cannot deadlock. The
        //    clock is read after the locks, so waiting for another writer of the same
        //    transaction cannot push a window choice into the past.
        let mut keys: Vec<(&str, &str)> = inputs
            .iter()
            .flatten()
            .map(|input| (input.service.as_str(), input.transaction_id.as_str()))
            .collect();
        keys.sort_unstable();
        let mut locks = Vec::with_capacity(keys.len());
        for (service, transaction_id) in keys.into_iter().filter(|_| lock) {
            locks.push(self.tx_locks.lock(service, transaction_id).await);
        }
        let now = self.clock.now_ms();
        // 2. Context checks (policy, delay, attempt), then the services, as one enqueue does.
        let mut checked: Vec<(usize, Checked)> = Vec::with_capacity(valid);
        for (i, input) in inputs.into_iter().enumerate() {
            match input.and_then(|input| self.check(&prefix(i), input, now)) {
                Ok(c) => checked.push((i, c)),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let services: BTreeSet<&str> = checked
            .iter()
            .map(|(_, c)| c.input.service.as_str())
            .collect();
        let mut untouched: HashMap<String, Error> = HashMap::new();
        for service in services {
            if let Err(e) = self.services.touch(service).await {
                untouched.insert(service.to_string(), e);
            }
        }
        checked.retain(|(i, c)| match untouched.get(&c.input.service) {
            Some(e) => {
                results[*i] = Some(Err(e.clone()));
                false
            }
            None => true,
        });
        // 3. Read the state rows, service by service.
        let mut by_service: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (k, (_, c)) in checked.iter().enumerate() {
            by_service
                .entry(c.input.service.clone())
                .or_default()
                .push(k);
        }
        let mut existing: Vec<Option<Result<Option<TxState>, Error>>> = vec![None; checked.len()];
        for (service, ks) in &by_service {
            let ids: Vec<String> = ks
                .iter()
                .map(|&k| checked[k].1.input.transaction_id.clone())
                .collect();
            match self.store.get_states(service, &ids).await {
                Ok(states) => {
                    for (&k, st) in ks.iter().zip(states) {
                        existing[k] = Some(Ok(st));
                    }
                }
                Err(e) => {
                    let e = Error::from(e);
                    for &k in ks {
                        existing[k] = Some(Err(e.clone()));
                    }
                }
            }
        }
        // 4. Decide each item; new schedules get their bucket and directory rows.
        let mut confirms: Vec<(usize, TxState)> = Vec::new();
        let mut schedules: Vec<(usize, TxState, bool)> = Vec::new();
        let mut placed: Vec<(usize, WindowId, TxState, bool)> = Vec::new();
        for ((i, c), found) in checked.into_iter().zip(existing) {
            let plan = found
                .expect("every checked item was read")
                .and_then(|found| self.plan(c, found, now));
            match plan {
                Err(e) => results[i] = Some(Err(e)),
                Ok(Plan::Confirm(state)) => confirms.push((i, state)),
                Ok(Plan::Schedule {
                    state,
                    target,
                    deduplicated,
                }) => placed.push((i, target, state, deduplicated)),
            }
        }
        let mut groups: HashMap<(String, Location), Vec<usize>> = HashMap::new();
        let mut directory: HashSet<DirRow> = HashSet::new();
        // Targets below a compacted window move up to it (see `above_low_water`): one read
        // per window this process has not written yet.
        let mut bumped: HashMap<WindowId, Result<WindowId, Error>> = HashMap::new();
        let mut kept = Vec::with_capacity(placed.len());
        for (i, target, state, deduplicated) in placed {
            let above = match bumped.get(&target) {
                Some(a) => a.clone(),
                None => {
                    let a = self.above_low_water(target).await;
                    bumped.insert(target, a.clone());
                    a
                }
            };
            match above {
                Ok(above) => kept.push((i, above, state, deduplicated)),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        for (i, target, mut state, deduplicated) in kept {
            let (location, rows) = self.assign(&state.service, &state.transaction_id, target, now);
            directory.extend(rows);
            groups
                .entry((state.service.clone(), location.clone()))
                .or_default()
                .push(schedules.len());
            state.location = Some(location);
            schedules.push((i, state, deduplicated));
        }
        if let Err(e) = self.write_directory(directory.into_iter().collect()).await {
            // No pointer may go below a directory row that is not durable.
            for (i, _, _) in schedules.drain(..) {
                results[i] = Some(Err(e.clone()));
            }
            groups.clear();
        }
        // 5. The pointers: one single-partition batch per bucket (at most MAX_POINTER_BATCH),
        //    and the buckets that get only a few (a group commit spreads its items over every
        //    lane) packed together, up to MAX_GROUPED_PARTITIONS buckets and
        //    MAX_GROUPED_POINTERS pointers per request.
        let mut packs: Vec<Vec<(String, Location, Vec<usize>)>> = Vec::new();
        let mut small: Vec<(String, Location, Vec<usize>)> = Vec::new();
        let mut small_rows = 0;
        for ((service, location), members) in groups {
            for part in members.chunks(MAX_POINTER_BATCH) {
                let group = (service.clone(), location.clone(), part.to_vec());
                if part.len() > MAX_GROUPED_POINTERS / 2 {
                    packs.push(vec![group]);
                    continue;
                }
                if small.len() == MAX_GROUPED_PARTITIONS
                    || small_rows + part.len() > MAX_GROUPED_POINTERS
                {
                    packs.push(std::mem::take(&mut small));
                    small_rows = 0;
                }
                small_rows += part.len();
                small.push(group);
            }
        }
        if !small.is_empty() {
            packs.push(small);
        }
        let mut pointer_writes: Vec<PointerBatch> = Vec::new();
        for pack in packs {
            let mut members = Vec::new();
            let groups: Vec<(String, Location, Vec<Pointer>)> = pack
                .into_iter()
                .map(|(service, location, part)| {
                    let pointers = part
                        .iter()
                        .map(|&k| {
                            let st = &schedules[k].1;
                            Pointer {
                                transaction_id: st.transaction_id.clone(),
                                generation: st.generation,
                                attempt: st.attempt,
                                enqueued_at_ms: now,
                                due_at_ms: Some(st.due_at_ms),
                            }
                        })
                        .collect();
                    members.extend(part);
                    (service, location, pointers)
                })
                .collect();
            let store = self.store.clone();
            self.pointers.record(members.len());
            pointer_writes.push(Box::pin(async move {
                rebound_store::metric_definitions::metrics()
                    .coalesced("pointer_writes", members.len());
                let r = store.put_pointer_groups(&groups).await;
                (members, r)
            }));
        }
        let written: Vec<_> = stream::iter(pointer_writes)
            .buffer_unordered(BATCH_POINTER_WRITES_PARALLEL)
            .collect()
            .await;
        let mut pointer_ok = vec![false; schedules.len()];
        for (part, r) in written {
            for k in part {
                match &r {
                    Ok(()) => pointer_ok[k] = true,
                    Err(e) => results[schedules[k].0] = Some(Err(Error::from(e.clone()))),
                }
            }
        }
        // 6. The state rows, each only after its pointer is durable. A pointer that landed
        //    after its window ended is placed again on its own (see `write_schedule`).
        let after = self.clock.now_ms();
        let mut rows: Vec<(usize, TxState, bool)> = confirms
            .into_iter()
            .map(|(i, state)| (i, state, true))
            .collect();
        let mut late: Vec<(usize, TxState, bool)> = Vec::new();
        for (s, ok) in schedules.into_iter().zip(pointer_ok) {
            if !ok {
                continue;
            }
            let ended =
                s.1.location
                    .as_ref()
                    .is_some_and(|l| after >= self.grid.end_ms(l.window));
            if ended {
                late.push(s);
            } else {
                rows.push(s);
            }
        }
        let written = self
            .store
            .put_states(rows.iter().map(|(_, s, _)| (s.clone(), None)).collect())
            .await;
        let landed = self.check_state_landed(now);
        for ((i, state, deduplicated), r) in rows.into_iter().zip(written) {
            if r.is_ok() {
                self.arm(&state);
            }
            results[i] = Some(match r {
                Ok(()) => landed.clone().map(|()| outcome(state, deduplicated)),
                Err(e) => Err(e.into()),
            });
        }
        for (i, mut state, deduplicated) in late {
            let location = state.location.clone().expect("placed");
            tracing::warn!(
                transaction_id = %state.transaction_id,
                late_ms = after - self.grid.end_ms(location.window),
                "a batch pointer landed after its window ended; placing the retry again"
            );
            let r = async {
                self.store
                    .delete_late_pointer(&state.service, &location, &state.transaction_id)
                    .await?;
                let now = self.clock.now_ms();
                let target = self.grid.target(now, state.due_at_ms);
                state.generation = new_generation(state.generation, now);
                state.updated_at_ms = now;
                self.write_schedule(&mut state, target, now, None).await
            }
            .await;
            results[i] = Some(r.map(|()| outcome(state, deduplicated)));
        }
        drop(locks);
        results
            .into_iter()
            .map(|r| r.expect("every item has a result"))
            .collect()
    }
}

/// How far the due time of a repeated enqueue may be from the live schedule's for the repeat
/// to confirm it (a client repeating a call after a timeout asks again "in 3 s" a little later).
const CONFIRM_WITHIN_MS: i64 = 1_000;

/// An enqueue that passed the checks needing the node's settings.
struct Checked {
    input: EnqueueInput,
    policy: RetryPolicy,
    target: WindowId,
    due_at_ms: i64,
}

/// What an enqueue writes.
enum Plan {
    /// The retry is already scheduled in the target window: refresh the state row only.
    Confirm(TxState),
    /// A new generation in `target`: pointer, then state row.
    Schedule {
        state: TxState,
        target: WindowId,
        deduplicated: bool,
    },
}

fn outcome(state: TxState, deduplicated: bool) -> EnqueueOutcome {
    EnqueueOutcome {
        transaction_id: state.transaction_id,
        due_at_ms: state.due_at_ms,
        generation: state.generation,
        deduplicated,
    }
}

impl Writer {
    /// The checks that need the node's settings: effective policy, attempts left, delay limit;
    /// and the window the retry goes to. `prefix` names a batch item in errors.
    fn check(&self, prefix: &str, input: EnqueueInput, now: i64) -> Result<Checked, Error> {
        // Node default, then the service's stored policy, then the enqueue's own fields.
        let policy = self
            .services
            .service_policy(&input.service)
            .apply(&input.policy);
        policy
            .validate()
            .map_err(|e| Error::invalid(format!("{prefix}policy.{}", e.field), e.message))?;
        // A compensation's policy is checked now against its service's, as its own enqueue
        // will check it: a chain that could not be handed on is refused before it is stored.
        for (i, (service, overrides)) in input.compensation_policies.iter().enumerate() {
            self.services
                .service_policy(service)
                .apply(overrides)
                .validate()
                .map_err(|e| {
                    Error::invalid(
                        format!("{prefix}compensations[{i}].policy.{}", e.field),
                        e.message,
                    )
                })?;
        }
        if policy.attempts_exhausted(input.attempt) {
            return Err(Error::invalid(
                format!("{prefix}attempt"),
                format!(
                    "{} attempts already made reaches max_attempts ({}): nothing left to retry",
                    input.attempt, policy.max_attempts
                ),
            ));
        }
        let max_delay_ms = i64::try_from(self.opts.max_delay.as_millis()).unwrap_or(i64::MAX);
        let due_ms = match input.schedule {
            Schedule::Delay(d) => {
                if d > self.opts.max_delay {
                    return Err(Error::invalid(
                        format!("{prefix}delay"),
                        format!(
                            "{}s is over the maximum of {}s (REBOUND_MAX_DELAY_SECONDS)",
                            d.as_secs(),
                            self.opts.max_delay.as_secs()
                        ),
                    ));
                }
                now + d.as_millis() as i64
            }
            Schedule::DueAt(t) => {
                if t.saturating_sub(now) > max_delay_ms {
                    return Err(Error::invalid(
                        format!("{prefix}due_time"),
                        format!(
                            "is {}s from now, over the maximum of {}s (REBOUND_MAX_DELAY_SECONDS)",
                            (t - now) / 1000,
                            self.opts.max_delay.as_secs()
                        ),
                    ));
                }
                t
            }
            Schedule::PolicyBackoff => {
                let d = policy.backoff(input.attempt.max(1), rand::rng().random::<f64>());
                now + (d.min(self.opts.max_delay).as_millis() as i64)
            }
        };
        let target = self.first_window(now, due_ms);
        Ok(Checked {
            input,
            policy,
            target,
            due_at_ms: due_ms.max(now),
        })
    }

    /// What a checked enqueue writes, given the transaction's state row: refuse (already
    /// SUCCEEDED), confirm the live schedule (same window), or schedule a new generation.
    fn plan(&self, checked: Checked, existing: Option<TxState>, now: i64) -> Result<Plan, Error> {
        let Checked {
            input,
            policy,
            target,
            due_at_ms,
        } = checked;
        let floor = existing.as_ref().map_or(0, TxState::generation_floor);
        let existing_cancel = existing.as_ref().and_then(|s| s.cancelled_generation);
        let existing_success = existing.as_ref().and_then(|s| s.succeeded_generation);
        let previous = match existing {
            Some(s) if s.status == Status::Succeeded => {
                return Err(Error::AlreadyExists(format!(
                    "transaction {:?} of service {:?} already SUCCEEDED; its id is remembered for {}s after a terminal state (REBOUND_TERMINAL_TTL_SECONDS)",
                    input.transaction_id, input.service, self.opts.terminal_ttl_seconds
                )));
            }
            Some(s) if s.status == Status::Scheduled => Some(s),
            // DEAD or CANCELLED: a new enqueue starts a new retry.
            _ => None,
        };
        let mut state = TxState {
            service: input.service,
            transaction_id: input.transaction_id,
            status: Status::Scheduled,
            generation: 0,
            attempt: input.attempt,
            payload: input.payload,
            attributes: input.attributes,
            policy,
            first_enqueued_at_ms: now,
            last_enqueued_at_ms: now,
            updated_at_ms: now,
            due_at_ms,
            last_error: input.last_error,
            location: None,
            enqueue_count: 1,
            delivery_count: 0,
            legacy_columns: false,
            base_generation: 0,
            cancelled_generation: existing_cancel,
            succeeded_generation: existing_success,
            trace: input.trace,
            dependency: input.dependency,
            saga: input.saga,
            history: Default::default(),
            written: Default::default(),
        };
        if let Some(prev) = &previous {
            // A re-enqueue without compensations (or, for a compensation, without its chain)
            // keeps what the retry has.
            if state.saga.compensations.is_empty() && state.saga.chain.is_none() {
                state.saga.clone_from(&prev.saga);
            } else if state.saga.chain.is_none() {
                state.saga.chain.clone_from(&prev.saga.chain);
            }
            state.first_enqueued_at_ms = prev.first_enqueued_at_ms;
            // The retry goes on, so its attempts so far stay on record.
            state.history.clone_from(&prev.history);
            state.enqueue_count = prev.enqueue_count.saturating_add(1);
            state.delivery_count = prev.delivery_count;
            // A live row keeps its layout until it finishes.
            state.legacy_columns = prev.legacy_columns;
            state.attempt = state.attempt.max(prev.attempt);
            if state.last_error.is_empty() {
                state.last_error.clone_from(&prev.last_error);
            }
            // Every attempt links to the call that failed first.
            if !prev.trace.is_empty() {
                state.trace.clone_from(&prev.trace);
            }
            // A repeated call (the same window, or the live pointer in the current window, not
            // read yet, where a near-term write placed it; and a due time within
            // `CONFIRM_WITHIN_MS` of the live one's): confirm. The live pointer and its due time
            // stay; only the state row is refreshed. A due time further off is a new schedule,
            // so that the retry is delivered when the latest enqueue asked.
            let current = self.grid.window_of(now);
            if let Some(loc) = prev.location.as_ref().filter(|l| {
                (l.window == target || l.window == current)
                    && (prev.due_at_ms - due_at_ms).abs() <= CONFIRM_WITHIN_MS
            }) {
                state.generation = prev.generation;
                state.base_generation = prev.base_generation;
                state.location = Some(loc.clone());
                state.due_at_ms = prev.due_at_ms;
                return Ok(Plan::Confirm(state));
            }
        }
        // Above every generation seen, the cancelled one included, so that a fresh start after
        // a cancel is not taken for a schedule the cancel covers (whatever this node's clock).
        state.generation = new_generation(floor, now);
        // A reschedule by an enqueue keeps the base of the live row it read: the generation
        // its lineage was last delivered and acknowledged from. So a SUCCEEDED ack of a
        // delivery that was in flight covers every schedule enqueues made after it (through
        // the succeeded cell), however many: with the live generation as base, a second
        // re-enqueue escaped the cell and the retry ran again after the ack had answered OK
        // (found by scripts/soak). A fresh start derives from itself; a row written before
        // schema 0007 has no base, and derives from its generation.
        state.base_generation = match &previous {
            Some(prev) if prev.base_generation > 0 => prev.base_generation,
            Some(prev) => prev.generation,
            None => state.generation,
        };
        Ok(Plan::Schedule {
            state,
            target,
            deduplicated: previous.is_some(),
        })
    }
}
