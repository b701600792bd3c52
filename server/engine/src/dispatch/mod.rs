//! The retry-node half of the design (docs/architecture.md, "Dispatch" and "Invariants"):
//! walk the directory oldest first within the held token ranges, deliver due retries to
//! subscribers, resolve acknowledgements, and delete a bucket as one partition once every pointer
//! in it is resolved and durable.
//!
//! Invariants kept here:
//! - a pointer is delivered only when its generation equals the state row's and the status is
//!   SCHEDULED (the execution marker: an acknowledged item is skipped on replay);
//! - a bucket is deleted only after every one of its pointers is resolved, each resolution's
//!   state write having returned; an abandoned bucket stays whole and is replayed;
//! - every step and every delete checks the lease first (fencing) and stops when it is gone;
//! - an instance is worked only once its writer's clock has closed its window (`peers`), so
//!   no writer adds to a bucket after it was read (invariant 1 in the writer's own clock);
//! - within one service, a newer day waits while an older day has due work not yet fed,
//!   here or in a token range no live node holds.

mod ack;
pub mod claims;
mod gates;
pub mod hub;
mod memory;
mod outstanding;
mod touched;

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use futures::{
    stream::{self, FuturesUnordered},
    FutureExt, StreamExt,
};
use tokio::sync::{oneshot, watch, Notify};

pub use crate::outcome::{AttemptOutcome, Resolution};
use crate::timer::Timer;
use crate::window::WindowGrid;
use crate::{
    error::Error,
    holds::{Gate, Holds},
    ownership::{Lease, Ownership},
    services::Services,
    walk::{self, Walk},
    writer::Writer,
};
use claims::{By, ClaimGuard, Claims, Done};
use hub::{Deliveries, Delivery, Hub, Work};
use outstanding::Outstanding;
use rebound_common::tasks::Tasks;
use rebound_store::{
    clock::SharedClock, window::WindowId, DispatchStore, InstanceRow, Location, PointerState,
    TokenRange, TxState,
};
use touched::Touched;

/// Dispatch settings (`engine::Settings::options` derives them).
#[derive(Debug, Clone)]
pub struct DispatchOptions {
    pub skew_margin_ms: i64,
    /// Lease validity a step needs left before it starts (fencing margin).
    pub fence_margin_ms: i64,
    pub scan_interval: Duration,
    /// Instance workers running at once per service (older windows first).
    pub workers_per_service: usize,
    /// State rows read ahead of delivery per bucket.
    pub read_ahead: usize,
    pub dead_letter_ttl_seconds: u32,
    /// How long a pointer may wait for its state row. The writer writes the pointer first and
    /// the state row second; a state write that timed out may still land a few seconds later.
    /// A younger pointer without its state row keeps its bucket alive (replayed later); an
    /// older one belongs to an enqueue that failed and is skipped.
    pub orphan_grace_ms: i64,
}

#[derive(Debug)]
pub struct Dispatcher {
    hub: Arc<Hub>,
    store: Arc<dyn DispatchStore>,
    writer: Arc<Writer>,
    pub services: Arc<Services>,
    /// Dependency holds: a retry naming a held dependency is postponed, not delivered.
    pub holds: Arc<Holds>,
    ownership: Arc<dyn Ownership>,
    clock: SharedClock,
    grid: WindowGrid,
    opts: DispatchOptions,
    /// Instances with a worker (feeding or waiting for acks): one worker per instance.
    active: Mutex<HashSet<(WindowId, String, String)>>,
    /// Instances whose worker is still feeding deliveries; these count against
    /// `workers_per_service` and the oldest-day-first rule, workers only waiting for acks
    /// do not.
    feeding: Mutex<HashSet<(WindowId, String, String)>>,
    stopping: watch::Receiver<bool>,
    /// The years holding a day, as last read, and when (see `years`).
    years: Mutex<Option<(i64, Vec<i32>)>>,
    instance_rows_read: AtomicU64,
    scans: AtomicU64,
    /// Set when a scan held a due instance back (`Start::Waiting`: the per-service worker
    /// limit, or an older day still feeding); the worker that stops feeding next then wakes
    /// the scanner (`rescan`) instead of leaving that work to the next scan interval.
    held_back: AtomicBool,
    rescan: Notify,
    /// Instance workers and redeliveries.
    tasks: Tasks,
    /// The memory path: what this node wrote into its own lanes, by due time.
    timer: Arc<Timer>,
    /// Which path is delivering a pointer (the timer or a scan), so that only one does.
    claims: Arc<Claims>,
    /// Per service, the oldest day on which the last scan held due work back (or found it in
    /// a range no node holds): the timer leaves a newer day's retries to the scan meanwhile
    /// (oldest day first). Work it started is in `feeding` while it feeds.
    held_days: Mutex<std::collections::HashMap<String, i32>>,
    timer_fired: AtomicU64,
    timer_left: AtomicU64,
    /// Instances (window, service, instance) in which the timer resolved or delivered a
    /// retry, until a scan works them (at most `TIMER_TOUCHED_REMEMBERED`). A scan sweeps
    /// these even when no executor is subscribed, so that what the timer delivered before
    /// the last executor left does not stay in the directory (and in the counts of pending
    /// retries) until one subscribes again; other instances of a service with no
    /// subscriber are not read.
    timer_touched: Mutex<Touched>,
}

/// How often a scan rereads which years hold a day.
const YEARS_REFRESH_MS: i64 = 10_000;

/// How long after a window opens (its end plus the skew margin) the scanner looks at it.
const NEXT_WINDOW_SLACK_MS: u64 = 5;

/// Most state rows one feed read asks for (`transaction_id IN ?`).
const FEED_READ_CHUNK: usize = 64;

/// Pointers the timer resolved that the scan may skip unread (`Claims`).
const RESOLVED_REMEMBERED: usize = 32_768;

/// Instances the timer worked that a scan sweeps without a subscriber (`timer_touched`).
/// Past it, an instance waits for a subscriber as any other does.
const TIMER_TOUCHED_REMEMBERED: usize = 4_096;

impl Dispatcher {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        hub: Arc<Hub>,
        store: Arc<dyn DispatchStore>,
        writer: Arc<Writer>,
        services: Arc<Services>,
        holds: Arc<Holds>,
        ownership: Arc<dyn Ownership>,
        clock: SharedClock,
        opts: DispatchOptions,
        stopping: watch::Receiver<bool>,
        timer: Arc<Timer>,
    ) -> Self {
        Self {
            timer,
            claims: Claims::new(RESOLVED_REMEMBERED),
            held_days: Mutex::new(Default::default()),
            timer_fired: AtomicU64::new(0),
            timer_left: AtomicU64::new(0),
            timer_touched: Mutex::new(Touched::default()),
            services,
            holds,
            grid: writer.grid(),
            hub,
            store,
            writer,
            ownership,
            clock,
            opts,
            active: Mutex::new(HashSet::new()),
            feeding: Mutex::new(HashSet::new()),
            stopping,
            years: Mutex::new(None),
            instance_rows_read: AtomicU64::new(0),
            scans: AtomicU64::new(0),
            held_back: AtomicBool::new(false),
            rescan: Notify::new(),
            tasks: Tasks::new("dispatcher"),
        }
    }

    /// The owner of the instance workers and redeliveries, for shutdown.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// Holds the lock of one transaction on this node (see `Writer::lock_transaction`).
    async fn lock_transaction<'a>(
        &'a self,
        service: &str,
        transaction_id: &str,
    ) -> crate::txlock::TxLock<'a> {
        self.writer.lock_transaction(service, transaction_id).await
    }

    /// Opens a stream of deliveries of `service` holding at most `max_in_flight`
    /// unacknowledged. RESOURCE_EXHAUSTED when the node has its most streams open.
    pub fn subscribe(
        self: &Arc<Self>,
        service: &str,
        executor_id: &str,
        max_in_flight: u32,
    ) -> Result<Subscription, Error> {
        let (id, rx) = self.hub.subscribe(service, executor_id, max_in_flight)?;
        Ok(Subscription {
            id,
            rx,
            dispatcher: self.clone(),
        })
    }

    /// Registers the node's pusher of `service` (`Hub::subscribe_push`): while it is
    /// registered it takes every delivery of the service on this node.
    pub fn subscribe_push(
        self: &Arc<Self>,
        service: &str,
        max_in_flight: u32,
        timeout: Duration,
    ) -> Subscription {
        let (id, rx) = self.hub.subscribe_push(service, max_in_flight, timeout);
        Subscription {
            id,
            rx,
            dispatcher: self.clone(),
        }
    }

    /// Closes stream `id` (the client went away or the node is stopping): its unacknowledged
    /// deliveries go to other subscribers.
    pub fn close_stream(self: &Arc<Self>, id: u64) {
        let orphans = self.hub.unsubscribe(id);
        if !orphans.is_empty() {
            tracing::info!(
                subscriber = id,
                items = orphans.len(),
                "stream closed, redelivering its in-flight items"
            );
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            for w in orphans {
                self.requeue(w, Some(id));
            }
        }
    }

    /// The service of a delivery in flight on this node (for the caller's credential check).
    pub fn service_of(&self, delivery_id: &str) -> Option<String> {
        self.hub.service_of(delivery_id)
    }

    /// Wakes every worker waiting for a subscriber's slot (a resume, or shutdown).
    pub fn wake(&self) {
        self.hub.wake();
    }

    fn stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    fn fenced(&self, lease: &Lease) -> bool {
        !self.stopping()
            && self
                .ownership
                .still_holds(lease.range, self.clock.now_ms() + self.opts.fence_margin_ms)
    }

    /// Scans for due work every `scan_interval`, as a window opens, and as soon as a worker
    /// stops feeding while a scan held due work back, until the node stops.
    pub async fn run_scanner(self: Arc<Self>) {
        let mut stop = self.stopping.clone();
        loop {
            if let Err(e) = self.scan().await {
                tracing::warn!(error = %e, "dispatch scan failed, will retry");
            }
            tokio::select! {
                _ = tokio::time::sleep(self.next_scan_in()) => {}
                _ = self.rescan.notified() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }

    /// A worker stopped feeding: if the last scan held due work back, scan again now.
    fn fed(&self, key: &(WindowId, String, String)) {
        self.feeding.lock().expect("feeding lock").remove(key);
        if self.held_back.swap(false, Ordering::Relaxed) {
            self.rescan.notify_one();
        }
    }

    /// Notes that the timer resolved or delivered a retry of `location`'s instance: a scan
    /// sweeps it even with no subscriber (`timer_touched`).
    fn touched_by_timer(&self, service: &str, location: &Location) {
        self.timer_touched.lock().expect("touched lock").note(
            TIMER_TOUCHED_REMEMBERED,
            location.window,
            service,
            &location.instance,
        );
    }

    /// How long the scanner waits: the scan interval, or less when a window becomes readable
    /// sooner (its end plus the skew margin), so that a due window is read as it opens rather
    /// than up to a scan interval later.
    pub fn next_scan_in(&self) -> Duration {
        let now = self.clock.now_ms();
        let margin = self.opts.skew_margin_ms;
        // The window that opens next: the one holding `now - margin` ends after `now - margin`.
        let opens = self.grid.end_ms(self.grid.window_of(now - margin)) + margin;
        let until = Duration::from_millis((opens - now).max(0) as u64 + NEXT_WINDOW_SLACK_MS);
        until.min(self.opts.scan_interval)
    }

    /// Every year that may hold a day up to `year`: the years that hold a day row (read
    /// again every `YEARS_REFRESH_MS`), and always `year - 1` and `year`.
    async fn years(&self, now: i64, year: i32) -> Result<Vec<i32>, Error> {
        let cached = {
            let c = self.years.lock().expect("years lock");
            c.as_ref()
                .filter(|(at, _)| now.saturating_sub(*at) < YEARS_REFRESH_MS && *at <= now)
                .map(|(_, y)| y.clone())
        };
        let listed = match cached {
            Some(y) => y,
            None => {
                let y = self.store.list_years().await?;
                *self.years.lock().expect("years lock") = Some((now, y.clone()));
                y
            }
        };
        Ok(walk::years(listed, &[year - 1, year], Some(year)))
    }

    /// Tier-3 rows read by scans so far, and the scans that read them (each node reads only
    /// its share of the token space).
    pub fn instance_rows_read(&self) -> (u64, u64) {
        (
            self.instance_rows_read.load(Ordering::Relaxed),
            self.scans.load(Ordering::Relaxed),
        )
    }

    /// One pass over the directory, oldest day first: start a worker for every due instance
    /// in the held ranges whose service has a subscriber (bounded per service).
    ///
    /// Tier-3 reads are bounded in CQL to the held token ranges, plus the ranges no live node
    /// holds (a handover under way), whose due work is not started here but still holds a
    /// service's newer days back. An instance is due once its writer's clock has closed the
    /// window (`peers`): invariant 1 holds in the clock that placed it.
    pub async fn scan(self: &Arc<Self>) -> Result<(), Error> {
        let leases = self.ownership.held();
        if leases.is_empty() {
            return Ok(());
        }
        let now = self.clock.now_ms();
        let today = self.grid.window_of(now);
        let year = today.year();
        let unowned = self.ownership.unowned(now);
        let ranges = crate::ring::merge({
            let mut r: Vec<TokenRange> = leases
                .iter()
                .map(|l| l.range)
                .chain(unowned.iter().copied())
                .collect();
            r.sort_by_key(|r| r.start);
            r.into_iter()
        });
        let mut held_at: std::collections::HashMap<String, i32> = Default::default();
        // The oldest day on which a service's due work waits (held back, or in a range no
        // node holds): the timer leaves the service's newer days to the scan meanwhile.
        let mut waiting_at: std::collections::HashMap<String, i32> = Default::default();
        self.scans.fetch_add(1, Ordering::Relaxed);
        let walk = Walk(&*self.store);
        for y in self.years(now, year).await? {
            let days = walk.days(y).await?;
            tracing::trace!(year = y, ?days, now, "scan");
            for day in days {
                if day > today.day {
                    break;
                }
                let (low, windows) = walk.windows(day).await?;
                tracing::trace!(day, low, ?windows, "scan day");
                for index in windows {
                    let window = WindowId { day, index };
                    if !self.grid.is_readable(window, now, self.opts.skew_margin_ms) {
                        break;
                    }
                    if !leases.iter().any(|l| self.fenced(l)) {
                        continue;
                    }
                    let rows = walk.instances(window, &ranges).await?;
                    self.instance_rows_read
                        .fetch_add(rows.len() as u64, Ordering::Relaxed);
                    for row in rows {
                        if !self.due_for_writer(window, &row.instance, now) {
                            // A window of an older day that its writer has not closed yet (its
                            // clock runs behind this node's): that day comes first all the
                            // same, so the service's newer days wait for it, here and in the
                            // timer.
                            if day < today.day {
                                held_at.entry(row.service.clone()).or_insert(day);
                                waiting_at.entry(row.service.clone()).or_insert(day);
                            }
                            continue;
                        }
                        let Some(lease) =
                            leases.iter().find(|l| l.range.contains(row.instance_token))
                        else {
                            // Due work nobody holds yet: this service's newer days wait for
                            // it as they would if it were ours.
                            held_at.entry(row.service.clone()).or_insert(day);
                            waiting_at.entry(row.service.clone()).or_insert(day);
                            continue;
                        };
                        if !self.fenced(lease) {
                            continue;
                        }
                        tracing::trace!(?window, service = %row.service, instance = %row.instance, "due instance");
                        // Oldest day first within one pass too: once a service started or
                        // waited on some day, its later days wait for the next pass.
                        if held_at.get(&row.service).is_some_and(|d| *d < day) {
                            continue;
                        }
                        let service = row.service.clone();
                        match self.maybe_start(window, row, *lease) {
                            Start::AlreadyActive => {}
                            start => {
                                if start == Start::Waiting {
                                    self.held_back.store(true, Ordering::Relaxed);
                                    waiting_at.entry(service.clone()).or_insert(day);
                                }
                                held_at.entry(service).or_insert(day);
                            }
                        }
                    }
                }
            }
        }
        *self.held_days.lock().expect("held days lock") = waiting_at;
        Ok(())
    }

    /// How far the writer of `instance` lags this node's clock (0 when unknown).
    fn writer_lag(&self, instance: &str) -> i64 {
        crate::peers::writer_of(instance)
            .map_or(0, |(node, epoch)| self.ownership.writer_lag_ms(node, epoch))
    }

    /// Whether `window` of the writer of `instance` may be read: its writer has closed it by
    /// its own clock, plus the margin, and Cassandra's clock has passed the due times it
    /// answered (`Ownership::writer_read_lag_ms`).
    fn due_for_writer(&self, window: WindowId, instance: &str, now: i64) -> bool {
        let lag = crate::peers::writer_of(instance).map_or(0, |(node, epoch)| {
            self.ownership.writer_read_lag_ms(node, epoch)
        });
        self.grid
            .is_readable(window, now - lag, self.opts.skew_margin_ms)
    }

    fn maybe_start(self: &Arc<Self>, window: WindowId, row: InstanceRow, lease: Lease) -> Start {
        let key = (window, row.service.clone(), row.instance.clone());
        // Without a subscriber, only an instance the timer worked is read, and only swept:
        // its resolved buckets deleted, up to its first live retry.
        let sweep = !self.hub.has_subscriber(&row.service);
        if sweep
            && !self.timer_touched.lock().expect("touched lock").contains(
                window,
                &row.service,
                &row.instance,
            )
        {
            return Start::NoSubscriber;
        }
        if self.services.is_paused(&row.service) {
            return Start::Paused;
        }
        {
            let mut active = self.active.lock().expect("active lock");
            let mut feeding = self.feeding.lock().expect("feeding lock");
            if active.contains(&key) {
                return if feeding.contains(&key) {
                    Start::Waiting
                } else {
                    Start::AlreadyActive
                };
            }
            // Oldest day first: a service's newer days wait until its older ones are fed.
            let mut running = 0;
            for k in feeding.iter().filter(|k| k.1 == row.service) {
                if k.0.day < window.day {
                    return Start::Waiting;
                }
                running += 1;
            }
            if running >= self.opts.workers_per_service {
                return Start::Waiting;
            }
            active.insert(key.clone());
            feeding.insert(key.clone());
            self.timer_touched.lock().expect("touched lock").remove(
                window,
                &row.service,
                &row.instance,
            );
        }
        let this = self.clone();
        let worker = {
            let key = key.clone();
            async move {
                if let Err(e) = this.work_instance(window, &row, &lease, sweep).await {
                    tracing::warn!(error = %e, service = %row.service, instance = %row.instance, "instance worker stopped, will resume on a later scan");
                }
                this.fed(&key);
                this.active.lock().expect("active lock").remove(&key);
            }
        };
        if self.tasks.spawn(worker).is_err() {
            // Shut down: the instance is left for a later scan (or another node).
            self.feeding.lock().expect("feeding lock").remove(&key);
            self.active.lock().expect("active lock").remove(&key);
            return Start::Waiting;
        }
        Start::Started
    }

    /// Delivers every bucket of one instance in one window, deleting each once all of its
    /// pointers are resolved, then the instance's Tier-3 row when no bucket is left. Buckets
    /// are fed one after another without waiting for the previous one's acks, so slow acks
    /// on one bucket do not stall the next. A `sweep` delivers nothing: it stops at the
    /// first live retry, having deleted the buckets before it that were all resolved.
    async fn work_instance(
        self: &Arc<Self>,
        window: WindowId,
        row: &InstanceRow,
        lease: &Lease,
        sweep: bool,
    ) -> Result<(), Error> {
        let buckets = Walk(&*self.store).buckets(window, row).await?;
        let mut draining = FuturesUnordered::new();
        let mut all_done = true;
        for bucket in buckets {
            let loc = Location {
                window,
                instance: row.instance.clone(),
                bucket,
            };
            // A storage error abandons the instance but still waits below for what is in
            // flight, so that no later worker delivers those items a second time.
            let (feed, pending) = match self.feed_bucket(&row.service, &loc, lease, sweep).await {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read a bucket; it will be replayed");
                    (Feed::Abandoned, Outstanding::default())
                }
            };
            let fed = feed == Feed::Whole;
            draining.push(async move { (loc, pending.settled().await && fed) });
            while let Some(Some((loc, ok))) = draining.next().now_or_never() {
                all_done &= self.finish_bucket(&row.service, &loc, ok, lease).await;
            }
            if feed == Feed::Abandoned {
                all_done = false;
                break;
            }
        }
        // Fed: let another instance of this service start while these acks come in.
        self.fed(&(window, row.service.clone(), row.instance.clone()));
        while let Some((loc, ok)) = draining.next().await {
            all_done &= self.finish_bucket(&row.service, &loc, ok, lease).await;
        }
        // The window is closed to writers (invariant 1), so no bucket can appear after this
        // check.
        if all_done
            && self.fenced(lease)
            && Walk(&*self.store).buckets(window, row).await?.is_empty()
            && self.fenced(lease)
        {
            self.store.delete_instance(window, row).await?;
        }
        Ok(())
    }

    /// Deletes a bucket whose every pointer is resolved and durable: its Tier-5 partition in
    /// one partition tombstone, then its Tier-4 row. Returns whether it was deleted; a
    /// failed delete leaves the bucket for a later pass, which finds it resolved.
    async fn finish_bucket(
        &self,
        service: &str,
        loc: &Location,
        resolved: bool,
        lease: &Lease,
    ) -> bool {
        if !resolved || !self.fenced(lease) {
            return false;
        }
        if let Err(e) = self.store.delete_pointer_partition(service, loc).await {
            tracing::warn!(error = %e, "cannot delete a finished bucket; a later pass will");
            return false;
        }
        if !self.fenced(lease) {
            return false;
        }
        if let Err(e) = self
            .store
            .delete_bucket(loc.window, service, &loc.instance, loc.bucket)
            .await
        {
            tracing::warn!(error = %e, "cannot delete a finished bucket's row; a later pass will");
            return false;
        }
        true
    }

    /// Hands every live pointer of one bucket to the hub. Returns how far it got and the
    /// resolutions to wait for. An abandoned or partial bucket stays whole and is replayed.
    ///
    /// Each pointer is claimed before its state row is read (`claims`): one the timer is
    /// delivering is not read, its resolution is waited for instead; one the timer resolved
    /// already is skipped unread.
    async fn feed_bucket(
        self: &Arc<Self>,
        service: &str,
        loc: &Location,
        lease: &Lease,
        sweep: bool,
    ) -> Result<(Feed, Outstanding), Error> {
        let writer_lag = self.writer_lag(&loc.instance);
        let store = self.store.clone();
        let claims = self.claims.clone();
        let svc = service.to_string();
        // The state rows are read in chunks of the pointers at hand, one `IN` query each,
        // two chunks ahead of delivery (`read_ahead` rows in all).
        let chunk = (self.opts.read_ahead / 2).clamp(1, FEED_READ_CHUNK);
        let mut items = self
            .store
            .stream_pointers(service, loc)
            .await?
            .ready_chunks(chunk)
            .map(move |pointers| {
                let store = store.clone();
                let claims = claims.clone();
                let svc = svc.clone();
                async move {
                    let pointers = pointers.into_iter().collect::<Result<Vec<_>, _>>()?;
                    let mut out = Vec::with_capacity(pointers.len());
                    let mut to_read = Vec::new();
                    for p in pointers {
                        let key = (svc.clone(), p.transaction_id.clone(), p.generation);
                        if claims.take_resolved(&key) {
                            continue;
                        }
                        match claims.claim(key, By::Scan) {
                            Ok(claim) => to_read.push((p, claim)),
                            Err((_, done)) => out.push(Fed::Waiting(done)),
                        }
                    }
                    let ids: Vec<String> = to_read
                        .iter()
                        .map(|(p, _)| p.transaction_id.clone())
                        .collect();
                    let states = if ids.is_empty() {
                        Vec::new()
                    } else {
                        store.get_states(&svc, &ids).await?
                    };
                    for ((pointer, claim), state) in to_read.into_iter().zip(states) {
                        out.push(Fed::Read(Box::new((pointer, state, claim))));
                    }
                    Ok::<_, rebound_store::StoreError>(out)
                }
            })
            .buffered(2)
            // A failed read ends the feed (the bucket is replayed): its error comes once.
            .flat_map(|chunk| match chunk {
                Ok(items) => stream::iter(items.into_iter().map(Ok).collect::<Vec<_>>()),
                Err(e) => stream::iter(vec![Err(e)]),
            });
        let mut pending = Outstanding::default();
        // Feeding goes on while the lease holds and the service is not paused; a pause
        // abandons the bucket (replayed after the resume), deliveries in flight may finish.
        let keep = {
            let this = self.clone();
            let lease = *lease;
            let svc = service.to_string();
            move || this.fenced(&lease) && !this.services.is_paused(&svc)
        };
        let mut whole = true;
        while let Some(item) = items.next().await {
            if !self.fenced(lease) {
                return Ok((Feed::Abandoned, pending));
            }
            let (pointer, state, claim) = match item {
                Ok(Fed::Read(read)) => *read,
                // The timer is delivering it: the bucket waits for its resolution.
                Ok(Fed::Waiting(done)) => {
                    pending.push(done);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading a bucket failed; it will be replayed");
                    return Ok((Feed::Abandoned, pending));
                }
            };
            tracing::trace!(transaction_id = %pointer.transaction_id, pointer_generation = pointer.generation, state = ?state.as_ref().map(|s| (s.generation, s.status)), "pointer");
            // The pointer's enqueue time is in its writer's clock.
            let writer_now = self.clock.now_ms() - writer_lag;
            let state =
                match PointerState::of(&pointer, state, writer_now, self.opts.orphan_grace_ms) {
                    PointerState::Live(s) => s,
                    // Its state row has not landed (yet): keep the bucket while that can happen.
                    PointerState::Landing => {
                        whole = false;
                        continue;
                    }
                    // Stale or already resolved (the execution marker), or a failed enqueue.
                    PointerState::Stale | PointerState::Orphan => continue,
                };
            if sweep {
                return Ok((Feed::Abandoned, pending));
            }
            let (guard, done_tx) = claim;
            let done = guard.done();
            match self.offer(service, state, &keep, guard, done_tx).await {
                Offered::Delivered => pending.push(done),
                Offered::Resolved => {}
                Offered::Kept => whole = false,
                Offered::Abandoned => return Ok((Feed::Abandoned, pending)),
            }
        }
        Ok((if whole { Feed::Whole } else { Feed::Partial }, pending))
    }

    /// Offers a live retry for delivery, as both paths do: a held dependency postpones it, a
    /// chain's first compensation waits for its step, the service's limits take a slot and a
    /// token, then the hub hands it to a subscriber. `claim` and `done` go with the work (or
    /// say, when it ends here, whether it was resolved).
    async fn offer(
        self: &Arc<Self>,
        service: &str,
        state: Box<TxState>,
        keep: &(dyn Fn() -> bool + Send + Sync),
        claim: ClaimGuard,
        done: oneshot::Sender<()>,
    ) -> Offered {
        let resolved = |mut claim: ClaimGuard, done: oneshot::Sender<()>| {
            claim.resolved();
            let _ = done.send(());
            Offered::Resolved
        };
        if !keep() {
            return Offered::Abandoned;
        }
        // A held dependency: postponed to the hold's end, without using an attempt.
        if let Gate::Wait(until) = self.holds.gate(&state.dependency).await {
            if !self.postpone_held(&state, until).await {
                return Offered::Kept;
            }
            return resolved(claim, done);
        }
        // A chain's first compensation: only once its step reads DEAD.
        match self.step_gate(&state).await {
            Some(true) => {}
            Some(false) => return resolved(claim, done),
            None => return Offered::Kept,
        }
        // Per-service limits: a concurrency slot held until the retry is resolved, then a
        // dispatch token.
        let slot = match self.services.limiter(service) {
            None => None,
            Some(l) => {
                let Ok(slot) = l.take_slot(keep).await else {
                    return Offered::Abandoned;
                };
                if !l.take_token(keep).await {
                    return Offered::Abandoned;
                }
                slot
            }
        };
        let work = Work {
            state,
            deliveries: 0,
            done: Some(done),
            slot,
            claim: Some(Box::new(claim)),
            delivered: None,
        };
        if self.hub.deliver(work, None, keep).await.is_err() {
            return Offered::Abandoned;
        }
        Offered::Delivered
    }
}

/// One pointer of a bucket being fed: read with its claim, or being delivered by the timer.
enum Fed {
    Read(Box<ReadPointer>),
    Waiting(Done),
}

type ReadPointer = (
    rebound_store::Pointer,
    Option<TxState>,
    (ClaimGuard, oneshot::Sender<()>),
);

/// What `Dispatcher::offer` did with a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offered {
    /// Handed to the hub: resolved once acknowledged.
    Delivered,
    /// Postponed or cancelled by a gate: resolved here.
    Resolved,
    /// A gate could not act (a read or write failed): left for a replay.
    Kept,
    /// The lease, the pause, the node's stop or the path's deadline ended it: left for a replay.
    Abandoned,
}

/// The receiving end of one executor's stream (`Dispatcher::subscribe`). Dropping it (the
/// client went away or the node is stopping) closes the stream: its unacknowledged deliveries
/// go to other subscribers.
#[derive(Debug)]
pub struct Subscription {
    id: u64,
    rx: Deliveries,
    dispatcher: Arc<Dispatcher>,
}

impl Subscription {
    /// The stream's id on this node (in logs).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Takes no new work from now on; what is in flight can still be acknowledged until the
    /// subscription is dropped (`Hub::retire`).
    pub fn retire(&self) {
        self.dispatcher.hub.retire(self.id);
    }
}

impl futures::Stream for Subscription {
    type Item = Delivery;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.dispatcher.close_stream(self.id);
    }
}

/// What `maybe_start` did with a due instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    Started,
    /// Its service has no subscriber on this node.
    NoSubscriber,
    /// Its service is paused.
    Paused,
    /// Fed already, waiting for acks: newer work of the service may go ahead.
    AlreadyActive,
    /// Held back (older day still feeding, or the per-service limit).
    Waiting,
}

/// How feeding a bucket ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// Every pointer was delivered or skipped as resolved: deletable once acks are in.
    Whole,
    /// Some pointer may still get its state row: keep the bucket, go on with the next.
    Partial,
    /// Lease lost, node stopping or a storage error: stop this instance.
    Abandoned,
}
