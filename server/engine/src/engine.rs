//! The engine's components, built in one place from their options: the node and the logic
//! tests both build them here, so a test runs the wiring the node runs.

use std::sync::Arc;

use tokio::sync::watch;

use crate::{
    admin::{Admin, AskPeer},
    compactor::{Compactor, CompactorOptions},
    dispatch::{
        hub::{Hub, HubLimits},
        DispatchOptions, Dispatcher,
    },
    guard::Allow,
    holds::Holds,
    ownership::Ownership,
    push::{client::Client, PushOptions, Pusher},
    ring::{LeaseRing, RingOptions},
    services::Services,
    writer::{Writer, WriterOptions},
};
use rebound_store::{clock::SharedClock, policy::RetryPolicy, RetryStore, ScheduleStore};

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
    pub hub: HubLimits,
    pub compactor: CompactorOptions,
    /// The lease ring's (unused when an `Ownership` is given to `Engine::build`).
    pub ring: RingOptions,
    /// The addresses push targets may resolve to (`REBOUND_PUSH_ALLOW`).
    pub push_allow: Allow,
}

/// The engine's components, wired together. None runs yet: the node owns their loops.
#[derive(Debug, Clone)]
pub struct Engine {
    /// The lease ring, unless an `Ownership` was given.
    pub ring: Option<Arc<LeaseRing>>,
    /// What the components divide their work by: the ring, or the given `Ownership`.
    pub ownership: Arc<dyn Ownership>,
    /// The pusher of the services with a push target.
    pub pusher: Arc<Pusher>,
    pub services: Arc<Services>,
    pub holds: Arc<Holds>,
    pub writer: Arc<Writer>,
    pub hub: Arc<Hub>,
    pub dispatcher: Arc<Dispatcher>,
    pub compactor: Arc<Compactor>,
    /// The addresses push targets may resolve to (`REBOUND_PUSH_ALLOW`), for SetPushTarget's
    /// check (`services::push_address::check_address`); the pusher's client has its own copy.
    pub push_allow: Allow,
    /// The store the components were built on, for the admin operations.
    store: Arc<dyn RetryStore>,
    clock: SharedClock,
    /// The options the components were built from, for the admin operations.
    opts: EngineOptions,
}

impl Engine {
    /// Builds the components on `store`, the writer on `writer_store` (the same store, or a
    /// test's wrapper of it), the ranges from `ownership` when given (e.g. `WholeRing`), else
    /// from a lease ring; the dispatcher stops when `stopping` turns true. Fails only when the
    /// push client cannot be made (its TLS configuration).
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
                rebound_common::metrics::global()
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
        let writer = Writer::new(
            writer_store,
            clock.clone(),
            opts.writer.clone(),
            services.clone(),
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
            stopping,
        ));
        let compactor = Arc::new(Compactor::new(
            store.clone(),
            ownership.clone(),
            clock.clone(),
            writer.grid(),
            opts.compactor,
        ));
        let push_allow = opts.push_allow.clone();
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
            push_allow,
            store,
            clock,
            opts,
        })
    }

    /// The operator API on these components; `peers` asks the other nodes for their part
    /// of the statistics (None: this node answers for itself only).
    pub fn admin(&self, peers: Option<Arc<dyn AskPeer>>) -> Admin {
        let o = &self.opts;
        Admin {
            store: self.store.clone(),
            services: self.services.clone(),
            holds: self.holds.clone(),
            writer: self.writer.clone(),
            hub: self.hub.clone(),
            ownership: self.ownership.clone(),
            ring: self.ring.clone(),
            clock: self.clock.clone(),
            node_id: o.node_id.clone(),
            address: o.ring.address.clone(),
            slots: o.ring.slots,
            skew_margin_ms: o.dispatch.skew_margin_ms,
            orphan_grace_ms: o.dispatch.orphan_grace_ms,
            dead_letter_retention_seconds: o.dispatch.dead_letter_ttl_seconds,
            peers,
            push_allow: self.push_allow.clone(),
        }
    }
}
