//! What every part of a Rebound node shares, below the storage contract and the engine: the
//! metrics registry (`metrics`), task owners (`tasks`), request coalescing (`coalesce`) and
//! the process-wide switch for spans (`trace`), and the error of a bad setting (`ConfigError`). It depends on no other Rebound crate.

pub mod coalesce;
pub mod metrics;
pub mod tasks;
pub mod trace;

/// A configuration value that failed validation; the message names the key. Every
/// component's settings parser returns it, so the node's configuration reports them alike.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid configuration: {key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}
