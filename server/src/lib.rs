//! Rebound: retry-as-a-service over Apache Cassandra. See docs/architecture.md for the
//! architecture (its "Crates and module map" lists these modules); each module says which
//! part of it it owns.

pub mod admin;
pub mod api;
pub mod auth;
pub mod backlog;
pub mod budget;
pub mod clock_sync;
pub mod coalesce;
pub mod compactor;
pub mod config;
pub mod connections;
pub mod consistency;
pub mod dashboard;
pub mod dispatch;
pub mod error;
pub mod holds;
pub mod http;
pub mod metrics;
pub mod names;
pub mod node;
pub mod outcome;
pub mod ownership;
pub mod peers;
pub mod push;
pub mod redrive;
pub mod ring;
pub mod saga;
pub mod services;
pub mod store;
pub mod tasks;
pub mod telemetry;
pub mod tls;
pub mod txlock;
pub mod validate;
pub mod walk;
pub mod wire;
pub mod writer;

/// The contract's value types, where the rest of the node has always named them.
pub use rebound_store::{clock, policy, window};
