//! The storage contract of Rebound: one trait per table group (`DirectoryStore`,
//! `StateStore`, `LeaseStore`, `ServiceStore`, `DeadLetterStore`, `MigrationStore`;
//! `RetryStore` is their union), the rows they carry, and the types rows are made of (retry
//! policies, windows, trace contexts, tokens). No store is implemented here: the Cassandra
//! store and the embedded one (redb, one node) implement these traits (`rebound-store-cassandra`
//! and `rebound-store-embedded`), and both pass one conformance suite (`testsuite`, with the
//! `testsuite` feature, run by each store's own tests). See docs/architecture.md.
//!
//! Every write here is an idempotent upsert or a whole-partition delete (the one row delete is
//! `delete_late_pointer`, on the rare late-write path), so a write whose
//! outcome is unknown (a timeout) can be replayed without harm: the write path's invariant is
//! "directory rows, then the Tier-5 pointer, then the state row", and replaying any prefix of
//! that sequence leaves either a pointer without a matching state row (skipped by the
//! dispatcher) or the full sequence.
//!
//! The state row's settle cells (`cancelled_generation`, `succeeded_generation`, schema 0008)
//! are written only by a cancel and a SUCCEEDED ack; reads apply them (`TxState::apply_settled`)
//! so that an ack or enqueue on another node cannot undo either, and a cancel wins over an
//! ack that raced it.

pub mod body;
pub mod clock;
pub mod coalesced;
pub mod context;
mod finished;
pub mod history;
mod layer;

pub use finished::{
    decode_finished_chunk, encode_finished_chunk, finished_second, is_logged_finished, FinishedAt,
    FinishedEntry, FinishedPage,
};
pub mod metric_definitions;
pub mod observed;
pub mod policy;
#[cfg(feature = "testsuite")]
pub mod testsuite;
pub mod token;
pub mod window;

use std::{collections::BTreeMap, sync::Arc};

use async_trait::async_trait;
use futures::future::BoxFuture;
use rebound_common::{coalesce::Counts, tasks::Tasks};

use crate::{context::TextContext, policy::RetryPolicy, window::WindowId};

/// Most bucket partitions one `put_pointer_groups` request spans: Cassandra warns about an
/// unlogged batch over more than 10 (`unlogged_batch_across_partitions_warn_threshold`).
pub const MAX_GROUPED_PARTITIONS: usize = 10;
/// Most pointers one `put_pointer_groups` request carries: a pointer row counts about 100
/// bytes towards `batch_size_warn_threshold` (5 KiB) for a batch across partitions.
pub const MAX_GROUPED_POINTERS: usize = 32;

/// The lifecycle of one retry (docs/architecture.md, "Data model": the state row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    Scheduled,
    Succeeded,
    Dead,
    Cancelled,
}

impl Status {
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Scheduled => "SCHEDULED",
            Status::Succeeded => "SUCCEEDED",
            Status::Dead => "DEAD",
            Status::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "SCHEDULED" => Status::Scheduled,
            "SUCCEEDED" => Status::Succeeded,
            "DEAD" => Status::Dead,
            "CANCELLED" => Status::Cancelled,
            _ => return None,
        })
    }

    pub fn is_terminal(&self) -> bool {
        !matches!(self, Status::Scheduled)
    }
}

/// Where a pointer lives: Tier 3 to Tier 5 coordinates below the window.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Location {
    pub window: WindowId,
    pub instance: String,
    pub bucket: u32,
}

/// A Tier-5 row: a small pointer to a state row, valid only while its generation is current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    pub transaction_id: String,
    pub generation: i64,
    pub attempt: u32,
    pub enqueued_at_ms: i64,
    /// When the schedule it points at is due (None: written before schema 0014), so that a
    /// listing orders a window's retries by due time from the pointers alone.
    pub due_at_ms: Option<i64>,
}

/// The state row of one retry.
#[derive(Debug, Clone, PartialEq)]
pub struct TxState {
    pub service: String,
    pub transaction_id: String,
    pub status: Status,
    pub generation: i64,
    /// Attempts made: the caller's own before the first enqueue, then one for each delivery
    /// answered otherwise than by a snooze (SUCCEEDED included). The next delivery carries
    /// `attempt + 1`.
    pub attempt: u32,
    pub payload: Vec<u8>,
    pub attributes: BTreeMap<String, String>,
    pub policy: RetryPolicy,
    pub first_enqueued_at_ms: i64,
    pub last_enqueued_at_ms: i64,
    pub updated_at_ms: i64,
    /// When the retry becomes eligible: the end of its window.
    pub due_at_ms: i64,
    pub last_error: String,
    pub location: Option<Location>,
    pub enqueue_count: u32,
    pub delivery_count: u32,
    /// The row was written before schema 0007, one column per field: it is written back in
    /// that layout until it finishes. New rows keep everything but status, generation and
    /// payload in one `body` cell.
    pub legacy_columns: bool,
    /// The generation this schedule was derived from: the one its writer read (an ack's
    /// reschedule, an enqueue's), or its own for a fresh start. 0 in the layout before 0007.
    pub base_generation: i64,
    /// Written by `CancelRetry` only (schema 0008): a SCHEDULED row whose base is at or below
    /// it reads as CANCELLED, whatever a concurrent writer on another node wrote after it.
    pub cancelled_generation: Option<i64>,
    /// Written by a SUCCEEDED ack only (schema 0008), with the row: a SCHEDULED row whose
    /// base is at or below it reads as SUCCEEDED.
    pub succeeded_generation: Option<i64>,
    /// The trace context of the enqueue that started this retry (schema 0007's body; none
    /// in the layout before it), carried on every delivery.
    pub trace: TextContext,
    /// The downstream dependency the retry waits on (`EnqueueRetryRequest.dependency`; empty:
    /// none), kept in the body (none in the layout before 0007). While it is held the retry
    /// is not delivered (docs/architecture.md, "Dependency holds").
    pub dependency: String,
    /// Its part in a saga: the compensations to enqueue after it, and for a compensation its
    /// chain (schema 0007's body; none in the layout before it). docs/architecture.md,
    /// "Compensation chains".
    pub saga: Saga,
    /// Its attempts, bounded (kept in the body; none in the layout before schema 0007).
    /// docs/architecture.md, "Attempt history".
    pub history: history::History,
    /// When the row as read was written, on the store's write clock (Cassandra's
    /// `WRITETIME`, microseconds); unknown for a row not read from the store. A settle
    /// (`StateStore::settle_state`) goes just above it, so it loses to whatever was written
    /// to the row after this read.
    pub written: WriteTime,
}

/// A retry's part in a saga (`TxState::saga`): empty for a retry that has none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Saga {
    /// The compensations to enqueue after this retry, in order, each a `rebound.v1.Compensation`
    /// as validated at the enqueue that gave it: for a saga step, all of them (the first is
    /// enqueued when it ends DEAD); for a compensation, the ones after it (the next is enqueued
    /// when it is acknowledged SUCCEEDED).
    pub compensations: Vec<Vec<u8>>,
    /// For a compensation: the chain it belongs to. None for a saga step.
    pub chain: Option<Chain>,
}

impl Saga {
    pub fn is_empty(&self) -> bool {
        self.compensations.is_empty() && self.chain.is_none()
    }
}

/// The compensation chain a compensation belongs to (`Saga::chain`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chain {
    /// The saga step whose retry ended DEAD and started the chain.
    pub saga_service: String,
    pub saga_transaction_id: String,
    /// This compensation's place, from 1.
    pub position: u32,
    /// Every compensation of the chain, in order: (service, transaction_id).
    pub members: Vec<(String, String)>,
}

/// The write time of a state row as read (`TxState::written`). It is not part of the retry's
/// value: two reads of one row, or a row written and read back, compare equal whatever it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteTime(pub Option<i64>);

impl PartialEq for WriteTime {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl TxState {
    /// The status a state row has once the settle cells are applied. A row derived from a
    /// cancelled generation (its base at or below the cancel cell) is CANCELLED whatever a
    /// concurrent writer on another node put in its status afterwards: a schedule, a
    /// SUCCEEDED ack or a dead letter. So a cancel that wrote its cell is never undone, and
    /// the ack that raced it (answered OK, its write landing on either side of the cancel)
    /// loses. Otherwise a schedule, or a dead letter, derived from a generation acknowledged
    /// SUCCEEDED is SUCCEEDED: a schedule written by a writer that read the row before the
    /// ack, or a dead letter of a second delivery of the same attempt (one executor reported
    /// the step done, and it was: its compensations must not run).
    pub fn apply_settled(mut self) -> Self {
        let covers = |cell: Option<i64>| cell.is_some_and(|g| g >= self.base_generation);
        if covers(self.cancelled_generation) && self.status != Status::Cancelled {
            self.status = Status::Cancelled;
        } else if matches!(self.status, Status::Scheduled | Status::Dead)
            && covers(self.succeeded_generation)
        {
            self.status = Status::Succeeded;
        }
        self
    }

    /// Whether the writes that answer a delivery of this retry (its end, a RETRY's next
    /// schedule) and its cancel are conditional (`StateStore::put_state_if`,
    /// `cancel_state_if`): a saga step with compensations, whose SUCCEEDED and DEAD must not
    /// both land (docs/architecture.md, "Compensation chains"), in the layout of 0007 on.
    pub fn conditional_writes(&self) -> bool {
        self.saga.chain.is_none() && !self.saga.compensations.is_empty() && !self.legacy_columns
    }

    /// The generation a new schedule must go above: every generation this row has seen.
    pub fn generation_floor(&self) -> i64 {
        self.generation
            .max(self.cancelled_generation.unwrap_or(0))
            .max(self.succeeded_generation.unwrap_or(0))
    }

    /// A row of which only the cancel cell is left (the rest expired first): cancelled at
    /// `generation`, nothing else known.
    pub fn cancelled_ghost(service: &str, transaction_id: &str, generation: i64) -> TxState {
        TxState {
            service: service.to_string(),
            transaction_id: transaction_id.to_string(),
            status: Status::Cancelled,
            generation,
            attempt: 0,
            payload: Vec::new(),
            attributes: BTreeMap::new(),
            policy: RetryPolicy::default(),
            first_enqueued_at_ms: 0,
            last_enqueued_at_ms: 0,
            updated_at_ms: 0,
            due_at_ms: 0,
            last_error: String::new(),
            location: None,
            enqueue_count: 0,
            delivery_count: 0,
            legacy_columns: false,
            base_generation: generation,
            cancelled_generation: Some(generation),
            succeeded_generation: None,
            trace: TextContext::default(),
            dependency: String::new(),
            saga: Default::default(),
            history: Default::default(),
            written: WriteTime::default(),
        }
    }

    /// The execution marker: a pointer of `generation` is live only while the state row has
    /// that generation and is SCHEDULED.
    pub fn is_live(&self, generation: i64) -> bool {
        self.generation == generation && self.status == Status::Scheduled
    }
}

/// What a pointer's state row says about it.
#[derive(Debug)]
pub enum PointerState {
    /// Current and SCHEDULED: to be delivered (or cancelled).
    Live(Box<TxState>),
    /// No state row of its generation yet, and it may still land (the writer writes the
    /// pointer first, the state row second): the bucket must be kept.
    Landing,
    /// No state row of its generation, older than the grace: an enqueue that failed.
    Orphan,
    /// Superseded or already resolved.
    Stale,
}

impl PointerState {
    /// Classifies `pointer` by its state row; `orphan_grace_ms` is how long a state row may
    /// take to land after its pointer.
    pub fn of(
        pointer: &Pointer,
        state: Option<TxState>,
        now_ms: i64,
        orphan_grace_ms: i64,
    ) -> Self {
        match state {
            Some(s) if s.generation >= pointer.generation => {
                if s.is_live(pointer.generation) {
                    PointerState::Live(Box::new(s))
                } else {
                    PointerState::Stale
                }
            }
            _ if now_ms - pointer.enqueued_at_ms < orphan_grace_ms => PointerState::Landing,
            _ => PointerState::Orphan,
        }
    }
}

/// A Tier-3 row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceRow {
    pub instance_token: i64,
    pub service: String,
    pub instance: String,
}

/// Why a storage call failed, in the three kinds callers treat differently.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or refused for lack of replicas: nothing was written.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The outcome is unknown: no answer in time, a replica's write or read failure, or a
    /// connection that broke after the request was sent. The write may or may not have been
    /// applied; callers treat it as a timeout (DEADLINE_EXCEEDED, a SERIAL re-read of a lease).
    #[error("storage outcome unknown: {0}")]
    Timeout(String),
    #[error("storage error: {0}")]
    Internal(String),
}

impl StoreError {
    /// The kind, as metrics and spans name it: `unavailable`, `unknown_outcome`, `internal`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Timeout(_) => "unknown_outcome",
            StoreError::Internal(_) => "internal",
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A coalesced store request that broke in the coalescer is an internal store error.
impl From<rebound_common::coalesce::Broken> for StoreError {
    fn from(b: rebound_common::coalesce::Broken) -> Self {
        StoreError::Internal(b.to_string())
    }
}

/// Inclusive range of Murmur3 tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenRange {
    pub start: i64,
    pub end: i64,
}

impl TokenRange {
    pub const FULL: TokenRange = TokenRange {
        start: i64::MIN,
        end: i64::MAX,
    };

    pub fn contains(&self, token: i64) -> bool {
        self.start <= token && token <= self.end
    }
}

/// The five-tier directory (days, windows, Tier-3 instances, buckets, Tier-5 pointers) and
/// the compactor's low water, for one `ns`.
#[async_trait]
pub trait DirectoryStore: Send + Sync + std::fmt::Debug {
    async fn put_day(&self, year: i32, day: i32) -> StoreResult<()>;
    async fn put_window(&self, window: WindowId) -> StoreResult<()>;
    async fn put_instance(&self, window: WindowId, row: &InstanceRow) -> StoreResult<()>;
    async fn put_bucket(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()>;
    async fn put_pointer(
        &self,
        service: &str,
        location: &Location,
        pointer: &Pointer,
    ) -> StoreResult<()>;
    /// Several pointers of one bucket in one single-partition unlogged batch (one mutation
    /// of one partition for Cassandra).
    async fn put_pointers(
        &self,
        service: &str,
        location: &Location,
        pointers: &[Pointer],
    ) -> StoreResult<()>;
    /// The pointers of several buckets (each group: service, bucket, its pointers) as one
    /// request where the store can: for Cassandra one unlogged batch across their partitions
    /// (callers keep it to at most `MAX_GROUPED_PARTITIONS` partitions and
    /// `MAX_GROUPED_POINTERS` pointers, under Cassandra's batch warnings). Success means every
    /// pointer is durable; an error, that any of them may be.
    async fn put_pointer_groups(
        &self,
        groups: &[(String, Location, Vec<Pointer>)],
    ) -> StoreResult<()> {
        for (service, location, pointers) in groups {
            self.put_pointers(service, location, pointers).await?;
        }
        Ok(())
    }
    /// Every year of this `ns` that holds a day row, ascending: a backlog of any age is found.
    async fn list_years(&self) -> StoreResult<Vec<i32>>;
    async fn list_days(&self, year: i32) -> StoreResult<Vec<i32>>;
    async fn list_instances(
        &self,
        window: WindowId,
        range: TokenRange,
    ) -> StoreResult<Vec<InstanceRow>>;
    async fn list_buckets(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
    ) -> StoreResult<Vec<u32>>;
    /// The pointers of one bucket as a stream read page by page, so that a 50,000-pointer
    /// bucket never sits in memory whole.
    async fn stream_pointers(
        &self,
        service: &str,
        location: &Location,
    ) -> StoreResult<futures::stream::BoxStream<'static, StoreResult<Pointer>>>;
    async fn delete_pointer_partition(&self, service: &str, location: &Location)
        -> StoreResult<()>;
    /// The one row delete of Tier 5: a pointer its writer found had landed after its window
    /// ended (see `Writer::write_schedule`), whose bucket may be gone already. Rare by
    /// construction (it needs a writer stalled for a whole window), so its row tombstones are
    /// few.
    async fn delete_late_pointer(
        &self,
        service: &str,
        location: &Location,
        transaction_id: &str,
    ) -> StoreResult<()>;
    async fn delete_bucket(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()>;
    async fn delete_instance(&self, window: WindowId, row: &InstanceRow) -> StoreResult<()>;
    /// Gate 1 of the compactor: does the window have any live Tier-3 row, cluster-wide?
    async fn window_has_instances(&self, window: WindowId) -> StoreResult<bool>;
    async fn delete_window_instances(&self, window: WindowId) -> StoreResult<()>;
    async fn delete_window(&self, window: WindowId) -> StoreResult<()>;
    async fn delete_day(&self, year: i32, day: i32) -> StoreResult<()>;
    async fn count_pointers(&self, service: &str, location: &Location) -> StoreResult<u64>;
    async fn day_listed(&self, year: i32, day: i32) -> StoreResult<bool>;
    async fn window_listed(&self, window: WindowId) -> StoreResult<bool>;
    /// First window of `day` not yet compacted (0 when unknown).
    async fn low_water(&self, day: i32) -> StoreResult<u32>;
    async fn set_low_water(&self, day: i32, window: u32) -> StoreResult<()>;
    async fn delete_low_water(&self, day: i32) -> StoreResult<()>;
    /// Windows of `day` from `from` on, ascending.
    async fn list_windows_from(&self, day: i32, from: u32) -> StoreResult<Vec<u32>>;
}

/// The state rows: one per (service, transaction).
#[async_trait]
pub trait StateStore: Send + Sync + std::fmt::Debug {
    /// Writes the whole state row; `ttl_seconds` is set for terminal states.
    async fn put_state(&self, state: &TxState, ttl_seconds: Option<u32>) -> StoreResult<()>;
    /// Writes the CANCELLED `state` (with `ttl_seconds`) and, in the same single-partition
    /// batch, the cancel cell `cancelled_generation = state.generation` that lives
    /// `cancel_ttl_seconds`.
    async fn cancel_state(
        &self,
        state: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<()>;
    async fn get_state(&self, service: &str, transaction_id: &str) -> StoreResult<Option<TxState>>;
    /// The state rows of many transactions of one service, read in few requests; one answer
    /// per id, in order.
    async fn get_states(&self, service: &str, ids: &[String]) -> StoreResult<Vec<Option<TxState>>>;
    /// Writes many state rows in few requests; one result per row, in order (a request that
    /// fails fails the rows it carried). No transaction may appear twice.
    async fn put_states(&self, rows: Vec<(TxState, Option<u32>)>) -> Vec<StoreResult<()>>;
    /// Writes the terminal `state` (with `ttl_seconds`, and the succeeded cell when it is
    /// SUCCEEDED) just above the write time its row had when it was read (`state.written`),
    /// without reading it again: whatever was written to the row after that read (a cancel,
    /// a new schedule) wins over it, in any order of arrival. Internal error when
    /// `state.written` is unknown.
    async fn settle_state(&self, state: &TxState, ttl_seconds: u32) -> StoreResult<()>;
    /// `settle_state` of many rows in few requests; one result per row, in order (a row
    /// whose write time is unknown fails alone; a request that fails fails the rows it
    /// carried). No transaction may appear twice.
    async fn settle_states(&self, rows: Vec<(TxState, u32)>) -> Vec<StoreResult<()>>;
    /// `put_state`, only if the row is SCHEDULED at `if_generation` as it stands (a
    /// lightweight transaction in Cassandra); true when written. The writes of a saga step
    /// that answer a delivery (its end, SUCCEEDED or DEAD, and a RETRY's next schedule) go
    /// this way, so that of two deliveries of one attempt answered at once one ends or
    /// reschedules it and the other finds it changed. A timeout is an unknown outcome.
    async fn put_state_if(
        &self,
        state: &TxState,
        ttl_seconds: Option<u32>,
        if_generation: i64,
    ) -> StoreResult<bool>;
    /// `cancel_state`, only if the row is SCHEDULED at `state.generation` as it stands (a
    /// lightweight transaction in Cassandra); true when written. The cancel of a saga step.
    async fn cancel_state_if(
        &self,
        state: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<bool>;
    /// The finished log of `service`'s `status` (SUCCEEDED or CANCELLED). Every write of a
    /// state row with one of those statuses (a settle, a plain or conditional write, a
    /// cancel) logs it under (service, status, `finished_second`) with its generation, as long
    /// as the row lives (its TTL); the rows of one write and second share a chunk. A write
    /// that fails may have logged its rows. Reads the entries at or after `from` and before
    /// second `until_second`, in log order: at most `limit`, and few requests per call (each
    /// store bounds them), so a page may stop short with `next` set.
    async fn list_finished(
        &self,
        service: &str,
        status: Status,
        from: FinishedAt,
        until_second: i64,
        limit: usize,
    ) -> StoreResult<FinishedPage>;
}

/// The lease ring and its members, and the database's clock. Lease changes are
/// compare-and-set (LWT at SERIAL consistency for Cassandra); a timeout of one is an unknown
/// outcome, which the caller resolves with `read_lease`.
#[async_trait]
pub trait LeaseStore: Send + Sync + std::fmt::Debug {
    /// The coordinator's clock (`currentTimestamp()`), for the node's clock offset.
    async fn server_time_ms(&self) -> StoreResult<i64>;
    async fn heartbeat(&self, member: &Member, ttl_seconds: u32) -> StoreResult<()>;
    async fn list_members(&self) -> StoreResult<Vec<Member>>;
    /// Reads a lease with SERIAL consistency, so that it reflects every committed LWT.
    async fn read_lease(&self, slot: i32) -> StoreResult<Option<LeaseRow>>;
    /// Reads the leases of `slots` at the normal consistency: a cheap, possibly slightly stale
    /// overview (no Paxos round); decisions are still taken by LWT.
    async fn peek_leases(&self, slots: &[i32]) -> StoreResult<Vec<LeaseRow>>;
    /// Creates the lease of a slot that has never been held.
    async fn create_lease(&self, lease: &LeaseRow) -> StoreResult<Cas>;
    /// Replaces the lease if its epoch is still `expected_epoch` (take, renew or release).
    async fn replace_lease(
        &self,
        lease: &LeaseRow,
        expected_epoch: i64,
        change: LeaseChange,
    ) -> StoreResult<Cas>;
}

/// Service settings: one small partition per namespace.
#[async_trait]
pub trait ServiceStore: Send + Sync + std::fmt::Debug {
    async fn list_services(&self) -> StoreResult<Vec<ServiceRow>>;
    /// Records that the service exists (once per service per process).
    async fn touch_service(&self, service: &str, now_ms: i64) -> StoreResult<()>;
    async fn set_service_paused(&self, service: &str, paused: bool, now_ms: i64)
        -> StoreResult<()>;
    async fn set_service_policy(
        &self,
        service: &str,
        policy: &[u8],
        now_ms: i64,
    ) -> StoreResult<()>;
    async fn set_service_limits(
        &self,
        service: &str,
        limits: &[u8],
        now_ms: i64,
    ) -> StoreResult<()>;
    /// The service's push target (protobuf bytes of `rebound.v1.PushTarget`); empty bytes
    /// clear it. Other settings are left as they are.
    async fn set_service_push(&self, service: &str, push: &[u8], now_ms: i64) -> StoreResult<()>;
}

/// Dead letters: one partition per (service, day), rows by (dead_at, transaction_id).
#[async_trait]
pub trait DeadLetterStore: Send + Sync + std::fmt::Debug {
    async fn put_dead_letter(&self, letter: &DeadLetter, ttl_seconds: u32) -> StoreResult<()>;
    /// The rows of one day with `from_ms <= dead_at < to_ms`, page by page.
    async fn stream_dead_letters(
        &self,
        service: &str,
        day: i32,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<futures::stream::BoxStream<'static, StoreResult<DeadLetterRow>>>;
    async fn mark_redriven(&self, letter: &DeadLetter, now_ms: i64) -> StoreResult<()>;
    /// The whole day partition in one partition tombstone.
    async fn delete_dead_letter_day(&self, service: &str, day: i32) -> StoreResult<()>;
    /// One range tombstone over `from_ms <= dead_at < to_ms`.
    async fn delete_dead_letter_range(
        &self,
        service: &str,
        day: i32,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<()>;
}

/// Dependency holds (docs/architecture.md, "Dependency holds"): one small partition per
/// namespace, a row per dependency ever held. A hold is replaced by writing its row again; a
/// release writes its end as now. Rows expire a week after their end, so nothing is deleted.
#[async_trait]
pub trait HoldStore: Send + Sync + std::fmt::Debug {
    /// Writes `hold`'s row whole, to expire `ttl_seconds` from now.
    async fn put_hold(&self, hold: &HoldRow, ttl_seconds: u32) -> StoreResult<()>;
    /// Every row, ended holds included.
    async fn list_holds(&self) -> StoreResult<Vec<HoldRow>>;
    /// Claims for `owner` the one probe that follows the hold of `dependency` ending at
    /// `until_ms` (a compare-and-set, across nodes): won when no node claimed it yet, when
    /// `owner` holds it already, or when its claim is older than `stale_before_ms`; never once
    /// it was answered. Else the claim that stands. The row expires `ttl_seconds` from now.
    async fn claim_probe(
        &self,
        dependency: &str,
        until_ms: i64,
        owner: &str,
        now_ms: i64,
        stale_before_ms: i64,
        ttl_seconds: u32,
    ) -> StoreResult<ProbeClaim>;
    /// Records that `owner`'s probe of that hold was answered at `answered_at_ms`; false (and
    /// nothing written) when another node holds the claim now.
    async fn answer_probe(
        &self,
        dependency: &str,
        until_ms: i64,
        owner: &str,
        answered_at_ms: i64,
        ttl_seconds: u32,
    ) -> StoreResult<bool>;
}

/// A `dependency_probes` row: the probe that follows one hold of a dependency.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProbeRow {
    /// The node that sends it (its node id).
    pub owner: String,
    pub claimed_at_ms: i64,
    /// When its ack came (SUCCEEDED or FAILED); 0 while it is out.
    pub answered_at_ms: i64,
}

/// The outcome of [`HoldStore::claim_probe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeClaim {
    /// The caller sends the probe.
    Won,
    /// Another node's claim stands.
    Lost(ProbeRow),
}

/// A `dependency_holds` row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HoldRow {
    pub dependency: String,
    /// When the hold ends: a probe delivery goes first after it.
    pub until_ms: i64,
    pub reason: String,
    /// When it was set or last renewed.
    pub held_at_ms: i64,
    /// "admin" or "executor"; "release" once released.
    pub source: String,
    /// Renewals in a row by probes that failed (the next hold's backoff).
    pub renewals: u32,
}

/// The schema: the numbered migrations of `schema/` (Cassandra), or the embedded store's
/// own layout version.
#[async_trait]
pub trait MigrationStore: Send + Sync + std::fmt::Debug {
    /// Brings the schema up to date; returns the versions this call applied (none when it
    /// was up to date: a re-run is harmless).
    async fn migrate(&self, now_ms: i64) -> StoreResult<Vec<i32>>;
    /// The versions applied so far, ascending.
    async fn applied_migrations(&self) -> StoreResult<Vec<i32>>;
    /// Records each setting (name, value) of this namespace that has none recorded yet, on
    /// behalf of `node_id`, and answers the value recorded for each, in order: its own where
    /// this call recorded it, else the one recorded first (by any node; of two nodes recording
    /// at once, one wins). A recorded value is never changed.
    async fn record_settings(
        &self,
        node_id: &str,
        settings: &[(String, String)],
    ) -> StoreResult<Vec<String>>;
}

/// A store's life beside its calls: the loop it runs, the tasks it owns and what it counts.
/// The node holds only the trait object (`RetryStore`) and drives these through it.
pub trait StoreLifecycle: Send + Sync {
    /// The store's own loop, if it has one (the embedded store deletes its expired rows); it
    /// returns once `stop` turns true. The node owns the task that runs it.
    fn background(
        self: Arc<Self>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Option<BoxFuture<'static, ()>> {
        let _ = stop;
        None
    }

    /// The owners of the store's own tasks (the coalescing layer's flushes), by name, for the
    /// node to count them and to stop them last, after every task that writes through the
    /// store.
    fn task_owners(&self) -> Vec<(&'static str, &Tasks)> {
        Vec::new()
    }

    /// The state-row requests since start: reads, then writes, each as the requests issued
    /// and the rows they carried (zero where the store does not count them).
    fn state_io_counts(&self) -> (Counts, Counts) {
        Default::default()
    }
}

/// The whole store: the union of the table groups and the lifecycle. Components take the
/// narrowest group they need (the ring a `LeaseStore`, the compactor a `DirectoryStore`);
/// the node and the admin API hold the union.
pub trait RetryStore:
    DispatchStore
    + ScheduleStore
    + LeaseStore
    + ServiceStore
    + HoldStore
    + MigrationStore
    + StoreLifecycle
{
}

impl<T> RetryStore for T where
    T: DirectoryStore
        + StateStore
        + LeaseStore
        + ServiceStore
        + HoldStore
        + DeadLetterStore
        + MigrationStore
        + StoreLifecycle
{
}

/// What the writer needs: the directory and the state rows.
pub trait ScheduleStore: DirectoryStore + StateStore {}
impl<T: DirectoryStore + StateStore + ?Sized> ScheduleStore for T {}

/// What the dispatcher needs: the directory, the state rows and the dead letters.
pub trait DispatchStore: DirectoryStore + StateStore + DeadLetterStore {}
impl<T: DirectoryStore + StateStore + DeadLetterStore + ?Sized> DispatchStore for T {}

/// A `ring_leases` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    pub slot: i32,
    pub owner: String,
    pub epoch: i64,
    pub expires_at_ms: i64,
    pub address: String,
    /// When the current epoch was taken (0 if unknown).
    pub taken_at_ms: i64,
    /// The last hand-back: when, and which epoch (0 if none).
    pub released_at_ms: i64,
    pub released_epoch: i64,
}

/// What a lease LWT does besides setting owner, epoch and expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseChange {
    /// A new epoch: records `taken_at`.
    Take,
    Renew,
    /// Hands the lease back: expiry 0, records `released_at` and `released_epoch`.
    Release,
}
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub node_id: String,
    pub address: String,
    pub boot_epoch: i64,
    /// The member's own clock when it wrote the heartbeat.
    pub heartbeat_at_ms: i64,
    /// Cassandra's clock when the heartbeat was written (its write time; 0 when unknown, or
    /// when writing). `written_at_ms - heartbeat_at_ms` is how far the member's clock lags.
    pub written_at_ms: i64,
}

/// The outcome of a lightweight transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cas {
    Applied,
    /// Not applied; the row as it is now (None when it does not exist).
    Rejected(Option<LeaseRow>),
}

/// A `services` row; settings are protobuf bytes (empty: none stored).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceRow {
    pub service: String,
    pub seen_at_ms: Option<i64>,
    pub paused: bool,
    pub paused_at_ms: Option<i64>,
    pub policy: Vec<u8>,
    pub limits: Vec<u8>,
    /// The push target (`rebound.v1.PushTarget`, schema 0009).
    pub push: Vec<u8>,
    pub updated_at_ms: Option<i64>,
}

/// A `dead_letters` row as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetterRow {
    pub letter: DeadLetter,
    pub redriven_at_ms: Option<i64>,
}

/// A `dead_letters` row.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    pub service: String,
    pub transaction_id: String,
    pub day: i32,
    pub dead_at_ms: i64,
    pub attempt: u32,
    pub last_error: String,
    pub generation: i64,
}
