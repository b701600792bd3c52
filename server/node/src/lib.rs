//! Rebound's node: it opens the store, builds and starts the engine from the configuration,
//! and serves the engine's `Handle` over gRPC and HTTP (the dashboard among them). See
//! docs/architecture.md for the architecture (its "Crates and module map" lists these
//! modules and those of the engine); each module says which part of it it owns.

pub mod api;
pub mod auth;
mod budget;
pub mod config;
mod connections;
mod dashboard;
mod http;
mod keys;
pub mod metric_definitions;
pub mod node;
mod peers;
pub mod telemetry;
mod tls;
