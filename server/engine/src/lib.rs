//! Rebound's engine, on the storage contract: the enqueue path (`writer`), dispatch and the
//! executor protocol (`dispatch`), push delivery (`push`), the lease ring (`ring`,
//! `ownership`, `peers`), the compactor, compensation chains (`saga`), dependency holds
//! (`holds`), per-service settings (`services`), request checks (`validate`) and the one
//! mapping of errors to gRPC codes (`error`). It knows no store implementation, no
//! configuration file and no server: the node (`rebound-server`) builds each component from
//! its options and serves it. See docs/architecture.md, "Crates and module map".

pub mod admin;
mod backlog;
pub mod clock_sync;
pub mod compactor;
pub mod dispatch;
pub mod engine;
pub mod error;
pub mod guard;
pub mod handle;
mod holds;
pub mod metric_definitions;
pub mod names;
mod outcome;
pub mod ownership;
mod peers;
pub mod policy;
pub mod push;
pub mod ring;
pub mod saga;
pub mod services;
pub mod shared_settings;
pub mod spans;
pub mod timer;
pub mod trace_context;
mod txlock;
pub mod validate;
mod walk;
pub mod window;
pub mod wire;
pub mod writer;
