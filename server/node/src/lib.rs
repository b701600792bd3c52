//! Rebound's node: it opens the store, builds the engine's components from the
//! configuration, and serves them over gRPC and HTTP (the dashboard among them). See
//! docs/architecture.md for the architecture (its "Crates and module map" lists these
//! modules and those of the engine); each module says which part of it it owns.

pub mod admin;
pub mod api;
pub mod auth;
pub mod budget;
pub mod config;
pub mod connections;
pub mod dashboard;
pub mod http;
pub mod keys;
pub mod node;
pub mod redrive;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod wire;

/// The engine's components (`rebound-engine`), under the names the node has always used.
pub use rebound_engine::{
    backlog, clock_sync, compactor, dispatch, engine, error, holds, names, outcome, ownership,
    peers, push, ring, saga, services, txlock, validate, walk, writer,
};

/// The shared parts, the contract's value types and the consistency levels, under the names
/// the rest of the node has always used.
pub use rebound_common::{coalesce, metrics, tasks};
pub use rebound_store::{clock, policy, window};
pub use rebound_store_cassandra::consistency;
