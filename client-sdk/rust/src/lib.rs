//! Typed Rust client for Rebound, retry-as-a-service over gRPC.
//!
//! A producer that hits a transient failure hands the work to Rebound with
//! [`Client::enqueue`] and goes back to serving traffic; Rebound delivers it to the service's
//! executors when it is due, backing off between attempts according to a [`RetryPolicy`].
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use rebound_client::{Client, RetryPolicy, RetryStatus};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), rebound_client::Error> {
//!     // One client per process; clones share the connection. A node started with
//!     // credentials (REBOUND_CREDENTIALS_FILE) needs `.with_token(token)?` here.
//!     let client = Client::connect("http://127.0.0.1:50051").await?;
//!
//!     // The charge failed once with a timeout: try again in 30 s, then back off
//!     // 30 s, 60 s, 120 s, ... capped at 10 min, for at most 8 attempts in total.
//!     let enqueued = client
//!         .enqueue("payments", "charge-7f3a")
//!         .payload(br#"{"order":"7f3a","amount_cents":1200}"#.to_vec())
//!         .attribute("tenant", "acme")
//!         .attributes([("region", "eu-west-1"), ("source", "checkout")])
//!         .attempt(1)
//!         .last_error("card processor timed out")
//!         .delay(Duration::from_secs(30))
//!         .policy(
//!             RetryPolicy::new()
//!                 .max_attempts(8)
//!                 .initial_backoff(Duration::from_secs(30))
//!                 .max_backoff(Duration::from_secs(600)),
//!         )
//!         .send()
//!         .await?;
//!     println!(
//!         "due at {:?} (generation {}, deduplicated: {})",
//!         enqueued.due_time, enqueued.generation, enqueued.deduplicated
//!     );
//!
//!     let retry = client.get("payments", "charge-7f3a").await?;
//!     assert_eq!(retry.status, RetryStatus::Scheduled);
//!     println!("attempt {} of {:?}", retry.attempt, retry.policy.max_attempts);
//!
//!     // The customer paid another way: stop retrying.
//!     let cancelled = client.cancel("payments", "charge-7f3a").await?;
//!     println!("now {} (cancelled by this call: {})", cancelled.status, cancelled.cancelled);
//!     Ok(())
//! }
//! ```
//!
//! # Executing retries
//!
//! The service's workers receive the due retries through an [`Executor`]: it subscribes to
//! every node of the cluster (following the ring as nodes join and leave), runs an async
//! handler per delivery with bounded concurrency, acknowledges each with the
//! handler's [`Outcome`], extends deadlines of long-running handlers, reconnects with backoff
//! and shuts down gracefully. See the [`executor`] module. Besides success, retry and failure,
//! a handler can [snooze](Outcome::snooze) a job (run it again later without using an
//! attempt), and can tag a retry with an [error class](Outcome::with_error_class) such as
//! `"http.404"`, which dead-letters it at once when the policy lists the class among its
//! [`non_retryable_error_classes`](RetryPolicy::non_retryable_error_classes).
//!
//! ```no_run
//! use rebound_client::{Executor, Job, Outcome};
//!
//! # async fn run() -> Result<(), rebound_client::Error> {
//! Executor::builder("http://127.0.0.1:50051", "payments")
//!     .concurrency(8)
//!     .run(
//!         |job: Job| async move {
//!             println!("{} (attempt {})", job.transaction_id, job.attempt);
//!             Outcome::success()
//!         },
//!         tokio::signal::ctrl_c(),
//!     )
//!     .await
//! # }
//! ```
//!
//! # Errors and retrying
//!
//! Every call returns [`Error`]. [`Error::is_retryable`] is true for `UNAVAILABLE`,
//! `DEADLINE_EXCEEDED` and `RESOURCE_EXHAUSTED`, and re-sending is always safe: enqueue is
//! idempotent by `(service, transaction_id)`, so a repeat of an enqueue whose outcome is
//! unknown confirms or reschedules the pending retry (reporting `deduplicated = true`) and never
//! schedules it twice. [`Client::enqueue_batch`] reports each item separately, so one bad item
//! does not fail the others.
//!
//! A node under load sheds calls with `RESOURCE_EXHAUSTED` and a `grpc-retry-pushback-ms`
//! hint before it reads them. The client's calls (enqueue, batch, get, cancel) and the
//! executor's acks make such a call again after the hint (up to half again, so callers shed
//! together do not return together; without a hint, 100 ms doubling to 5 s), at most
//! [`OVERLOAD_ATTEMPTS`] times within [`OVERLOAD_WAIT`], and only then return the error.
//!
//! # Raw API
//!
//! The generated types are re-exported as [`proto`]; [`Client::retry_service`] gives the
//! generated client, [`Client::executor_service`] the generated executor client, and
//! [`Retry::as_proto`] the full `GetRetry` response.

mod client;
mod enqueue;
mod error;
pub mod executor;
mod list;
mod overload;
mod policy;
mod retry;
mod time;
mod trace;
mod transport;

pub use client::Client;
pub use enqueue::{Compensation, EnqueueBuilder, Enqueued, ItemError};
pub use error::Error;
pub use executor::{Executor, ExecutorBuilder, HandlerError, Job, Outcome};
pub use list::{ListFilter, RetryPages, RetrySummary};
pub use overload::{OVERLOAD_ATTEMPTS, OVERLOAD_WAIT};
pub use policy::RetryPolicy;
pub use retry::{Attempt, AttemptOutcome, Cancelled, Chain, ChainStep, Retry, RetryStatus};
pub use transport::{Credentials, Transport, CONNECT_TIMEOUT};

/// The generated `rebound.v1` messages and clients.
pub use rebound_proto::v1 as proto;
/// gRPC status codes, as [`Error::code`] and [`ItemError::code`] report them.
pub use tonic::Code;
