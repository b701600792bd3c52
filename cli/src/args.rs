//! The command line: global flags, commands and their arguments.

use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand};
use rebound_proto::v1 as pb;

use crate::render::{
    duration_to_proto, parse_compensation, parse_duration, parse_key_value, parse_time,
};

const TOP_AFTER_HELP: &str = "\
Durations: 1500ms, 30s, 5m, 1h, 1h 30m (a bare number is seconds). Times: RFC 3339, e.g.
2026-11-30T06:10:00Z, or `now`.

Output: aligned tables; with --json one JSON document on stdout (timestamps RFC 3339,
durations in seconds, enums by name, generations and tokens as strings, unset as null).

Exit codes:
  0  success
  1  unexpected or internal error
  2  usage error (bad flags, or a confirmation refused: --yes missing)
  3  NOT_FOUND
  4  INVALID_ARGUMENT: the node refused the input (the message names the field)
  5  UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED or cannot connect: safe to retry
  6  ALREADY_EXISTS or FAILED_PRECONDITION
  7  UNIMPLEMENTED: the node does not offer this call
  8  UNAUTHENTICATED or PERMISSION_DENIED: a missing, unknown or too narrow --token
Errors go to stderr as `rebound: CODE: message` (with --json also as
{\"error\": {\"code\": ..., \"message\": ...}} on stdout).

Examples:
  rebound enqueue orders order-42/charge --payload '{\"order\":42}' --delay 30s --attempt 1
  rebound get orders order-42/charge --json
  rebound stats
  rebound --addr rebound-1:50051 dlq redrive orders --error-contains 'gateway: 503'";

/// Operate a Rebound cluster: enqueue and inspect retries, pause services, set their retry
/// policy and dispatch limits, purge them, work the dead-letter queue, look at the ring and
/// the stored windows.
#[derive(Parser, Debug)]
#[command(name = "rebound", version, after_help = TOP_AFTER_HELP)]
pub struct Cli {
    /// The node to talk to: http://host:port, or host:port for plain-text HTTP/2;
    /// https://host:port for TLS (implied by --ca-file or --cert-file).
    #[arg(
        long,
        env = "REBOUND_ADDR",
        default_value = "http://127.0.0.1:50051",
        global = true
    )]
    pub addr: String,

    /// Print one JSON document on stdout instead of tables.
    #[arg(long, global = true)]
    pub json: bool,

    /// How long to wait for the connection and for each call (purge and redrive: each batch).
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration, global = true)]
    pub timeout: Duration,

    /// Bearer token for a node with credentials (REBOUND_CREDENTIALS_FILE on the node); admin
    /// commands need an admin credential.
    #[arg(long, env = "REBOUND_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,

    /// TLS: the CA certificates (PEM) to verify the node with, instead of the system's roots.
    #[arg(long, env = "REBOUND_CA_FILE", global = true)]
    pub ca_file: Option<std::path::PathBuf>,

    /// Mutual TLS: this client's certificate chain (PEM), with --key-file.
    #[arg(long, env = "REBOUND_CERT_FILE", global = true, requires = "key_file")]
    pub cert_file: Option<std::path::PathBuf>,

    /// Mutual TLS: the private key (PEM) of --cert-file.
    #[arg(long, env = "REBOUND_KEY_FILE", global = true, requires = "cert_file")]
    pub key_file: Option<std::path::PathBuf>,

    /// TLS: the name to verify the node's certificate against, when it is not the host of
    /// --addr.
    #[arg(long, global = true)]
    pub tls_server_name: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Schedule a retry of a transaction (EnqueueRetry).
    #[command(after_help = "\
With neither --delay nor --due the policy's backoff for --attempt decides. The due time is
rounded up to the window grid and never lands in the current window. Enqueueing a pending
transaction again reschedules or confirms it (deduplicated: true).

Examples:
  rebound enqueue orders order-42/charge --payload '{\"order\":42}' --delay 30s --attempt 1 \\
      --last-error 'payment gateway: 503' --attr step=charge
  rebound enqueue orders order-43 --payload-file body.json --due 2026-11-30T07:00:00Z
  rebound enqueue orders order-44 --max-attempts 10 --initial-backoff 2s --non-retryable http.400")]
    Enqueue(Box<EnqueueArgs>),

    /// Show one retry: status, attempt, due time, last error, payload, history (GetRetry).
    #[command(after_help = "\
Exit code 3 when there is no such retry.

Examples:
  rebound get orders order-42/charge
  rebound get orders order-42/charge --json | jq -r .status")]
    Get(TransactionArgs),

    /// What each attempt of one retry did: when it ran, where, how long, how it ended (GetRetry).
    #[command(after_help = "\
Oldest first: the first attempt and the most recent ones (at most 10), with a count of those
not kept between them. OUTCOME is SUCCEEDED, RETRY, FAILED, DEADLINE_EXPIRED, HELD or SNOOZED
(the last two use no attempt), or an operator's RUN_NOW, RESCHEDULED, CANCELLED or DEAD_LETTERED
(`rebound act`: EXECUTOR names who, ERROR the reason). Exit code 3 when there is no such retry.

Examples:
  rebound history orders order-42/charge
  rebound history orders order-42/charge --json | jq -r '.attempts[].error'")]
    History(TransactionArgs),

    /// A service's retries by status (scheduled by default), filtered, oldest first (ListRetries).
    #[command(after_help = "\
Follows page tokens until --limit retries are shown; with --json, next_page_token (null on the
last page) can be passed back as --page-token. --status scheduled (the default), in-flight,
dead, succeeded and cancelled can be given, listed in that order; in-flight ones come with the
node and executor that have them; succeeded and cancelled ones in the order they finished,
while the terminal TTL keeps them.

Examples:
  rebound list orders --attr customer=42
  rebound list orders --status dead --error 'card declined' --json
  rebound list orders --status in-flight
  rebound list orders --status succeeded --attr customer=42
  rebound list orders --due-before 2026-12-07T00:00:00Z")]
    List(Box<ListArgs>),

    /// Run now, reschedule, cancel or dead-letter the scheduled retries a listing's filters
    /// (or --id) select (ActOnRetries).
    #[command(after_help = "\
Acts on the SCHEDULED retries that `rebound list` with the same filters shows, a call's worth at
a time (1,000 retries) until none is left, at --max-per-second. Each is acted on only while it
still matches; one already as the action leaves it, or changed meanwhile, is skipped. Each
change is recorded in the retry's history (`rebound history`), with --reason. cancel and
dead-letter cannot be undone, so they need --yes (without it: exit code 2).

Examples:
  rebound act orders run-now --error 'gateway timeout'
  rebound act orders reschedule --in 2h --dependency payments-gateway --reason 'maintenance'
  rebound act orders cancel --attr customer=42 --yes
  rebound act orders dead-letter --id order-42/charge --yes")]
    Act(Box<ActArgs>),

    /// Cancel a pending retry (CancelRetry).
    #[command(after_help = "\
Cancelling a retry that already finished is not an error: the output shows its final status and
cancelled: false. Exit code 3 when there is no such retry.

Example:
  rebound cancel orders order-42/charge")]
    Cancel(TransactionArgs),

    /// Receive a service's due retries, print each and acknowledge it (Subscribe, Ack).
    #[command(after_help = "\
A stand-in executor, for trying Rebound and for scripts: it opens a Subscribe stream to the
node, prints each delivery as it arrives and acks it with --outcome. It stops after --count
deliveries, after --wait without one, or on Ctrl-C. With several nodes, it receives only the
retries of the node it talks to (an SDK executor subscribes to every node).

Examples:
  rebound subscribe orders --count 1 --wait 60s
  rebound subscribe orders --outcome retry --retry-after 10s --error 'still down'")]
    Subscribe(SubscribeArgs),

    /// Pending retries by due band, in-flight and dead-lettered counts, and the nodes (GetStats).
    #[command(after_help = "\
Bands: OVERDUE (its window has closed: waiting for a subscriber, a limit or a resume), then due
within a minute, an hour, a day, or later. PENDING counts pointers in the directory, an upper
bound. OLDEST_OVERDUE is the age of the oldest overdue window. --json adds the per-window counts.

Examples:
  rebound stats
  rebound stats orders --json")]
    Stats {
        /// Only this service (default: every service).
        service: Option<String>,
    },

    /// Every known service with its pause state, stored policy and limits (ListServices).
    #[command(
        after_help = "Example:\n  rebound services --json | jq -r '.services[] | select(.paused) | .service'"
    )]
    Services,

    /// Stop dispatching a service's retries on every node; enqueues keep working (PauseService).
    #[command(after_help = "Example:\n  rebound pause orders")]
    Pause {
        /// The service to pause.
        service: String,
    },

    /// Resume dispatching a paused service (ResumeService).
    #[command(after_help = "Example:\n  rebound resume orders")]
    Resume {
        /// The service to resume.
        service: String,
    },

    /// Show or replace a service's default retry policy.
    #[command(subcommand)]
    Policy(PolicyCommand),

    /// Show or replace a service's dispatch limits.
    #[command(subcommand)]
    Limits(LimitsCommand),

    /// Set, show or clear a service's push target: its retries POSTed to an HTTP endpoint.
    #[command(subcommand)]
    PushTarget(PushTargetCommand),

    /// List, set or release dependency holds: retries naming a held dependency wait without
    /// using attempts.
    #[command(subcommand)]
    Holds(HoldsCommand),

    /// Cancel every retry of a service scheduled before now and delete its buckets (PurgeService).
    #[command(after_help = "\
Calls PurgeService in batches of --batch buckets, keeping the first call's cut-off time, until
the node reports done. Retries enqueued after the cut-off are kept. It cannot be undone, so it
needs --yes (without it: exit code 2). Interrupted, it can be resumed with the same --before
(shown in the output).

Examples:
  rebound purge orders --yes
  rebound purge orders --yes --before 2026-11-30T06:00:00Z --batch 1000")]
    Purge(PurgeArgs),

    /// The dead-letter queue: list, redrive, purge.
    #[command(subcommand)]
    Dlq(DlqCommand),

    /// The lease ring: nodes, addresses, the compactor (Node-0) and token ranges (GetRing).
    #[command(after_help = "Examples:\n  rebound ring\n  rebound ring --json")]
    Ring,

    /// The stored directory of one window, tier by tier (InspectWindow).
    #[command(after_help = "\
DAY is a UTC date, WINDOW the window's index within the day (the `location` of
`rebound get` shows both for a pending retry).

Example:
  rebound inspect-window 2026-11-30 370")]
    InspectWindow {
        /// UTC day, YYYY-MM-DD.
        day: String,
        /// Window index within the day (0 .. 86400 / window seconds - 1).
        window: u32,
    },
}

#[derive(Args, Debug)]
pub struct SubscribeArgs {
    /// The service whose retries to receive.
    pub service: String,

    /// Stop after this many deliveries (0: until --wait or Ctrl-C).
    #[arg(long, default_value_t = 0)]
    pub count: u32,

    /// Stop when no delivery has arrived for this long (with --count: an error, exit code 5).
    #[arg(long, value_parser = parse_duration)]
    pub wait: Option<Duration>,

    /// How to acknowledge each delivery.
    #[arg(long, value_enum, default_value_t = AckOutcomeArg::Succeeded)]
    pub outcome: AckOutcomeArg,

    /// With --outcome retry: the delay before the next attempt (default: the policy's backoff).
    #[arg(long, value_parser = parse_duration)]
    pub retry_after: Option<Duration>,

    /// With --outcome retry or failed: the error recorded with the retry.
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,

    /// Deliveries held unacknowledged at once (the stream's max_in_flight).
    #[arg(long, default_value_t = 16)]
    pub max_in_flight: u32,

    /// The executor id the node sees (default: rebound-cli-<pid>).
    #[arg(long)]
    pub executor_id: Option<String>,
}

/// A status `rebound list` lists.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListStatusArg {
    Scheduled,
    InFlight,
    Dead,
    Succeeded,
    Cancelled,
}

impl ListStatusArg {
    pub fn to_proto(self) -> pb::RetryStatus {
        match self {
            ListStatusArg::Scheduled => pb::RetryStatus::Scheduled,
            ListStatusArg::InFlight => pb::RetryStatus::InFlight,
            ListStatusArg::Dead => pb::RetryStatus::Dead,
            ListStatusArg::Succeeded => pb::RetryStatus::Succeeded,
            ListStatusArg::Cancelled => pb::RetryStatus::Cancelled,
        }
    }
}

/// The outcome `rebound subscribe` acks with.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckOutcomeArg {
    Succeeded,
    Retry,
    Failed,
}

impl AckOutcomeArg {
    pub fn to_proto(self) -> pb::AckOutcome {
        match self {
            AckOutcomeArg::Succeeded => pb::AckOutcome::Succeeded,
            AckOutcomeArg::Retry => pb::AckOutcome::Retry,
            AckOutcomeArg::Failed => pb::AckOutcome::Failed,
        }
    }
}

#[derive(Args, Debug)]
pub struct TransactionArgs {
    /// The service.
    pub service: String,
    /// The transaction id (the idempotency key).
    pub transaction_id: String,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// The service.
    pub service: String,
    /// Which retries, repeatable: scheduled (the default; the ones in flight included),
    /// in-flight (delivered and awaiting their ack, on any node), dead, succeeded, cancelled.
    #[arg(long = "status", value_enum, value_name = "STATUS")]
    pub statuses: Vec<ListStatusArg>,
    #[command(flatten)]
    pub filter: RetryFilterArgs,
    /// At most this many retries (0: no limit).
    #[arg(long, default_value_t = 100)]
    pub limit: u64,
    /// Continue a previous listing.
    #[arg(long, value_name = "TOKEN")]
    pub page_token: Option<String>,
}

/// The filters of a listing, which also select the retries of an action.
#[derive(Args, Debug)]
pub struct RetryFilterArgs {
    /// Only retries with this attribute, repeatable (all must match): --attr customer=42.
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub attributes: Vec<(String, String)>,
    /// Only retries whose last error contains this text.
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
    /// Only retries naming this dependency.
    #[arg(long)]
    pub dependency: Option<String>,
    /// Only the step and the compensations of this saga (its step's transaction id).
    #[arg(long, value_name = "TRANSACTION_ID")]
    pub saga: Option<String>,
    /// Only retries due at or after this time (RFC 3339, or `now`).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub due_after: Option<prost_types::Timestamp>,
    /// Only retries due before this time (RFC 3339, or `now`).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub due_before: Option<prost_types::Timestamp>,
}

impl RetryFilterArgs {
    /// A ListRetries request of `service` with these filters.
    pub fn request(&self, service: &str) -> rebound_proto::v1::ListRetriesRequest {
        rebound_proto::v1::ListRetriesRequest {
            service: service.to_string(),
            due_after: self.due_after,
            due_before: self.due_before,
            attributes: self.attributes.iter().cloned().collect(),
            dependency: self.dependency.clone().unwrap_or_default(),
            error_contains: self.error.clone().unwrap_or_default(),
            saga_transaction_id: self.saga.clone().unwrap_or_default(),
            ..Default::default()
        }
    }
}

/// What `rebound act` does to each selected retry.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum ActionArg {
    /// Due at once, no attempt used.
    RunNow,
    /// Due at --at or after --in, no attempt used.
    Reschedule,
    /// As `rebound cancel`.
    Cancel,
    /// Ended DEAD with a dead letter (a saga step's compensations start).
    DeadLetter,
}

#[derive(Args, Debug)]
pub struct ActArgs {
    /// The service.
    pub service: String,
    /// What to do with each selected retry.
    #[arg(value_enum)]
    pub action: ActionArg,
    /// Only these retries (repeatable), each still only while it matches the filters.
    #[arg(long = "id", value_name = "TRANSACTION_ID")]
    pub ids: Vec<String>,
    #[command(flatten)]
    pub filter: RetryFilterArgs,
    /// reschedule: the new due time (RFC 3339, or `now`).
    #[arg(long, value_parser = parse_time, value_name = "TIME", conflicts_with = "after")]
    pub at: Option<prost_types::Timestamp>,
    /// reschedule: due after this delay from now.
    #[arg(long = "in", value_parser = parse_duration, value_name = "DURATION")]
    pub after: Option<Duration>,
    /// Why; recorded in each retry's history.
    #[arg(long, default_value = "")]
    pub reason: String,
    /// Retries per second at most (1-100,000).
    #[arg(long, default_value_t = 500)]
    pub max_per_second: u32,
    /// Confirm a cancel or a move to the dead letters (they cannot be undone).
    #[arg(long)]
    pub yes: bool,
}

#[derive(Args, Debug)]
pub struct EnqueueArgs {
    /// The service whose executors will run the retry.
    pub service: String,
    /// The transaction id: the idempotency key.
    pub transaction_id: String,

    /// The payload handed to the executor, as text.
    #[arg(long, conflicts_with = "payload_file")]
    pub payload: Option<String>,

    /// Read the payload from a file (`-`: standard input).
    #[arg(long, value_name = "PATH")]
    pub payload_file: Option<PathBuf>,

    /// An attribute, repeatable: --attr step=charge --attr region=eu.
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub attributes: Vec<(String, String)>,

    /// Due after this delay (rounded up to the window grid).
    #[arg(long, value_parser = parse_duration, conflicts_with = "due")]
    pub delay: Option<Duration>,

    /// Due at this time (RFC 3339).
    #[arg(long, value_parser = parse_time)]
    pub due: Option<prost_types::Timestamp>,

    /// Attempts already made before this enqueue: the call that just failed, 1 unless given,
    /// as in every SDK (0: none made, the first delivery is attempt 1).
    #[arg(long, default_value_t = 1)]
    pub attempt: u32,

    /// The error of the last attempt.
    #[arg(long, value_name = "TEXT")]
    pub last_error: Option<String>,

    /// The downstream dependency the retry waits on (held retries wait without using an
    /// attempt; see `rebound holds`).
    #[arg(long, value_name = "NAME")]
    pub dependency: Option<String>,

    /// A compensation of this saga step, as SERVICE=TRANSACTION_ID (no payload), repeated in
    /// the order they run: the first is enqueued when the retry ends DEAD, each next one once
    /// the one before it succeeded.
    #[arg(long = "compensation", value_name = "SERVICE=TRANSACTION_ID", value_parser = parse_compensation)]
    pub compensations: Vec<(String, String)>,

    #[command(
        flatten,
        next_help_heading = "Policy overrides (unset: the service default)"
    )]
    pub policy: PolicyArgs,
}

/// Retry policy fields; every one optional.
#[derive(Args, Debug, Default, Clone)]
pub struct PolicyArgs {
    /// Total attempts, counting the caller's own first try (at least 1).
    #[arg(long, value_name = "N", conflicts_with = "unlimited_attempts")]
    pub max_attempts: Option<u32>,

    /// Retry with no limit on attempts (--max-retry-duration, when set, still applies).
    #[arg(long)]
    pub unlimited_attempts: bool,

    /// Delay before the first retry.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub initial_backoff: Option<Duration>,

    /// Cap on any single delay.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_backoff: Option<Duration>,

    /// Growth factor between attempts (at least 1).
    #[arg(long, value_name = "FACTOR")]
    pub multiplier: Option<f64>,

    /// Random spread of each delay as a fraction in [0, 1]: 0.2 means ±20 %.
    #[arg(long, value_name = "FRACTION")]
    pub jitter: Option<f64>,

    /// Stop retrying this long after the first enqueue.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_retry_duration: Option<Duration>,

    /// How long an executor has to acknowledge a delivery.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub ack_timeout: Option<Duration>,

    /// Ack-deadline expiries one attempt may use before it counts as failed.
    #[arg(long, value_name = "N")]
    pub max_deliveries_per_attempt: Option<u32>,

    /// An error class not worth retrying (dead-letters at once), repeatable.
    #[arg(long = "non-retryable", value_name = "CLASS")]
    pub non_retryable: Vec<String>,
}

impl PolicyArgs {
    pub fn is_empty(&self) -> bool {
        self.to_proto() == pb::RetryPolicy::default()
    }

    pub fn to_proto(&self) -> pb::RetryPolicy {
        pb::RetryPolicy {
            max_attempts: self.max_attempts,
            initial_backoff: self.initial_backoff.map(duration_to_proto),
            max_backoff: self.max_backoff.map(duration_to_proto),
            multiplier: self.multiplier,
            jitter: self.jitter,
            max_retry_duration: self.max_retry_duration.map(duration_to_proto),
            ack_timeout: self.ack_timeout.map(duration_to_proto),
            max_deliveries_per_attempt: self.max_deliveries_per_attempt,
            non_retryable_error_classes: self.non_retryable.clone(),
            unlimited_attempts: self.unlimited_attempts.then_some(true),
        }
    }
}

#[path = "args_admin.rs"]
mod admin;
pub use admin::*;

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        Err("must be more than zero".into())
    } else {
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_bare_host_port_and_global_flags_after_the_command() {
        let cli = Cli::try_parse_from([
            "rebound",
            "get",
            "orders",
            "o-1",
            "--addr",
            "10.0.0.1:50051",
            "--json",
            "--timeout",
            "1500ms",
        ])
        .unwrap();
        assert_eq!(cli.addr, "10.0.0.1:50051");
        assert!(cli.json);
        assert_eq!(cli.timeout, Duration::from_millis(1500));
    }

    #[test]
    fn policy_flags_build_the_message() {
        let cli = Cli::try_parse_from([
            "rebound",
            "policy",
            "set",
            "orders",
            "--max-attempts",
            "3",
            "--initial-backoff",
            "1500ms",
            "--jitter",
            "0.1",
            "--non-retryable",
            "http.400",
            "--non-retryable",
            "http.404",
        ])
        .unwrap();
        let Command::Policy(PolicyCommand::Set { service, policy }) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(service, "orders");
        let p = policy.to_proto();
        assert_eq!(p.max_attempts, Some(3));
        assert_eq!(
            p.initial_backoff,
            Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000
            })
        );
        assert_eq!(p.jitter, Some(0.1));
        assert_eq!(p.unlimited_attempts, None);
        assert_eq!(p.non_retryable_error_classes, ["http.400", "http.404"]);
        assert!(!policy.is_empty());
        assert!(PolicyArgs::default().is_empty());
    }

    #[test]
    fn enqueue_counts_the_failed_call_as_attempt_1_unless_told() {
        let attempt = |extra: &[&str]| {
            let args = ["rebound", "enqueue", "orders", "o1"].iter().chain(extra);
            match Cli::try_parse_from(args).unwrap().command {
                Command::Enqueue(a) => a.attempt,
                other => panic!("parsed as {other:?}"),
            }
        };
        // As every SDK fills it in: the first delivery is then attempt 2.
        assert_eq!(attempt(&[]), 1);
        assert_eq!(attempt(&["--attempt", "0"]), 0);
        assert_eq!(attempt(&["--attempt", "4"]), 4);
    }

    #[test]
    fn conflicting_flags_are_usage_errors() {
        for args in [
            &[
                "rebound", "enqueue", "s", "t", "--delay", "1s", "--due", "now",
            ][..],
            &[
                "rebound",
                "enqueue",
                "s",
                "t",
                "--payload",
                "x",
                "--payload-file",
                "f",
            ],
            &[
                "rebound",
                "policy",
                "set",
                "s",
                "--max-attempts",
                "3",
                "--unlimited-attempts",
            ],
            &["rebound", "enqueue", "s", "t", "--delay", "soon"],
            &["rebound", "enqueue", "s", "t", "--attr", "novalue"],
            &["rebound", "get", "s", "t", "--timeout", "0s"],
            // A push target needs a URL and a secret.
            &["rebound", "push-target", "set", "s", "--secret", "whsec_x"],
            &[
                "rebound",
                "push-target",
                "set",
                "s",
                "--url",
                "https://h.example/",
            ],
            &[
                "rebound",
                "push-target",
                "set",
                "s",
                "--url",
                "https://h.example/",
                "--secret",
                "whsec_x",
                "--header",
                "novalue",
            ],
            &["rebound", "push-target", "get"],
        ] {
            let e = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
        }
    }

    #[test]
    fn push_target_flags_build_the_message() {
        let cli = Cli::try_parse_from([
            "rebound",
            "push-target",
            "set",
            "orders",
            "--url",
            "https://hooks.example.com/rebound",
            "--request-timeout",
            "2m",
            "--header",
            "Authorization=Bearer a=b",
            "--header",
            "X-Tenant=7",
            "--secret",
            "whsec_new",
            "--secret",
            "whsec_old",
            "--max-concurrent",
            "16",
            // The global call timeout is another flag.
            "--timeout",
            "5s",
        ])
        .unwrap();
        assert_eq!(cli.timeout, Duration::from_secs(5));
        let Command::PushTarget(PushTargetCommand::Set(a)) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(a.service, "orders");
        let t = a.to_proto().unwrap();
        assert_eq!(t.url, "https://hooks.example.com/rebound");
        assert_eq!(
            t.timeout,
            Some(prost_types::Duration {
                seconds: 120,
                nanos: 0
            })
        );
        assert_eq!(t.headers.len(), 2);
        assert_eq!(t.headers["Authorization"], "Bearer a=b");
        assert_eq!(t.headers["X-Tenant"], "7");
        assert_eq!(t.signing_secrets, ["whsec_new", "whsec_old"]);
        assert_eq!(t.max_concurrent, Some(16));

        // Unset: the node's defaults.
        let cli = Cli::try_parse_from([
            "rebound",
            "push-target",
            "set",
            "orders",
            "--url",
            "http://h.example/",
            "--secret",
            "whsec_x",
        ])
        .unwrap();
        let Command::PushTarget(PushTargetCommand::Set(a)) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        let t = a.to_proto().unwrap();
        assert_eq!((t.timeout, t.max_concurrent), (None, None));
        assert!(t.headers.is_empty());

        // A header twice is refused before anything is sent.
        let cli = Cli::try_parse_from([
            "rebound",
            "push-target",
            "set",
            "orders",
            "--url",
            "http://h.example/",
            "--secret",
            "whsec_x",
            "--header",
            "X-A=1",
            "--header",
            "X-A=2",
        ])
        .unwrap();
        let Command::PushTarget(PushTargetCommand::Set(a)) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert!(a.to_proto().unwrap_err().contains("twice"));

        for (args, want) in [
            (["rebound", "push-target", "get", "orders"], "get"),
            (["rebound", "push-target", "clear", "orders"], "clear"),
        ] {
            let cli = Cli::try_parse_from(args).unwrap();
            match (cli.command, want) {
                (Command::PushTarget(PushTargetCommand::Get { service }), "get")
                | (Command::PushTarget(PushTargetCommand::Clear { service }), "clear") => {
                    assert_eq!(service, "orders")
                }
                (other, _) => panic!("{args:?} parsed as {other:?}"),
            }
        }
    }
}
