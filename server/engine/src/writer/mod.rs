//! The enqueue path (docs/architecture.md, "Data model" and "Invariants"): choose the window
//! (the current one for a near-term retry, else by the W+1 rule), the lane by the transaction
//! id, the bucket by an in-memory counter, write the directory rows once per key per process,
//! then the Tier-5 pointer, then the state row.
//!
//! Invariants kept here:
//! - a pointer is written only after its directory rows are durable, and a state row only
//!   after its pointer, so a state row always has a reachable pointer;
//! - a pointer is acted on only when its generation equals the state row's; every schedule
//!   gets a fresh generation that is unique across nodes (time plus 20 random bits), so two
//!   concurrent enqueues of one transaction leave at most one live pointer;
//! - no read on the bucket path: counters live in memory, and a new boot epoch per process
//!   makes them exact across restarts.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{stream, StreamExt, TryStreamExt};
use rand::Rng;
use tokio::sync::Semaphore;

use crate::window::WindowGrid;
use crate::{
    error::Error,
    ownership::Ownership,
    services::Services,
    timer::{Entry, Timer},
    txlock::{TxLock, TxLocks},
};
use rebound_common::tasks::Tasks;
use rebound_store::{
    clock::SharedClock, policy::RetryPolicy, token, window::WindowId, InstanceRow, Location,
    Pointer, ScheduleStore, Status, StoreError, TxState,
};

use enqueue::{group_commit, pointer_writes, EnqueueGroup, PointerWrites};

mod cancel;
mod enqueue;
mod lanes;

/// Writer settings (`engine::Settings::options` derives them from the engine's settings).
#[derive(Debug, Clone)]
pub struct WriterOptions {
    pub node_id: String,
    pub boot_epoch: i64,
    pub window_seconds: u32,
    pub bucket_size: u32,
    pub lanes: u32,
    pub max_delay: Duration,
    pub terminal_ttl_seconds: u32,
    /// DEAD rows live as long as their dead letter, so a redrive still has the payload.
    pub dead_ttl_seconds: u32,
    pub max_concurrent_writes: usize,
    pub default_policy: RetryPolicy,
    /// How long a reader waits for a state row after its pointer (see
    /// `DispatchOptions::orphan_grace_ms`; `Config::orphan_grace_ms`): a state row written
    /// later may be too late.
    pub orphan_grace_ms: i64,
}

/// How long after its state row is written the timer may deliver a retry at the earliest: time
/// for a concurrent enqueue of the same transaction on another node, which read the row before
/// this write landed, to land its own, so that the state row read when the timer fires names
/// the one live generation (docs/architecture.md, "Guarantees across nodes": one live retry per
/// transaction). Only a retry due sooner than this after its enqueue waits for it.
const SETTLE_MS: i64 = 500;

/// Placements of one schedule tried before giving up when every pointer landed late.
const PLACEMENTS: usize = 3;

/// What an enqueue did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueOutcome {
    pub transaction_id: String,
    /// When the retry is due: the time asked for, or now when that has passed.
    pub due_at_ms: i64,
    pub generation: i64,
    pub deduplicated: bool,
}

/// A directory row (Tiers 1-4) a pointer needs above it: the window, and for Tier 3 and 4 the
/// service and lane (the writer instance) and the bucket.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum DirRow {
    Day(WindowId),
    Window(WindowId),
    Instance(WindowId, String, u32),
    Bucket(WindowId, String, u32, u32),
}

/// Directory rows written at once when a batch opens new buckets.
const DIRECTORY_WRITES_PARALLEL: usize = 16;

/// Directory rows already written by this process, and the bucket counters. Entries for
/// windows that can no longer be written (older than the current window) are swept.
#[derive(Debug, Default)]
struct Directory {
    days: HashSet<i32>,
    windows: HashSet<WindowId>,
    instances: HashSet<(WindowId, String, u32)>,
    buckets: HashSet<(WindowId, String, u32, u32)>,
    counters: HashMap<(WindowId, String, u32), u64>,
    swept_at: Option<WindowId>,
}

impl Directory {
    fn sweep(&mut self, current: WindowId) {
        if self.swept_at.is_some_and(|w| w >= current) {
            return;
        }
        self.swept_at = Some(current);
        self.days.retain(|d| *d >= current.day);
        self.windows.retain(|w| *w >= current);
        self.instances.retain(|k| k.0 >= current);
        self.buckets.retain(|k| k.0 >= current);
        self.counters.retain(|k, _| k.0 >= current);
    }
}

/// The enqueue path of one node. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Writer {
    store: Arc<dyn ScheduleStore>,
    clock: SharedClock,
    grid: WindowGrid,
    opts: WriterOptions,
    directory: Mutex<Directory>,
    permits: Semaphore,
    services: Arc<Services>,
    pointers: Arc<PointerWrites>,
    group: Arc<EnqueueGroup>,
    /// This writer, for the task that carries a group-commit slot.
    me: std::sync::Weak<Writer>,
    tx_locks: TxLocks,
    /// The dispatcher's memory path: each schedule written into a lane of this node's is armed
    /// once its state row is durable.
    timer: Arc<Timer>,
    /// The lanes of each service in this node's own slots.
    lanes: lanes::Lanes,
}

impl Writer {
    pub fn new(
        store: Arc<dyn ScheduleStore>,
        clock: SharedClock,
        opts: WriterOptions,
        services: Arc<Services>,
        timer: Arc<Timer>,
        ownership: Arc<dyn Ownership>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|writer: &std::sync::Weak<Writer>| Self {
            lanes: lanes::Lanes::new(ownership, opts.lanes, opts.node_id.clone(), opts.boot_epoch),
            services,
            timer,
            pointers: pointer_writes(),
            group: group_commit(),
            me: writer.clone(),
            tx_locks: TxLocks::default(),
            grid: WindowGrid::new(opts.window_seconds),
            permits: Semaphore::new(opts.max_concurrent_writes),
            store,
            clock,
            opts,
            directory: Mutex::new(Directory::default()),
        })
    }

    /// The owners of the writer's coalesced flushes (group commit, pointers), for shutdown.
    pub fn flush_tasks(&self) -> [&Tasks; 2] {
        [self.group.tasks(), self.pointers.tasks()]
    }

    /// Pointer writes issued so far and the pointers they carried (micro-batching).
    pub fn pointer_writes(&self) -> (u64, u64) {
        let c = self.pointers.counts();
        (c.flushes, c.items)
    }

    /// Group-commit flushes of single enqueues so far and the enqueues they carried.
    pub fn group_commits(&self) -> (u64, u64) {
        let c = self.group.counts();
        (c.flushes, c.items)
    }

    /// Holds the lock of one transaction (see `txlock`) for a read-decide-write of its state
    /// row outside the writer. Not reentrant: nothing called while holding it may take it.
    pub async fn lock_transaction(&self, service: &str, transaction_id: &str) -> TxLock<'_> {
        self.tx_locks.lock(service, transaction_id).await
    }

    pub fn grid(&self) -> WindowGrid {
        self.grid
    }

    /// Pointers per bucket: a lane's bucket b is opened after b times this many were placed
    /// in it.
    pub fn bucket_size(&self) -> u32 {
        self.opts.bucket_size
    }

    /// This writer's node id and boot epoch (its instances' names carry them).
    pub fn identity(&self) -> (&str, i64) {
        (&self.opts.node_id, self.opts.boot_epoch)
    }

    /// The writer instance name of a lane: `<node_id>-<boot_epoch>-<lane>`.
    pub fn instance_name(&self, lane: u32) -> String {
        format!("{}-{}-{}", self.opts.node_id, self.opts.boot_epoch, lane)
    }

    fn busy(&self) -> Error {
        Error::ResourceExhausted(format!(
            "node is at its limit of {} concurrent enqueues (REBOUND_MAX_CONCURRENT_WRITES); retry with backoff",
            self.opts.max_concurrent_writes
        ))
    }

    /// `target`, or the first window of its day the compactor has not passed yet when
    /// `target` is below it. Only a writer whose clock lags the compactor's by more than the
    /// margin (clock sync off on a wrong clock) can choose a window that was compacted
    /// already; its rows there would be below the low-water mark, where no scan reads. Read
    /// once per window per process (when its directory rows are first written).
    async fn above_low_water(&self, target: WindowId) -> Result<WindowId, Error> {
        if self
            .directory
            .lock()
            .expect("directory lock")
            .windows
            .contains(&target)
        {
            return Ok(target);
        }
        let low = self.store.low_water(target.day).await?;
        if low > target.index {
            tracing::warn!(
                window = target.index,
                low_water = low,
                "this node's clock lags the compactor's: placing the retry at the low-water mark"
            );
            return Ok(WindowId {
                day: target.day,
                index: low,
            });
        }
        Ok(target)
    }

    /// Writes one pointer, coalesced with the other pointers of its bucket partition that are
    /// written at the same moment (see `PointerWrites`): the call that finds the partition's
    /// slot free starts the task that writes them, batch after batch, until none is left.
    /// Returns once this pointer is durable.
    async fn write_pointer(
        &self,
        service: &str,
        location: &Location,
        pointer: Pointer,
    ) -> Result<(), StoreError> {
        let key = (service.to_string(), location.clone());
        let joined = self.pointers.join(key.clone(), pointer, 1);
        if let Some(mut slot) = joined.slot {
            let store = self.store.clone();
            let carry = async move {
                let (service, location) = key;
                while let Some(mut batch) = slot.next_batch() {
                    let pointers = std::mem::take(&mut batch.items);
                    rebound_store::metric_definitions::metrics()
                        .coalesced("pointer_writes", pointers.len());
                    let written = store.put_pointers(&service, &location, &pointers).await;
                    batch.answer(written.map(|()| vec![(); pointers.len()]));
                }
            };
            if let Err(carry) = self.pointers.tasks().spawn(carry) {
                carry.await;
            }
        }
        joined.answer.get().await
    }

    /// Picks lane and bucket for a new pointer in `window` and makes sure its directory rows
    /// (Tiers 1-4) exist, writing each key at most once per process.
    async fn place(
        &self,
        service: &str,
        transaction_id: &str,
        window: WindowId,
        now: i64,
    ) -> Result<Location, Error> {
        let (location, rows) = self.assign(service, transaction_id, window, now);
        self.write_directory(rows).await?;
        Ok(location)
    }

    /// Picks lane and bucket (the in-memory counter moves on) and lists the directory rows
    /// this process has not written yet for them.
    fn assign(
        &self,
        service: &str,
        transaction_id: &str,
        window: WindowId,
        now: i64,
    ) -> (Location, Vec<DirRow>) {
        let lane = self.lanes.suffix(service, transaction_id);
        let current = self.grid.window_of(now);
        let mut dir = self.directory.lock().expect("directory lock");
        dir.sweep(current);
        let count = dir
            .counters
            .entry((window, service.to_string(), lane))
            .or_insert(0);
        let bucket = (*count / u64::from(self.opts.bucket_size)) as u32;
        *count += 1;
        let mut rows = Vec::new();
        if !dir.days.contains(&window.day) {
            rows.push(DirRow::Day(window));
        }
        if !dir.windows.contains(&window) {
            rows.push(DirRow::Window(window));
        }
        if !dir.instances.contains(&(window, service.to_string(), lane)) {
            rows.push(DirRow::Instance(window, service.to_string(), lane));
        }
        if !dir
            .buckets
            .contains(&(window, service.to_string(), lane, bucket))
        {
            rows.push(DirRow::Bucket(window, service.to_string(), lane, bucket));
        }
        let location = Location {
            window,
            instance: self.instance_name(lane),
            bucket,
        };
        (location, rows)
    }

    /// Writes directory rows (independent of each other, so all at once) and remembers them
    /// once every one is durable; a pointer below them may be written only after this.
    async fn write_directory(&self, rows: Vec<DirRow>) -> Result<(), Error> {
        if rows.is_empty() {
            return Ok(());
        }
        // Owned futures, built in a loop: closures over borrowed rows trip the compiler's
        // Send checks of the handlers that await this.
        let mut writes: Vec<futures::future::BoxFuture<'static, Result<(), StoreError>>> =
            Vec::with_capacity(rows.len());
        for row in rows.iter().cloned() {
            let store = self.store.clone();
            writes.push(match row {
                DirRow::Day(w) => Box::pin(async move { store.put_day(w.year(), w.day).await }),
                DirRow::Window(w) => Box::pin(async move { store.put_window(w).await }),
                DirRow::Instance(w, service, lane) => {
                    let instance = self.instance_name(lane);
                    let row = InstanceRow {
                        instance_token: token::instance_token(&service, &instance),
                        service,
                        instance,
                    };
                    Box::pin(async move { store.put_instance(w, &row).await })
                }
                DirRow::Bucket(w, service, lane, bucket) => {
                    let instance = self.instance_name(lane);
                    Box::pin(async move { store.put_bucket(w, &service, &instance, bucket).await })
                }
            });
        }
        let _: Vec<()> = stream::iter(writes)
            .buffer_unordered(DIRECTORY_WRITES_PARALLEL)
            .try_collect()
            .await?;
        let mut dir = self.directory.lock().expect("directory lock");
        for row in rows {
            match row {
                DirRow::Day(w) => {
                    dir.days.insert(w.day);
                }
                DirRow::Window(w) => {
                    dir.windows.insert(w);
                }
                DirRow::Instance(w, service, lane) => {
                    dir.instances.insert((w, service, lane));
                }
                DirRow::Bucket(w, service, lane, bucket) => {
                    dir.buckets.insert((w, service, lane, bucket));
                }
            }
        }
        Ok(())
    }

    /// The window a schedule due at `due_ms`, made at `now_ms`, is first written to: the
    /// current one for a near-term retry while it has headroom, else by the W+1 rule
    /// (`WindowGrid::near_target`).
    pub fn first_window(&self, now_ms: i64, due_ms: i64) -> WindowId {
        self.grid.near_target(now_ms, due_ms, SETTLE_MS)
    }

    /// Schedules the next attempt of `state` at `due_ms` under a new generation: a new pointer
    /// in a future window, then the state row. The old pointer becomes stale.
    pub async fn reschedule(&self, state: TxState, due_ms: i64) -> Result<TxState, Error> {
        self.schedule_next(state, due_ms, false).await
    }

    /// Schedules a finished retry afresh (a redrive): like `reschedule`, but the new schedule
    /// derives from itself, so no earlier cancel covers it.
    pub async fn restart(&self, state: TxState, due_ms: i64) -> Result<TxState, Error> {
        self.schedule_next(state, due_ms, true).await
    }

    async fn schedule_next(
        &self,
        mut state: TxState,
        due_ms: i64,
        fresh: bool,
    ) -> Result<TxState, Error> {
        let now = self.clock.now_ms();
        let target = self.first_window(now, due_ms);
        // A saga step's next schedule lands only over the row it follows (`end`).
        let guard = (!fresh && state.conditional_writes()).then_some(state.generation);
        state.status = Status::Scheduled;
        let above = state.generation_floor();
        // The new schedule keeps its lineage's base: the generation the retry was last started
        // from. A RETRY ack's schedule, or an operator's, may race a SUCCEEDED ack of another
        // delivery of that lineage (one started before a re-enqueue made it due again), and
        // that ack's cell must cover it; with the answered generation as base, the retry ran
        // again after the ack had answered OK. A row written before schema 0007 has no base,
        // and derives from its generation. A fresh start derives from itself.
        if state.base_generation == 0 {
            state.base_generation = state.generation;
        }
        state.generation = new_generation(above, now);
        if fresh {
            state.base_generation = state.generation;
        }
        // Due when asked for (the timer delivers it then); its window only bounds how late the
        // scan finds it when memory does not hold it.
        state.due_at_ms = due_ms.max(now);
        state.updated_at_ms = now;
        self.write_schedule(&mut state, target, now, guard).await?;
        Ok(state)
    }

    /// The write order of every schedule: directory rows (cached), the Tier-5 pointer with
    /// `state.generation`, then the state row pointing at it.
    ///
    /// Late writes: a write counts only if its pointer is durable before its window ends, by
    /// this writer's clock; readers wait for the end plus the skew margin (docs/architecture.md,
    /// invariant 1). W+1 leaves a whole window for that, a near-term write into the current
    /// window at least `WindowGrid::near_headroom_ms`; a normal write takes milliseconds. A
    /// writer that stalled longer (a stopped process, a paused database) could land rows in a
    /// window that was read, or compacted, meanwhile. So the clock is read again before the
    /// directory rows, before the pointer and once the pointer is durable: when the window has
    /// ended, the retry is placed anew, under a new generation, by the W+1 rule, and a pointer
    /// that landed late is deleted (its bucket may be gone). If the state row then lands later
    /// than a reader waits for it, the outcome is unknown and the caller is told so
    /// (DEADLINE_EXCEEDED: repeating the enqueue settles it).
    ///
    /// With `guard`, the state row is written only over the SCHEDULED row of that generation
    /// (`StateStore::put_state_if`); FAILED_PRECONDITION when it changed (the pointer written
    /// is then stale).
    async fn write_schedule(
        &self,
        state: &mut TxState,
        target: WindowId,
        now: i64,
        guard: Option<i64>,
    ) -> Result<(), Error> {
        let (mut target, mut now) = (target, now);
        for placement in 0..PLACEMENTS {
            if placement > 0 {
                now = self.clock.now_ms();
                target = self.grid.target(now, state.due_at_ms);
                state.generation = new_generation(state.generation, now);
                state.updated_at_ms = now;
            }
            target = self.above_low_water(target).await?;
            let end = self.grid.end_ms(target);
            if self.clock.now_ms() >= end {
                continue;
            }
            let location = self
                .place(&state.service, &state.transaction_id, target, now)
                .await?;
            if self.clock.now_ms() >= end {
                continue;
            }
            let pointer = Pointer {
                transaction_id: state.transaction_id.clone(),
                generation: state.generation,
                attempt: state.attempt,
                enqueued_at_ms: now,
                due_at_ms: Some(state.due_at_ms),
            };
            self.write_pointer(&state.service, &location, pointer)
                .await?;
            let after = self.clock.now_ms();
            if after < end {
                state.location = Some(location);
                match guard {
                    None => self.store.put_state(state, None).await?,
                    Some(g) => {
                        if !self.store.put_state_if(state, None, g).await? {
                            return Err(changed_meanwhile(&state.service, &state.transaction_id));
                        }
                    }
                }
                // The row is durable, whatever the check below says of its timing.
                self.arm(state);
                return self.check_state_landed(now);
            }
            tracing::warn!(
                transaction_id = %state.transaction_id,
                late_ms = after - end,
                placement,
                "a pointer landed after its window ended; placing the retry again"
            );
            self.store
                .delete_late_pointer(&state.service, &location, &state.transaction_id)
                .await?;
        }
        Err(Error::Unavailable(format!(
            "the node could not write the retry within its window {PLACEMENTS} times in a row (storage too slow); nothing was scheduled"
        )))
    }

    /// After a state row written for a pointer placed at `placed_at`: a state row that took
    /// longer than readers wait for it may have found its pointer skipped already.
    fn check_state_landed(&self, placed_at: i64) -> Result<(), Error> {
        let took = self.clock.now_ms() - placed_at;
        if took >= self.opts.orphan_grace_ms {
            return Err(Error::DeadlineExceeded(format!(
                "the retry's state row took {took} ms to write, longer than readers wait for it; its outcome is unknown, and repeating the call (idempotent) settles it"
            )));
        }
        Ok(())
    }

    /// Hands a schedule whose state row is durable to the timer, which delivers it at its due
    /// time when it falls due within the horizon and its lane is in a range this node holds
    /// (otherwise the scan of its window does); never sooner than `SETTLE_MS` after now.
    fn arm(&self, state: &TxState) {
        let Some(location) = state.location.clone() else {
            return;
        };
        let token = token::instance_token(&state.service, &location.instance);
        let now = self.clock.now_ms();
        let _ = self.timer.arm(
            Entry {
                service: state.service.clone(),
                transaction_id: state.transaction_id.clone(),
                generation: state.generation,
                due_ms: state.due_at_ms.max(now + SETTLE_MS),
                location,
                token,
                payload_bytes: state.payload.len(),
            },
            now,
        );
    }

    /// Writes a terminal state (SUCCEEDED, DEAD, CANCELLED) with the terminal TTL; a DEAD row
    /// keeps its payload as long as its dead letter is kept, so it can be redriven.
    pub async fn finish(&self, mut state: TxState, status: Status) -> Result<(), Error> {
        debug_assert!(status.is_terminal());
        state.status = status;
        state.updated_at_ms = self.clock.now_ms();
        let ttl = self.terminal_ttl(status);
        if status == Status::Cancelled {
            // Every cancel carries the cancel cell (see `cancel`).
            self.store
                .cancel_state(&state, ttl, self.cancel_ttl())
                .await?;
            return Ok(());
        }
        self.store.put_state(&state, Some(ttl)).await?;
        Ok(())
    }

    /// Ends the retry `state` (SUCCEEDED or DEAD) only if its row is still SCHEDULED at its
    /// generation (`StateStore::put_state_if`): the terminal write of a saga step, so that of
    /// two deliveries of one attempt answered SUCCEEDED and FAILED at once exactly one ends it.
    /// False when the row had changed, unless it already reads as this write would make it
    /// (this call's own write, repeated after an unknown outcome).
    pub async fn end(&self, mut state: TxState, status: Status) -> Result<bool, Error> {
        debug_assert!(matches!(status, Status::Succeeded | Status::Dead));
        state.status = status;
        state.updated_at_ms = self.clock.now_ms();
        let ttl = self.terminal_ttl(status);
        if self
            .store
            .put_state_if(&state, Some(ttl), state.generation)
            .await?
        {
            return Ok(true);
        }
        let now = self
            .store
            .get_state(&state.service, &state.transaction_id)
            .await?;
        Ok(now.is_some_and(|n| n.status == status && n.generation == state.generation))
    }

    /// Writes SUCCEEDED for the generation of `state` as it was read when it was delivered,
    /// with the terminal TTL, without reading the row again (`StateStore::settle_state`):
    /// the write goes just above the row's write time as read, so a cancel or a new schedule
    /// written since wins over it wherever it lands (docs/architecture.md "Guarantees across
    /// nodes"). `state` is made the row written (SUCCEEDED, updated now) in place, written or
    /// not: the caller keeps it in flight only as it was before.
    pub async fn settle_succeeded(&self, state: &mut TxState) -> Result<(), Error> {
        state.status = Status::Succeeded;
        state.updated_at_ms = self.clock.now_ms();
        self.store
            .settle_state(state, self.opts.terminal_ttl_seconds)
            .await?;
        Ok(())
    }

    /// How long a SUCCEEDED or CANCELLED row is kept (and its finished-log entry).
    pub(crate) fn finished_ttl_seconds(&self) -> u32 {
        self.opts.terminal_ttl_seconds
    }

    /// The TTL of a terminal row: a DEAD row keeps its payload as long as its dead letter is
    /// kept, so it can be redriven.
    fn terminal_ttl(&self, status: Status) -> u32 {
        if status == Status::Dead {
            self.opts.dead_ttl_seconds
        } else {
            self.opts.terminal_ttl_seconds
        }
    }

    /// How long a cancel cell lives: as long as a schedule it covers could still fall due
    /// (the longest delay), plus the terminal TTL and a day.
    fn cancel_ttl(&self) -> u32 {
        (self.opts.max_delay.as_secs())
            .saturating_add(u64::from(self.opts.terminal_ttl_seconds))
            .saturating_add(86_400)
            .min(i32::MAX as u64) as u32
    }

    pub fn max_delay(&self) -> Duration {
        self.opts.max_delay
    }

    pub async fn get(&self, service: &str, transaction_id: &str) -> Result<TxState, Error> {
        self.store
            .get_state(service, transaction_id)
            .await?
            .ok_or_else(|| not_found(service, transaction_id))
    }

    /// The state rows of `ids` in `service`, in order (None: no row).
    pub async fn get_many(
        &self,
        service: &str,
        ids: &[String],
    ) -> Result<Vec<Option<TxState>>, Error> {
        Ok(self.store.get_states(service, ids).await?)
    }
}

/// A conditional write (`TxState::conditional_writes`) that found its row changed: another
/// answer ended, rescheduled or cancelled the retry meanwhile.
pub fn changed_meanwhile(service: &str, transaction_id: &str) -> Error {
    Error::FailedPrecondition(format!(
        "transaction {transaction_id:?} of service {service:?} was ended, rescheduled or cancelled by another answer meanwhile; this answer changed nothing"
    ))
}

fn not_found(service: &str, transaction_id: &str) -> Error {
    Error::NotFound(format!(
        "no retry {transaction_id:?} for service {service:?}"
    ))
}

/// The random bits below a generation's milliseconds (`new_generation`, `generation_ms`).
const GENERATION_RANDOM_BITS: u32 = 20;

/// A generation that is larger than `previous` and unique across nodes with overwhelming
/// probability: milliseconds in the high bits, 20 random bits below (good until year 2248).
pub fn new_generation(previous: i64, now_ms: i64) -> i64 {
    let random: i64 = rand::rng().random_range(0..(1 << GENERATION_RANDOM_BITS));
    let fresh = (now_ms.max(0) << GENERATION_RANDOM_BITS) | random;
    fresh.max(previous.saturating_add(1))
}

/// The time a generation was made: its high bits (see `new_generation`).
pub fn generation_ms(generation: i64) -> i64 {
    generation >> GENERATION_RANDOM_BITS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_grow_and_differ() {
        let g1 = new_generation(0, 1_700_000_000_000);
        assert!(g1 > 0);
        assert!(new_generation(g1, 1_600_000_000_000) > g1);
        let many: HashSet<i64> = (0..1000)
            .map(|_| new_generation(0, 1_700_000_000_000))
            .collect();
        assert!(many.len() > 990);
    }

    #[test]
    fn generation_time_is_the_high_bits() {
        let g = new_generation(0, 1_700_000_000_000);
        assert_eq!(generation_ms(g), 1_700_000_000_000);
    }

    #[test]
    fn sweep_drops_closed_windows_only() {
        let mut d = Directory::default();
        let w = |i| WindowId { day: 10, index: i };
        d.days.insert(9);
        d.days.insert(10);
        d.windows.insert(w(1));
        d.windows.insert(w(3));
        d.counters.insert((w(2), "s".into(), 0), 5);
        d.counters.insert((w(3), "s".into(), 0), 5);
        d.sweep(w(3));
        assert_eq!(d.days, HashSet::from([10]));
        // The current window still takes near-term writes: kept.
        assert_eq!(d.windows, HashSet::from([w(3)]));
        assert_eq!(d.counters.len(), 1);
    }
}
