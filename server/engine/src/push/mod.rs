//! Push delivery (docs/architecture.md, "Push delivery"): a service given a push target has its
//! due retries POSTed to an HTTP endpoint by the node that owns them, instead of streamed to
//! executors.
//!
//! - `target`: validation of a `PushTarget` from an admin call, its secrets, its masked form
//!   (`services::push_target`: a push target is a service setting).
//! - `sign`: the Standard Webhooks signature of one request.
//! - `guard`: which addresses a request may reach (`REBOUND_PUSH_ALLOW`).
//! - `client`: one POST to a vetted address, with a timeout.
//! - `outcome`: what a response (or its absence) means for the retry.

pub mod client;
pub mod guard;
pub mod outcome;
pub mod pusher;
pub mod sign;

pub use crate::services::push_target as target;

pub use pusher::{PushOptions, Pusher};
