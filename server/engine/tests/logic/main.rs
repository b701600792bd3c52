//! Fast unit tests of the logic: the writer, the dispatcher, the compactor and the lease ring,
//! each built by `Engine::build` as the node builds it, on the embedded store in a temporary
//! directory and a manual clock. No Cassandra, no network, no sleeping for windows to pass:
//! the clock is moved, and the dispatcher's scans are run by hand (`Dispatcher::scan`). Real
//! time is spent only waiting, a few milliseconds, for the tasks a scan spawns (bucket
//! workers), with `eventually` bounded at two seconds.
//!
//! The Cassandra-backed tests (integration-tests/tests/dispatch.rs and the others there) drive
//! the same behaviour end to end through gRPC; these pin it down component by component,
//! acking through the engine's `Handle` as the node's handlers do.

mod act;
mod compactor;
mod dispatcher;
mod history;
mod holds;
mod list;
mod list_finished;
mod ring;
mod saga;
mod stall;
mod timer;
mod writer;

use std::{collections::BTreeMap, pin::Pin, sync::Arc, time::Duration};

use futures::{Stream, StreamExt, TryStreamExt};
use rebound_engine::{
    compactor::Compactor,
    dispatch::Dispatcher,
    engine::{Engine, Settings},
    guard::Allow,
    handle::Handle,
    ownership::{Ownership, WholeRing},
    policy::PolicyOverrides,
    validate::{EnqueueInput, Schedule},
    window::WindowGrid,
    wire,
    writer::{EnqueueOutcome, Writer},
};
use rebound_proto::v1 as pb;
use rebound_store::{
    clock::{ManualClock, SharedClock},
    observed::Observed,
    window::WindowId,
    DirectoryStore, Location, MigrationStore, Pointer, RetryStore, ScheduleStore, StateStore,
    TokenRange, TxState,
};
use rebound_store_embedded::EmbeddedStore;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

/// Milliseconds since the epoch of a UTC time `YYYY-MM-DD HH:MM:SS.mmm`.
pub fn utc_ms(s: &str) -> i64 {
    use chrono::{NaiveDateTime, TimeZone, Utc};
    let t = NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.3f").expect("a UTC time");
    Utc.from_utc_datetime(&t).timestamp_millis()
}

/// 1 s windows, a 200 ms skew margin, buckets of 3, two lanes; a 4.2 s orphan grace; the
/// node's defaults for the rest.
pub fn config() -> Settings {
    Settings {
        node_id: "node-a".into(),
        window_seconds: 1,
        skew_margin_ms: 200,
        bucket_size: 3,
        lanes: 2,
        store_request_timeout_ms: 2_000,
        slots: 8,
        lease_ttl_ms: 3_000,
        clock_sync: false,
        max_delay_seconds: 2_592_000,
        terminal_ttl_seconds: 3_600,
        dead_letter_retention_seconds: 14 * 86_400,
        max_concurrent_writes: 4_096,
        max_subscribers: 1_024,
        max_in_flight_bytes: 256 << 20,
        timer_max_entries: 100_000,
        timer_max_bytes: 32 << 20,
        timer_horizon_seconds: 3_600,
        scan_interval_ms: 500,
        settings_refresh_ms: 1_000,
        compaction_interval_ms: 2_000,
        stats_interval_ms: 15_000,
        clock_sync_interval_ms: 10_000,
        default_policy: Default::default(),
        push_allow: Allow::default(),
    }
}

/// A fresh embedded store in its own temporary directory, migrated, on `clock`.
pub async fn open_store(clock: &ManualClock) -> (Arc<EmbeddedStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let shared: SharedClock = Arc::new(clock.clone());
    let store = EmbeddedStore::open(dir.path(), "local", "default", shared.clone())
        .expect("the embedded store opens");
    store.migrate(clock_now(clock)).await.expect("migrated");
    (Arc::new(store), dir)
}

pub fn clock_now(clock: &ManualClock) -> i64 {
    use rebound_store::clock::Clock;
    clock.now_ms()
}

/// A subscription's deliveries, encoded as `ExecutorService::Subscribe` answers them.
pub type Deliveries = Pin<Box<dyn Stream<Item = Result<pb::Delivery, Status>> + Send>>;

/// The executor side of the engine's `Handle`, as the node's `ExecutorApi` calls it (with
/// authentication off): requests in, encoded answers out.
pub struct Executor {
    pub handle: Handle,
}

impl Executor {
    pub async fn subscribe(&self, service: &str, max_in_flight: u32) -> Deliveries {
        let sub = self
            .handle
            .subscribe(service, "logic-test", max_in_flight)
            .expect("subscribed");
        Box::pin(sub.map(|d| Ok(wire::delivery_pb(d))))
    }

    pub async fn ack(
        &self,
        r: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        let res = self.handle.ack_request(r.get_ref(), "").await?;
        Ok(Response::new(wire::ack_response(res)))
    }
}

/// One node's components on the embedded store and a manual clock, wired as `node.rs` does
/// with a `WholeRing` ownership (a single node holds every range and the compactor role).
/// No background task runs unless a test starts one (`start_reaper`); dropping the rig stops
/// those.
pub struct Rig {
    pub clock: ManualClock,
    pub store: Arc<EmbeddedStore>,
    pub config: Settings,
    pub grid: WindowGrid,
    pub writer: Arc<Writer>,
    pub dispatcher: Arc<Dispatcher>,
    pub compactor: Arc<Compactor>,
    pub executor: Executor,
    stop: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl Rig {
    pub async fn new(start_ms: i64) -> Rig {
        Rig::with_config(start_ms, config()).await
    }

    /// A rig on `config`, a fresh embedded store and the whole ring.
    pub async fn with_config(start_ms: i64, config: Settings) -> Rig {
        let clock = ManualClock::new(start_ms);
        let (store, dir) = open_store(&clock).await;
        let writer_store: Arc<dyn ScheduleStore> =
            Arc::new(Observed::new(store.clone(), "embedded"));
        Rig::build(config, clock, store, dir, writer_store, Arc::new(WholeRing)).await
    }

    /// A rig whose writer writes through `writer_store` (e.g. a `stall::StallingStore` over
    /// `store`), everything else uses `store` itself, and whose ranges and compactor role
    /// come from `ownership` (`WholeRing`, or a `LeaseRing` on `store`).
    pub async fn build(
        config: Settings,
        clock: ManualClock,
        store: Arc<EmbeddedStore>,
        dir: tempfile::TempDir,
        writer_store: Arc<dyn ScheduleStore>,
        ownership: Arc<dyn Ownership>,
    ) -> Rig {
        let shared: SharedClock = Arc::new(clock.clone());
        let boot_epoch = clock_now(&clock);
        let (stop, _) = watch::channel(false);
        // The node's own wiring (`Engine::build`), on the embedded store observed as the
        // node observes its store.
        let observed: Arc<dyn RetryStore> = Arc::new(Observed::new(store.clone(), "embedded"));
        let engine = Engine::build(
            observed,
            writer_store,
            Some(ownership),
            shared,
            config.options(boot_epoch, "127.0.0.1:0"),
            stop.subscribe(),
        )
        .expect("engine");
        engine.services().refresh().await.expect("services read");
        let executor = Executor {
            handle: engine.handle(None),
        };
        let writer = engine.writer().clone();
        let dispatcher = engine.dispatcher().clone();
        let compactor = engine.compactor().clone();
        Rig {
            grid: writer.grid(),
            clock,
            store,
            config,
            writer,
            dispatcher,
            compactor,
            executor,
            stop,
            _dir: dir,
        }
    }

    pub fn now(&self) -> i64 {
        clock_now(&self.clock)
    }

    /// The orphan grace: how long a pointer waits for its state row.
    pub fn orphan_grace_ms(&self) -> i64 {
        self.config.orphan_grace_ms()
    }

    pub async fn enqueue(&self, service: &str, txid: &str, delay_ms: u64) -> EnqueueOutcome {
        self.try_enqueue(service, txid, delay_ms)
            .await
            .unwrap_or_else(|e| panic!("enqueue {service}/{txid}: {e}"))
    }

    pub async fn try_enqueue(
        &self,
        service: &str,
        txid: &str,
        delay_ms: u64,
    ) -> Result<EnqueueOutcome, rebound_engine::error::Error> {
        self.writer.enqueue(input(service, txid, delay_ms)).await
    }

    pub async fn state(&self, service: &str, txid: &str) -> TxState {
        self.store
            .get_state(service, txid)
            .await
            .expect("state read")
            .unwrap_or_else(|| panic!("no state row for {service}/{txid}"))
    }

    pub async fn location(&self, service: &str, txid: &str) -> Location {
        self.state(service, txid)
            .await
            .location
            .expect("a scheduled retry has a location")
    }

    pub async fn pointers(&self, service: &str, loc: &Location) -> Vec<Pointer> {
        self.store
            .stream_pointers(service, loc)
            .await
            .expect("pointers read")
            .try_collect()
            .await
            .expect("pointers read")
    }

    /// Every Tier-5 pointer of a window, by (instance, bucket).
    pub async fn window_pointers(
        &self,
        service: &str,
        window: WindowId,
    ) -> BTreeMap<(String, u32), Vec<Pointer>> {
        let mut out = BTreeMap::new();
        for row in self
            .store
            .list_instances(window, TokenRange::FULL)
            .await
            .expect("instances read")
        {
            if row.service != service {
                continue;
            }
            for bucket in self
                .store
                .list_buckets(window, service, &row.instance)
                .await
                .expect("buckets read")
            {
                let loc = Location {
                    window,
                    instance: row.instance.clone(),
                    bucket,
                };
                out.insert(
                    (row.instance.clone(), bucket),
                    self.pointers(service, &loc).await,
                );
            }
        }
        out
    }

    /// Directory rows of `window` left: (Tier-3 rows, Tier-4 rows, Tier-5 pointers).
    pub async fn window_rows(&self, window: WindowId) -> (usize, usize, usize) {
        let instances = self
            .store
            .list_instances(window, TokenRange::FULL)
            .await
            .expect("instances read");
        let (mut buckets, mut pointers) = (0, 0);
        for row in &instances {
            for bucket in self
                .store
                .list_buckets(window, &row.service, &row.instance)
                .await
                .expect("buckets read")
            {
                buckets += 1;
                let loc = Location {
                    window,
                    instance: row.instance.clone(),
                    bucket,
                };
                pointers += self
                    .store
                    .count_pointers(&row.service, &loc)
                    .await
                    .expect("pointers counted") as usize;
            }
        }
        (instances.len(), buckets, pointers)
    }

    pub async fn subscribe(&self, service: &str, max_in_flight: u32) -> Deliveries {
        self.executor.subscribe(service, max_in_flight).await
    }

    pub async fn ack(
        &self,
        d: &pb::Delivery,
        outcome: pb::AckOutcome,
        retry_after_ms: Option<i64>,
    ) -> Result<pb::AckResponse, tonic::Status> {
        self.executor
            .ack(Request::new(pb::AckRequest {
                delivery_id: d.delivery_id.clone(),
                outcome: outcome as i32,
                error: if outcome == pb::AckOutcome::Succeeded {
                    String::new()
                } else {
                    "boom".into()
                },
                retry_after: retry_after_ms.map(|ms| prost_types::Duration {
                    seconds: ms / 1000,
                    nanos: ((ms % 1000) * 1_000_000) as i32,
                }),
                ..Default::default()
            }))
            .await
            .map(|r| r.into_inner())
    }

    /// One dispatch pass, as the scanner runs it every `scan_interval`.
    pub async fn scan(&self) {
        self.dispatcher.scan().await.expect("a scan");
    }

    /// Runs the reaper (ack deadlines) every 5 ms of real time until the rig is dropped.
    pub fn start_reaper(&self) {
        tokio::spawn(self.dispatcher.clone().run_reaper(Duration::from_millis(5)));
    }
}

/// An enqueue of `txid` (its payload is its id) due after `delay_ms`, attempt 1.
pub fn input(service: &str, txid: &str, delay_ms: u64) -> EnqueueInput {
    EnqueueInput {
        service: service.into(),
        transaction_id: txid.into(),
        payload: txid.as_bytes().to_vec(),
        attributes: BTreeMap::new(),
        schedule: Schedule::Delay(Duration::from_millis(delay_ms)),
        policy: PolicyOverrides::default(),
        attempt: 1,
        last_error: String::new(),
        trace: Default::default(),
        dependency: String::new(),
        saga: Default::default(),
        compensation_policies: Vec::new(),
    }
}

/// The next delivery, or None when none comes within `within_ms` of real time.
pub async fn next_delivery(sub: &mut Deliveries, within_ms: u64) -> Option<pb::Delivery> {
    match tokio::time::timeout(Duration::from_millis(within_ms), sub.next()).await {
        Ok(Some(Ok(d))) => Some(d),
        Ok(Some(Err(e))) => panic!("subscription failed: {e}"),
        Ok(None) | Err(_) => None,
    }
}

/// The next delivery, which must come within a second.
pub async fn expect_delivery(sub: &mut Deliveries) -> pb::Delivery {
    next_delivery(sub, 1_000).await.expect("a delivery")
}

/// Polls `check` every 2 ms until it holds, for at most 2 s of real time.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
