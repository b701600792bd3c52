//! The arguments of the service and admin subcommands: policy, limits, holds, push target,
//! purge and the dead letters (`rebound policy|limits|holds|push-target|purge|dlq`).

use super::*;

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    /// Show the service's stored policy and the effective one (node defaults merged in).
    #[command(after_help = "Example:\n  rebound policy get orders")]
    Get {
        /// The service.
        service: String,
    },
    /// Replace the service's stored default policy as a whole (SetServicePolicy).
    #[command(
        allow_negative_numbers = true,
        after_help = "\
The stored policy is replaced as a whole: a field not given here is no longer set for the service
and falls back to the node default. It applies to enqueues made afterwards; an enqueue's own
policy fields still win. `policy set SERVICE` with no flags clears the service's policy.

Examples:
  rebound policy set orders --max-attempts 8 --initial-backoff 2s --max-backoff 10m --jitter 0.1
  rebound policy set orders --unlimited-attempts --max-retry-duration 24h --non-retryable http.400"
    )]
    Set {
        /// The service.
        service: String,
        #[command(flatten)]
        policy: PolicyArgs,
    },
}

#[derive(Subcommand, Debug)]
pub enum LimitsCommand {
    /// Show the service's dispatch limits (GetService).
    #[command(after_help = "Example:\n  rebound limits get orders")]
    Get {
        /// The service.
        service: String,
    },
    /// Replace the service's dispatch limits as a whole (SetServiceLimits).
    #[command(
        allow_negative_numbers = true,
        after_help = "\
Limits hold across the whole cluster (each node enforces its share). A limit not given is
unlimited: `limits set SERVICE` with no flags removes every limit.

Examples:
  rebound limits set orders --rate 100 --burst 20 --max-concurrent 50
  rebound limits set orders --max-concurrent 10"
    )]
    Set {
        /// The service.
        service: String,
        /// Deliveries started per second (token bucket).
        #[arg(long, value_name = "PER_SECOND")]
        rate: Option<f64>,
        /// Deliveries that may start at once after an idle spell (default: one second's worth).
        #[arg(long, value_name = "N")]
        burst: Option<u32>,
        /// Unacknowledged deliveries at once.
        #[arg(long, value_name = "N")]
        max_concurrent: Option<u32>,
    },
}

#[derive(Subcommand, Debug)]
pub enum HoldsCommand {
    /// The holds in force (ListDependencyHolds).
    List,
    /// Hold a dependency for --duration from now, replacing a hold in force (HoldDependency).
    #[command(after_help = "\
No retry naming the dependency (enqueued with --dependency) is delivered, in any service, until
the hold ends, and none uses an attempt. Then one probe delivery goes first: if it succeeds the
rest follow at a ramping rate; if it is acked RETRY the hold renews.

Example:
  rebound holds set payments-gateway --duration 5m --reason 'gateway maintenance'")]
    Set {
        /// The dependency (the rules of a service name, 1-128 characters).
        dependency: String,
        /// How long, from now: 1s to 24h.
        #[arg(long, value_parser = parse_duration)]
        duration: std::time::Duration,
        /// Why (listed with the hold).
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
    },
    /// End a hold now (ReleaseDependency).
    Release {
        /// The dependency.
        dependency: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum PushTargetCommand {
    /// Replace the service's push target as a whole (SetPushTarget).
    #[command(after_help = "\
The service's retries are then POSTed to --url by the node that owns them, signed per Standard
Webhooks, instead of going to Subscribe streams. A 2xx answer is SUCCEEDED; 408, 409, 429, 5xx, a
timeout or a connection error RETRY (Retry-After sets the delay); a redirect or any other 4xx
FAILED. Applies on every node within the settings refresh interval.

A secret is whsec_ and the base64 of 24-64 random bytes; give two while rotating (each request
is signed with both). The answer shows each secret and header value masked. --request-timeout is how long one
request may take (1s-30m, default 30s); --timeout stays the CLI's own call timeout.

Examples:
  rebound push-target set orders --url https://hooks.example.com/rebound \\
      --secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw --header 'Authorization=Bearer abc'
  rebound push-target set orders --url https://hooks.example.com/rebound \\
      --secret whsec_NEW... --secret whsec_OLD... --request-timeout 2m --max-concurrent 16")]
    Set(PushTargetArgs),
    /// Show the service's push target, secrets and header values masked (GetPushTarget).
    #[command(after_help = "\
Exit code 3 when the service has no push target.

Example:
  rebound push-target get orders")]
    Get {
        /// The service.
        service: String,
    },
    /// Remove the service's push target: its retries go to Subscribe streams again
    /// (ClearPushTarget).
    #[command(after_help = "\
Clearing a service that has no push target is not an error: the output says cleared: no.

Example:
  rebound push-target clear orders")]
    Clear {
        /// The service.
        service: String,
    },
}

#[derive(Args, Debug)]
pub struct PushTargetArgs {
    /// The service.
    pub service: String,
    /// Where requests go: http:// or https://, no user name or password.
    #[arg(long)]
    pub url: String,
    /// How long one request may take, 1s-30m (default on the node: 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub request_timeout: Option<Duration>,
    /// A header added to every request, repeatable: --header 'Authorization=Bearer abc'.
    #[arg(long = "header", value_name = "NAME=VALUE", value_parser = parse_key_value)]
    pub headers: Vec<(String, String)>,
    /// A signing secret (whsec_...), required; repeat once to sign with two while rotating.
    #[arg(long = "secret", value_name = "SECRET", required = true)]
    pub secrets: Vec<String>,
    /// Requests in flight at once to the target from one node, 1-1,000 (default on the node: 64).
    #[arg(long, value_name = "N")]
    pub max_concurrent: Option<u32>,
}

impl PushTargetArgs {
    /// The target to send; a header given twice is a usage error.
    pub fn to_proto(&self) -> Result<pb::PushTarget, String> {
        let mut headers = std::collections::HashMap::new();
        for (k, v) in &self.headers {
            if headers.insert(k.clone(), v.clone()).is_some() {
                return Err(format!("--header {k:?} is given twice"));
            }
        }
        Ok(pb::PushTarget {
            url: self.url.clone(),
            timeout: self.request_timeout.map(duration_to_proto),
            headers,
            signing_secrets: self.secrets.clone(),
            max_concurrent: self.max_concurrent,
            updated_at: None,
        })
    }
}

#[derive(Args, Debug)]
pub struct PurgeArgs {
    /// The service to purge.
    pub service: String,
    /// Confirm: cancel the retries and delete their buckets.
    #[arg(long)]
    pub yes: bool,
    /// Buckets per call (1-10,000).
    #[arg(long, default_value_t = 100, value_name = "BUCKETS")]
    pub batch: u32,
    /// Cut-off: retries scheduled before it are purged (default: now, as the node sees it).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub before: Option<prost_types::Timestamp>,
}

/// Which dead letters: by the time they died and their last error.
#[derive(Args, Debug, Clone)]
pub struct DeadLetterFilter {
    /// The service.
    pub service: String,
    /// Died at or after this time (default: the start of the retention period).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub from: Option<prost_types::Timestamp>,
    /// Died before this time (default: now).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub to: Option<prost_types::Timestamp>,
    /// Only letters whose last error contains this text (case-sensitive).
    #[arg(long, value_name = "TEXT")]
    pub error_contains: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum DlqCommand {
    /// List dead letters, newest pages first as the node returns them (ListDeadLetters).
    #[command(after_help = "\
Follows page tokens until --limit letters are shown; with --json, next_page_token (null on the
last page) can be passed back as --page-token.

Examples:
  rebound dlq list orders --from 2026-11-30T00:00:00Z --error-contains 'gateway: 503'
  rebound dlq list orders --limit 0 --json    # every letter")]
    List {
        #[command(flatten)]
        filter: DeadLetterFilter,
        /// At most this many letters (0: no limit).
        #[arg(long, default_value_t = 100)]
        limit: u64,
        /// Also letters that were redriven already.
        #[arg(long)]
        include_redriven: bool,
        /// Continue a previous listing.
        #[arg(long, value_name = "TOKEN")]
        page_token: Option<String>,
    },
    /// Move matching dead letters back into a future window, attempts reset (RedriveDeadLetters).
    #[command(after_help = "\
First counts the matching letters (ListDeadLetters) for the progress bar, then calls
RedriveDeadLetters in batches until the node reports done. Prints how many were redriven and
how many were skipped (enqueued again meanwhile).

Examples:
  rebound dlq redrive orders --error-contains 'gateway: 503' --delay 5m
  rebound dlq redrive orders --from 2026-11-30T00:00:00Z --to 2026-11-30T06:00:00Z --rate 100")]
    Redrive {
        #[command(flatten)]
        filter: DeadLetterFilter,
        /// Delay before the redriven retries become due (rounded up to the next window).
        #[arg(long, default_value = "0s", value_parser = parse_duration, value_name = "DURATION")]
        delay: Duration,
        /// Redrives started per second (1-100,000).
        #[arg(long, default_value_t = 500, value_name = "PER_SECOND")]
        rate: u32,
        /// Letters per call (1-100,000).
        #[arg(long, default_value_t = 1000, value_name = "N")]
        batch: u32,
    },
    /// Delete matching dead letters (PurgeDeadLetters).
    #[command(after_help = "\
It cannot be undone, so it needs --yes (without it: exit code 2).

Example:
  rebound dlq purge orders --to 2026-11-01T00:00:00Z --yes")]
    Purge {
        /// The service.
        service: String,
        /// Died at or after this time.
        #[arg(long, value_parser = parse_time, value_name = "TIME")]
        from: Option<prost_types::Timestamp>,
        /// Died before this time.
        #[arg(long, value_parser = parse_time, value_name = "TIME")]
        to: Option<prost_types::Timestamp>,
        /// Confirm the deletion.
        #[arg(long)]
        yes: bool,
    },
}
