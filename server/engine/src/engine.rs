//! The engine's components, built in one place from their options: the node and the logic
//! tests both build them here, so a test runs the wiring the node runs.

use std::sync::Arc;

use tokio::sync::watch;

use crate::{
    clock::SharedClock,
    compactor::{Compactor, CompactorOptions},
    dispatch::{
        hub::{Hub, HubLimits},
        DispatchOptions, Dispatcher,
    },
    holds::Holds,
    ownership::Ownership,
    policy::RetryPolicy,
    services::Services,
    store::{RetryStore, ScheduleStore},
    writer::{Writer, WriterOptions},
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
    pub hub: HubLimits,
    pub compactor: CompactorOptions,
}

/// The engine's components, wired together. None runs yet: the node owns their loops.
#[derive(Debug, Clone)]
pub struct Engine {
    pub services: Arc<Services>,
    pub holds: Arc<Holds>,
    pub writer: Arc<Writer>,
    pub hub: Arc<Hub>,
    pub dispatcher: Arc<Dispatcher>,
    pub compactor: Arc<Compactor>,
}

impl Engine {
    /// Builds the components on `store`, the writer on `writer_store` (the same store, or a
    /// test's wrapper of it), the ranges from `ownership`; the dispatcher stops when
    /// `stopping` turns true.
    pub fn build(
        store: Arc<dyn RetryStore>,
        writer_store: Arc<dyn ScheduleStore>,
        ownership: Arc<dyn Ownership>,
        clock: SharedClock,
        opts: EngineOptions,
        stopping: watch::Receiver<bool>,
    ) -> Engine {
        let services = Arc::new(Services::new(
            store.clone(),
            store.clone(),
            clock.clone(),
            opts.default_policy,
        ));
        let holds = Arc::new(Holds::new(store.clone(), clock.clone(), &opts.node_id));
        let writer = Writer::new(writer_store, clock.clone(), opts.writer, services.clone());
        let hub = Arc::new(Hub::new(clock.clone(), opts.boot_epoch, opts.hub));
        let dispatcher = Arc::new(Dispatcher::new(
            hub.clone(),
            store.clone(),
            writer.clone(),
            services.clone(),
            holds.clone(),
            ownership.clone(),
            clock.clone(),
            opts.dispatch,
            stopping,
        ));
        let compactor = Arc::new(Compactor::new(
            store,
            ownership,
            clock,
            writer.grid(),
            opts.compactor,
        ));
        Engine {
            services,
            holds,
            writer,
            hub,
            dispatcher,
            compactor,
        }
    }
}
