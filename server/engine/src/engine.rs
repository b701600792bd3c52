//! The engine's front door: `Engine::build` makes every component from its options on a
//! store and a clock, `Engine::prepare` reads what they need before the first call,
//! `Engine::start` spawns every loop the engine runs under owners of its own, `Engine::handle`
//! gives the cheap cloneable `Handle` that carries every operation, and `Engine::shutdown`
//! stops the loops in their order. The node and the logic tests build it the same way, so a
//! test runs the wiring the node runs.

use std::{sync::Arc, time::Duration};

use tokio::{sync::watch, time::Instant};

use crate::{
    clock_sync::{measure_offset, run_clock_sync},
    compactor::{Compactor, CompactorOptions},
    dispatch::{
        hub::{Hub, HubLimits},
        DispatchOptions, Dispatcher,
    },
    guard::Allow,
    handle::AskPeer,
    handle::Handle,
    holds::Holds,
    ownership::Ownership,
    push::{client::Client, PushOptions, Pusher},
    ring::{LeaseRing, RingOptions},
    services::Services,
    timer::{Timer, TimerOptions},
    writer::{Writer, WriterOptions},
};
use rebound_common::{coalesce::Counts, tasks::Tasks};
use rebound_store::{
    clock::{ClusterClock, SharedClock},
    policy::RetryPolicy,
    RetryStore, ScheduleStore,
};

/// Every component's options.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// This node's id (the dependency probes name their owner by it).
    pub node_id: String,
    /// When this process started: its writer lanes and its deliveries' ids carry it.
    pub boot_epoch: i64,
    /// The node-wide default retry policy, below each service's.
    pub default_policy: RetryPolicy,
    pub writer: WriterOptions,
    pub dispatch: DispatchOptions,
    pub timer: TimerOptions,
    pub hub: HubLimits,
    pub compactor: CompactorOptions,
    /// The lease ring's (unused when an `Ownership` is given to `Engine::build`).
    pub ring: RingOptions,
    /// The addresses push targets may resolve to (`REBOUND_PUSH_ALLOW`).
    pub push_allow: Allow,
    /// How often the loops `Engine::start` spawns run.
    pub loops: LoopOptions,
}

/// The periods of the engine's loops, and the first ring round's clock check.
#[derive(Debug, Clone)]
pub struct LoopOptions {
    /// How often the service settings are read again (`REBOUND_SETTINGS_REFRESH_MS`).
    pub settings_refresh: Duration,
    /// How often the compactor runs when this node holds the role.
    pub compaction: Duration,
    /// How often the backlog is measured when this node is the compactor.
    pub stats: Duration,
    /// How often the clock is synced to the store's, when a `ClusterClock` is given.
    pub clock_sync: Duration,
    /// Clock sync is off: the first ring round then waits one lease lifetime when this
    /// node's clock is off the store's by more than half the skew margin.
    pub clock_sync_off: bool,
}

/// The engine's settings as an operator gives them (the node maps its configuration onto
/// them; a test writes them out); `Settings::options` derives every component's options.
#[derive(Debug, Clone)]
pub struct Settings {
    pub node_id: String,
    pub window_seconds: u32,
    pub skew_margin_ms: u64,
    pub bucket_size: u32,
    pub lanes: u32,
    pub slots: u32,
    pub lease_ttl_ms: u64,
    /// The store's request timeout: a pointer waits two of them (plus the skew margin) for
    /// its state row before a reader takes it for the remains of a failed enqueue.
    pub store_request_timeout_ms: u64,
    pub max_delay_seconds: u64,
    pub terminal_ttl_seconds: u32,
    pub dead_letter_retention_seconds: u32,
    pub max_concurrent_writes: usize,
    pub max_subscribers: usize,
    pub max_in_flight_bytes: usize,
    /// The memory path (`dispatch::timer`): most retries held, their bytes, and how far ahead
    /// of their due time they are held (0 entries: off; the scan delivers everything).
    pub timer_max_entries: usize,
    pub timer_max_bytes: usize,
    pub timer_horizon_seconds: u64,
    pub scan_interval_ms: u64,
    pub settings_refresh_ms: u64,
    pub compaction_interval_ms: u64,
    pub stats_interval_ms: u64,
    pub clock_sync: bool,
    pub clock_sync_interval_ms: u64,
    pub default_policy: RetryPolicy,
    pub push_allow: Allow,
}

impl Settings {
    /// How long a pointer may wait for its state row before a reader takes it for the
    /// remains of a failed enqueue: two request timeouts plus the skew margin.
    pub fn orphan_grace_ms(&self) -> i64 {
        (2 * self.store_request_timeout_ms + self.skew_margin_ms) as i64
    }

    /// Lease validity a dispatch step or a compactor delete needs left before it starts: a
    /// fifth of the lease lifetime.
    pub fn fence_margin_ms(&self) -> i64 {
        (self.lease_ttl_ms / 5) as i64
    }

    /// Every component's options, for a process started at `boot_epoch` that tells
    /// executors its address is `advertised`.
    pub fn options(&self, boot_epoch: i64, advertised: &str) -> EngineOptions {
        let c = self;
        let ms = Duration::from_millis;
        EngineOptions {
            node_id: c.node_id.clone(),
            boot_epoch,
            default_policy: c.default_policy.clone(),
            writer: WriterOptions {
                node_id: c.node_id.clone(),
                boot_epoch,
                window_seconds: c.window_seconds,
                bucket_size: c.bucket_size,
                lanes: c.lanes,
                max_delay: Duration::from_secs(c.max_delay_seconds),
                terminal_ttl_seconds: c.terminal_ttl_seconds,
                dead_ttl_seconds: c.dead_letter_retention_seconds.max(c.terminal_ttl_seconds),
                max_concurrent_writes: c.max_concurrent_writes,
                default_policy: c.default_policy.clone(),
                orphan_grace_ms: c.orphan_grace_ms(),
            },
            dispatch: DispatchOptions {
                skew_margin_ms: c.skew_margin_ms as i64,
                fence_margin_ms: c.fence_margin_ms(),
                scan_interval: ms(c.scan_interval_ms),
                workers_per_service: 4,
                // State reads in flight per bucket being fed; they coalesce into `IN` reads.
                // 64 drained 4,600-4,900/s against 3,700-3,800/s with 16 in 20k `bench
                // rebound` runs; the 1M drain stayed at about 3,200-3,300/s.
                read_ahead: 64,
                dead_letter_ttl_seconds: c.dead_letter_retention_seconds,
                orphan_grace_ms: c.orphan_grace_ms(),
            },
            timer: TimerOptions {
                max_entries: c.timer_max_entries,
                max_bytes: c.timer_max_bytes,
                horizon_ms: i64::try_from(c.timer_horizon_seconds.saturating_mul(1000))
                    .unwrap_or(i64::MAX),
                fence_margin_ms: c.fence_margin_ms(),
            },
            hub: HubLimits {
                max_subscribers: c.max_subscribers,
                max_in_flight_bytes: c.max_in_flight_bytes,
            },
            compactor: CompactorOptions {
                // Gate 2 with twice the skew margin: a late writer has a full extra margin.
                gate_margin_ms: 2 * c.skew_margin_ms as i64,
                fence_margin_ms: c.fence_margin_ms(),
            },
            ring: RingOptions {
                node_id: c.node_id.clone(),
                address: advertised.to_string(),
                boot_epoch,
                slots: c.slots,
                lease_ttl_ms: c.lease_ttl_ms as i64,
                clock_deadband_ms: (c.skew_margin_ms / 2) as i64,
            },
            push_allow: c.push_allow.clone(),
            loops: LoopOptions {
                settings_refresh: ms(c.settings_refresh_ms),
                compaction: ms(c.compaction_interval_ms),
                stats: ms(c.stats_interval_ms),
                clock_sync: ms(c.clock_sync_interval_ms),
                clock_sync_off: !c.clock_sync,
            },
        }
    }
}

/// The engine's components, wired together, and the owners of the tasks they run.
#[derive(Debug)]
pub struct Engine {
    ring: Option<Arc<LeaseRing>>,
    ownership: Arc<dyn Ownership>,
    pusher: Arc<Pusher>,
    services: Arc<Services>,
    holds: Arc<Holds>,
    writer: Arc<Writer>,
    hub: Arc<Hub>,
    dispatcher: Arc<Dispatcher>,
    compactor: Arc<Compactor>,
    store: Arc<dyn RetryStore>,
    clock: SharedClock,
    opts: EngineOptions,
    /// Turns true when the engine is to stop (given to `build`); every loop watches it.
    stopping: watch::Receiver<bool>,
    /// The lease ring's loop (stopped last, as it hands the leases back).
    ring_tasks: Tasks,
    /// Every other loop of `start`.
    loops: Tasks,
}

impl Engine {
    pub fn build(
        store: Arc<dyn RetryStore>,
        writer_store: Arc<dyn ScheduleStore>,
        ownership: Option<Arc<dyn Ownership>>,
        clock: SharedClock,
        opts: EngineOptions,
        stopping: watch::Receiver<bool>,
    ) -> Result<Engine, String> {
        let (ring, ownership): (_, Arc<dyn Ownership>) = match ownership {
            Some(o) => (None, o),
            None => {
                crate::metric_definitions::metrics()
                    .ring_size
                    .set(i64::from(opts.ring.slots));
                let ring = Arc::new(LeaseRing::new(
                    store.clone(),
                    clock.clone(),
                    opts.ring.clone(),
                ));
                (Some(ring.clone()), ring)
            }
        };
        let services = Arc::new(Services::new(
            store.clone(),
            store.clone(),
            clock.clone(),
            opts.default_policy.clone(),
        ));
        let holds = Arc::new(Holds::new(store.clone(), clock.clone(), &opts.node_id));
        let timer = Timer::new(opts.timer, ownership.clone());
        let writer = Writer::new(
            writer_store,
            clock.clone(),
            opts.writer.clone(),
            services.clone(),
            timer.clone(),
            ownership.clone(),
        );
        let hub = Arc::new(Hub::new(clock.clone(), opts.boot_epoch, opts.hub));
        let dispatcher = Arc::new(Dispatcher::new(
            hub.clone(),
            store.clone(),
            writer.clone(),
            services.clone(),
            holds.clone(),
            ownership.clone(),
            clock.clone(),
            opts.dispatch.clone(),
            stopping.clone(),
            timer,
        ));
        let compactor = Arc::new(Compactor::new(
            store.clone(),
            ownership.clone(),
            clock.clone(),
            writer.grid(),
            opts.compactor,
        ));
        let client =
            Client::new(opts.push_allow.clone()).map_err(|e| format!("push client: {e}"))?;
        let pusher = Arc::new(Pusher::new(
            dispatcher.clone(),
            services.clone(),
            clock.clone(),
            PushOptions { client },
        ));
        Ok(Engine {
            ring,
            ownership,
            pusher,
            services,
            holds,
            writer,
            hub,
            dispatcher,
            compactor,
            store,
            clock,
            opts,
            stopping,
            ring_tasks: Tasks::new("ring"),
            loops: Tasks::new("engine"),
        })
    }

    /// Reads what the components need before the first call: the service settings (after
    /// the secrets' keys are set, so that sealed targets open), the dependency holds, and one
    /// lease-ring round, so that this node's heartbeat (and so its clock) is known to the
    /// others before it writes anything they might read.
    pub async fn prepare(&self) -> Result<(), String> {
        self.services
            .refresh()
            .await
            .map_err(|e| format!("reading service settings: {e}"))?;
        self.holds
            .refresh()
            .await
            .map_err(|e| format!("reading dependency holds: {e}"))?;
        let Some(ring) = &self.ring else {
            return Ok(());
        };
        // A clock off by more than half the margin with clock sync off: announce this node,
        // then wait until every other node has read its heartbeat (one lease lifetime) before
        // taking a lease or writing anything, so that they judge its leases and windows in its
        // clock from the first one on.
        let skew_margin_ms = self.opts.dispatch.skew_margin_ms;
        if self.opts.loops.clock_sync_off {
            if let Some(offset) = measure_offset(self.store.as_ref(), self.clock.as_ref()).await {
                if offset.abs() * 2 > skew_margin_ms {
                    tracing::warn!(
                        offset_ms = offset,
                        "this node's clock differs from Cassandra's by more than half the skew margin and clock sync is off (REBOUND_CLOCK_SYNC): the other nodes will judge its windows and leases in its own clock; waiting one lease lifetime before serving so they know it"
                    );
                    if let Err(e) = ring.announce().await {
                        tracing::warn!(error = %e, "cannot announce this node, will retry");
                    }
                    let ttl = u64::try_from(self.opts.ring.lease_ttl_ms).unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ttl)).await;
                }
            }
        }
        if let Err(e) = ring.cycle().await {
            tracing::warn!(error = %e, "first lease ring round failed, will retry");
        }
        Ok(())
    }

    /// Spawns every loop the engine runs, each under an owner of the engine's, each stopping
    /// when the stop signal given to `build` turns true: the lease ring, the settings and
    /// holds refreshes, the dispatcher's scanner and reaper, the pushers, the compactor, the
    /// backlog measure, the store's own loop, and the clock sync when `cluster_clock` is
    /// given (the clock `build` was given, synced to the store's).
    pub fn start(&self, cluster_clock: Option<Arc<ClusterClock>>) {
        let stop = || self.stopping.clone();
        let loops = &self.opts.loops;
        if let Some(r) = &self.ring {
            own(&self.ring_tasks, r.clone().run(stop()));
        }
        let l = &self.loops;
        own(l, self.services.clone().run(loops.settings_refresh, stop()));
        own(
            l,
            self.holds.clone().run(crate::holds::REFRESH_EVERY, stop()),
        );
        own(l, self.dispatcher.clone().run_scanner());
        own(l, self.dispatcher.clone().run_timer());
        own(l, self.pusher.clone().run(stop()));
        own(
            l,
            self.dispatcher
                .clone()
                .run_reaper(Duration::from_millis(100)),
        );
        own(l, self.compactor.clone().run(loops.compaction, stop()));
        own(
            l,
            crate::backlog::run(
                self.store.clone(),
                self.ownership.clone(),
                self.clock.clone(),
                self.writer.grid(),
                // A window's count is cached once it is closed by the compactor's gate margin.
                self.opts.compactor.gate_margin_ms,
                loops.stats,
                stop(),
            ),
        );
        if let Some(store_loop) = self.store.clone().background(stop()) {
            own(l, store_loop);
        }
        if let Some(cc) = cluster_clock {
            own(
                l,
                run_clock_sync(
                    self.store.clone(),
                    cc,
                    loops.clock_sync,
                    self.opts.dispatch.skew_margin_ms,
                    stop(),
                ),
            );
        }
    }

    /// The operations, on these components; `peers` asks the other nodes for their part of
    /// the statistics (None: this node answers for itself only).
    pub fn handle(&self, peers: Option<Arc<dyn AskPeer>>) -> Handle {
        let o = &self.opts;
        Handle {
            store: self.store.clone(),
            services: self.services.clone(),
            holds: self.holds.clone(),
            writer: self.writer.clone(),
            dispatcher: self.dispatcher.clone(),
            hub: self.hub.clone(),
            ownership: self.ownership.clone(),
            ring: self.ring.clone(),
            clock: self.clock.clone(),
            node_id: o.node_id.as_str().into(),
            address: o.ring.address.as_str().into(),
            slots: o.ring.slots,
            skew_margin_ms: o.dispatch.skew_margin_ms,
            orphan_grace_ms: o.dispatch.orphan_grace_ms,
            dead_letter_retention_seconds: o.dispatch.dead_letter_ttl_seconds,
            max_delay: o.writer.max_delay,
            peers,
            push_allow: o.push_allow.clone(),
            gauged: Arc::default(),
        }
    }

    /// Wakes the dispatcher's loops, so that they see the stop signal at once rather than at
    /// their next tick: call it right after the signal.
    pub fn wake(&self) {
        self.dispatcher.wake();
    }

    /// Stops the engine after its stop signal: waits for its tasks until `deadline`, then
    /// aborts what is left, in an order that lets each finish its writes. The loops return on
    /// the signal; the pushers, then the dispatcher's workers and redeliveries once their
    /// lease checks fail and their streams are closed (work dropped unresolved is replayed);
    /// the writer's flushes; the ring, which hands its leases back so that other nodes take
    /// over at once, and has at least 5 s for that; last the store's flushes, as every task
    /// above writes through them. No task of the engine outlives this call.
    pub async fn shutdown(&self, deadline: Instant) {
        self.loops.shutdown(deadline).await;
        self.pusher.tasks().shutdown(deadline).await;
        self.dispatcher.tasks().shutdown(deadline).await;
        for flushes in self.writer.flush_tasks() {
            flushes.shutdown(deadline).await;
        }
        self.ring_tasks
            .shutdown(deadline.max(Instant::now() + Duration::from_secs(5)))
            .await;
        for (_, flushes) in self.store.task_owners() {
            flushes.shutdown(deadline).await;
        }
    }

    /// The engine's tasks not finished yet, by owner; all 0 once `shutdown` has returned.
    pub fn live_tasks(&self) -> Vec<(&'static str, usize)> {
        let mut live = vec![
            ("engine", self.loops.live()),
            ("ring", self.ring_tasks.live()),
            ("dispatcher", self.dispatcher.tasks().live()),
            ("push", self.pusher.tasks().live()),
            (
                "writer",
                self.writer.flush_tasks().iter().map(|t| t.live()).sum(),
            ),
        ];
        live.extend(
            self.store
                .task_owners()
                .into_iter()
                .map(|(owner, tasks)| (owner, tasks.live())),
        );
        live
    }

    /// The store requests made since the start: the coalesced state-row reads and writes
    /// (Cassandra only; requests and rows), and the writer's pointer writes (requests and
    /// pointers).
    pub fn io_counts(&self) -> IoCounts {
        let (state_reads, state_writes) = self.store.state_io_counts();
        let (pointer_writes, pointers) = self.writer.pointer_writes();
        IoCounts {
            state_reads,
            state_writes,
            pointer_writes,
            pointers,
        }
    }

    /// The writer, for tests and tools that drive it directly.
    pub fn writer(&self) -> &Arc<Writer> {
        &self.writer
    }

    /// The dispatcher, for tests and tools that drive its scans by hand.
    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }

    /// The compactor, for tests that run its passes by hand.
    pub fn compactor(&self) -> &Arc<Compactor> {
        &self.compactor
    }

    /// The lease ring (None: an `Ownership` was given to `build`).
    pub fn ring(&self) -> Option<&Arc<LeaseRing>> {
        self.ring.as_ref()
    }

    /// What the components divide their work by: the ring, or the given `Ownership`.
    pub fn ownership(&self) -> &Arc<dyn Ownership> {
        &self.ownership
    }

    /// The service settings (the secrets key file sets their sealing keys).
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }
}

/// Spawns `task` under `owner`. A new owner accepts it; one closed by `Engine::shutdown`
/// refuses, and the task is then not run (an engine started after its shutdown runs nothing).
fn own(owner: &Tasks, task: impl std::future::Future<Output = ()> + Send + 'static) {
    if owner.spawn(task).is_err() {
        tracing::warn!("a loop of the engine was started after its shutdown; not run");
    }
}

/// What `Engine::io_counts` answers.
#[derive(Debug, Clone, Copy, Default)]
pub struct IoCounts {
    pub state_reads: Counts,
    pub state_writes: Counts,
    pub pointer_writes: u64,
    pub pointers: u64,
}
