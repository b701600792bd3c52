//! Push delivery (docs/architecture.md, "Push delivery"): a service given a push target has its
//! due retries POSTed to an HTTP endpoint by the node that owns them, instead of streamed to
//! executors.
//!
//! - The target itself (its validation, secrets and masked form) is a service setting:
//!   `services::push_target`.
//! - `sign`: the Standard Webhooks signature of one request.
//! - Which addresses a request may reach (`REBOUND_PUSH_ALLOW`) is `crate::guard`'s, shared
//!   with the check SetPushTarget makes.
//! - `client`: one POST to a vetted address, with a timeout.
//! - `outcome`: what a response (or its absence) means for the retry.

pub mod client;
pub mod outcome;
pub mod pusher;
pub mod sign;

pub use pusher::{PushOptions, Pusher};
