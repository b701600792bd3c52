//! Node configuration: defaults, then a TOML file, then the environment, then flags, then
//! `validate()`. The environment is passed in as a map so tests control it; the names are part
//! of the contract: docs/operations.md documents them, and deployments set them.

use std::{collections::HashMap, net::SocketAddr, path::Path};

pub use crate::telemetry::LogFormat;
use rebound_engine::policy::Rules as _;
use rebound_store::policy::RetryPolicy;
use rebound_store_cassandra::consistency::{Level, Serial};

mod components;
mod env;
mod tls;

pub use env::ENV_KEYS;

/// Everything a node needs to know to start. Durations are kept in the units of their keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Which store holds the data (`REBOUND_STORE`).
    pub store: StoreKind,
    /// The embedded store's directory (`REBOUND_DATA_DIR`); required with `embedded`.
    pub data_dir: Option<std::path::PathBuf>,
    pub listen: SocketAddr,
    /// The `host:port` other nodes and SDKs use to reach this node (GetRing). Defaults to
    /// `listen`.
    pub advertise: Option<String>,
    pub cassandra_contact_points: Vec<String>,
    pub keyspace: String,
    /// CQL replication map used when the keyspace has to be created.
    pub replication: String,
    pub consistency: String,
    pub serial_consistency: String,
    pub cassandra_request_timeout_ms: u64,
    pub cassandra_connect_timeout_ms: u64,
    /// How long the node keeps trying to reach Cassandra at start before it gives up.
    pub cassandra_startup_wait_ms: u64,
    pub region: String,
    pub cluster: String,
    pub node_id: String,
    pub window_seconds: u32,
    pub skew_margin_ms: u64,
    pub bucket_size: u32,
    pub lanes: u32,
    pub slots: u32,
    pub lease_ttl_ms: u64,
    pub max_payload_bytes: usize,
    pub max_delay_seconds: u64,
    /// How long a terminal state row (SUCCEEDED, DEAD, CANCELLED) is kept.
    pub terminal_ttl_seconds: u32,
    /// At most this many items in one EnqueueRetryBatch.
    pub max_batch_items: usize,
    /// Concurrent enqueues beyond this are shed with RESOURCE_EXHAUSTED.
    pub max_concurrent_writes: usize,
    /// Open `Subscribe` streams on this node; more are refused with RESOURCE_EXHAUSTED.
    pub max_subscribers: usize,
    /// The memory path of dispatch: most retries held in the timer, their bytes, and how far
    /// ahead of their due time (`REBOUND_TIMER_MAX_ENTRIES`, 0: off;
    /// `REBOUND_TIMER_MAX_BYTES`; `REBOUND_TIMER_HORIZON_SECONDS`). Beyond these the window
    /// scan delivers, up to a window plus the margin late.
    pub timer_max_entries: usize,
    pub timer_max_bytes: usize,
    pub timer_horizon_seconds: u64,
    /// Connections open at once on the gRPC port, TLS handshakes included
    /// (`REBOUND_MAX_CONNECTIONS`); one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Streams (calls) open at once on one gRPC connection (`REBOUND_MAX_CONCURRENT_STREAMS`,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// A new connection must have sent the complete headers of its first request this long
    /// after it was accepted (TLS handshake included), and a request's headers must be
    /// complete this long after their first frame; else the connection is closed
    /// (`REBOUND_REQUEST_HEADER_TIMEOUT_MS`).
    pub request_header_timeout_ms: u64,
    /// HTTP/2 PING (and TCP keep-alive) on a connection quiet for this long
    /// (`REBOUND_KEEPALIVE_INTERVAL_MS`).
    pub keepalive_interval_ms: u64,
    /// A connection whose peer does not answer a PING within this is closed
    /// (`REBOUND_KEEPALIVE_TIMEOUT_MS`).
    pub keepalive_timeout_ms: u64,
    /// Payload, attribute and error bytes of this node's unacknowledged deliveries; at the
    /// budget, further deliveries wait (in Cassandra) for acks.
    pub max_in_flight_bytes: usize,
    /// Memory for requests (enqueues, batches, acks: every call but the streams): each byte
    /// is counted as it arrives, `budget::REQUEST_COPIES` times; a request that would pass it is shed with
    /// RESOURCE_EXHAUSTED and a `grpc-retry-pushback-ms` hint. Not to be confused with
    /// `max_in_flight_bytes`, the deliveries' budget.
    pub max_inflight_bytes: usize,
    /// Run on Cassandra's clock: measure this node's offset from the coordinators'
    /// `currentTimestamp()` at start and every `clock_sync_interval_ms`, and apply it.
    pub clock_sync: bool,
    pub clock_sync_interval_ms: u64,
    /// For tests of clock skew only: milliseconds added to the machine's clock, standing for a
    /// machine whose clock is off by that much (clock sync, when on, measures and corrects
    /// it like any other error). `REBOUND_TEST_CLOCK_SKEW_MS`, default 0.
    pub test_clock_skew_ms: i64,
    /// Credentials file (see `auth`); none: every call is allowed.
    pub credentials_file: Option<std::path::PathBuf>,
    /// The keys that seal push targets' secrets in the `services` row
    /// (`REBOUND_SECRETS_KEY_FILE`, see `keys`); none: they are stored in clear.
    pub secrets_key_file: Option<std::path::PathBuf>,
    /// TLS files (see `tls`); each None: off.
    pub tls_cert_file: Option<std::path::PathBuf>,
    pub tls_key_file: Option<std::path::PathBuf>,
    pub tls_client_ca_file: Option<std::path::PathBuf>,
    pub tls_peer_ca_file: Option<std::path::PathBuf>,
    pub cassandra_tls_ca_file: Option<std::path::PathBuf>,
    pub cassandra_tls_cert_file: Option<std::path::PathBuf>,
    pub cassandra_tls_key_file: Option<std::path::PathBuf>,
    /// The Cassandra datacenter this node's requests are coordinated in
    /// (`REBOUND_CASSANDRA_LOCAL_DC`): LOCAL_QUORUM and LOCAL_SERIAL count that DC's replicas,
    /// so every node of one (region, cluster) must name the same one. None: any DC.
    pub cassandra_local_dc: Option<String>,
    pub shutdown_grace_ms: u64,
    /// How long dead letters are kept.
    pub dead_letter_retention_seconds: u32,
    /// Pause between two dispatch scans of the directory.
    pub scan_interval_ms: u64,
    /// How often each node rereads the service settings (pause, policy, limits).
    pub settings_refresh_ms: u64,
    /// Pause between two compaction passes of Node-0.
    pub compaction_interval_ms: u64,
    /// The metrics, probes and dashboard listener (`REBOUND_HTTP_LISTEN`); None: off.
    pub http_listen: Option<SocketAddr>,
    /// Whether `http_listen` was set (file, environment); the default address, when taken by
    /// another node on the same machine, is skipped with a warning instead of failing.
    pub http_listen_set: bool,
    /// Distinct services labelled in metrics (`REBOUND_METRICS_MAX_SERVICES`).
    pub metrics_max_services: usize,
    /// How often the compactor node measures the backlog for `rebound_pending`.
    pub stats_interval_ms: u64,
    /// The dashboard's link to a trace (`REBOUND_TRACE_URL_TEMPLATE`): an http(s) URL with
    /// `{trace_id}` in it, e.g. `http://localhost:16686/trace/{trace_id}`. None: no link.
    pub trace_url_template: Option<String>,
    /// Hosts and networks push targets may reach although the address guard refuses them
    /// (`REBOUND_PUSH_ALLOW`, comma-separated: host names, addresses, CIDR networks); empty:
    /// none (docs/architecture.md, "Push delivery").
    pub push_allow: String,
    pub log_format: LogFormat,
    /// Node-wide default retry policy; services and enqueues override it.
    pub default_policy: RetryPolicy,
}

use rebound_common::ConfigError;

/// The store behind the storage traits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreKind {
    /// Apache Cassandra: any number of nodes.
    #[default]
    Cassandra,
    /// The embedded store in `REBOUND_DATA_DIR`: one node.
    Embedded,
}

/// Longest `REBOUND_CASSANDRA_STARTUP_WAIT_MS`: one day.
pub const MAX_STARTUP_WAIT_MS: u64 = 86_400_000;
/// Largest `REBOUND_TEST_CLOCK_SKEW_MS` either way: one year, far past any real clock error,
/// and small enough that no time computed from the skewed clock overflows.
pub const MAX_TEST_CLOCK_SKEW_MS: i64 = 365 * 86_400_000;

/// A trace link template: an `http://` or `https://` URL with `{trace_id}` in it, and no
/// whitespace, control characters or quotes (it becomes a link in the dashboard).
/// The default of `max_inflight_bytes`: 64 MiB of requests held at once.
pub const DEFAULT_MAX_INFLIGHT_BYTES: usize = 64 << 20;

/// What a request may carry beyond its payloads (ids, attributes, errors, framing).
pub const MESSAGE_OVERHEAD: usize = 1 << 20;

/// The default of `max_connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4_096;

pub fn check_trace_url_template(t: &str) -> Result<(), String> {
    let rest = t
        .strip_prefix("http://")
        .or_else(|| t.strip_prefix("https://"))
        .ok_or("must start with http:// or https://")?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err("must name a host after the scheme".into());
    }
    if !t.contains("{trace_id}") {
        return Err("must contain {trace_id}, e.g. http://localhost:16686/trace/{trace_id}".into());
    }
    if t.chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '<' | '>'))
    {
        return Err("must not contain whitespace, control characters, quotes or < >".into());
    }
    Ok(())
}

fn bad(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        message: message.into(),
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            store: StoreKind::Cassandra,
            data_dir: None,
            listen: "127.0.0.1:50051".parse().expect("static address"),
            advertise: None,
            cassandra_contact_points: vec!["127.0.0.1:9042".into()],
            keyspace: "rebound".into(),
            replication: "{'class': 'SimpleStrategy', 'replication_factor': 1}".into(),
            consistency: "LOCAL_QUORUM".into(),
            serial_consistency: "LOCAL_SERIAL".into(),
            cassandra_request_timeout_ms: 5_000,
            cassandra_connect_timeout_ms: 2_000,
            cassandra_startup_wait_ms: 120_000,
            region: "local".into(),
            cluster: "default".into(),
            node_id: default_node_id(),
            window_seconds: 60,
            skew_margin_ms: 2_000,
            bucket_size: 50_000,
            lanes: 8,
            slots: 64,
            lease_ttl_ms: 10_000,
            max_payload_bytes: 262_144,
            max_delay_seconds: 2_592_000,
            terminal_ttl_seconds: 3_600,
            max_batch_items: 1_000,
            max_concurrent_writes: 4_096,
            max_subscribers: 1_024,
            timer_max_entries: 50_000,
            timer_max_bytes: 16 << 20,
            timer_horizon_seconds: 3_600,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_concurrent_streams: 1_024,
            request_header_timeout_ms: 10_000,
            keepalive_interval_ms: 60_000,
            keepalive_timeout_ms: 20_000,
            max_in_flight_bytes: 256 << 20,
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
            clock_sync: true,
            clock_sync_interval_ms: 10_000,
            test_clock_skew_ms: 0,
            credentials_file: None,
            secrets_key_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_client_ca_file: None,
            tls_peer_ca_file: None,
            cassandra_tls_ca_file: None,
            cassandra_tls_cert_file: None,
            cassandra_tls_key_file: None,
            cassandra_local_dc: None,
            shutdown_grace_ms: 5_000,
            dead_letter_retention_seconds: 14 * 86_400,
            scan_interval_ms: 500,
            settings_refresh_ms: 1000,
            compaction_interval_ms: 2_000,
            http_listen: Some("127.0.0.1:9464".parse().expect("static address")),
            http_listen_set: false,
            metrics_max_services: rebound_common::metrics::DEFAULT_MAX_SERVICES,
            stats_interval_ms: 15_000,
            trace_url_template: None,
            push_allow: String::new(),
            log_format: LogFormat::Text,
            default_policy: RetryPolicy::default(),
        }
    }
}

fn default_node_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "rebound".into())
}

/// Command-line overrides; the binary fills these from clap.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub keyspace: Option<String>,
    pub node_id: Option<String>,
    pub contact_points: Option<String>,
}

impl Config {
    /// Builds the configuration: defaults, then `file` (TOML), then `env`, then `flags`, then
    /// validation.
    pub fn load(
        file: Option<&Path>,
        env: &HashMap<String, String>,
        flags: &Overrides,
    ) -> Result<Self, ConfigError> {
        Self::load_over(Config::default(), file, env, flags)
    }

    /// `load` over `base` instead of the defaults (`rebound-server dev` starts from its own).
    pub fn load_over(
        base: Config,
        file: Option<&Path>,
        env: &HashMap<String, String>,
        flags: &Overrides,
    ) -> Result<Self, ConfigError> {
        let text = file
            .map(|path| {
                std::fs::read_to_string(path)
                    .map_err(|e| bad("--config", format!("cannot read {}: {e}", path.display())))
            })
            .transpose()?;
        let c = Self::from_sources_over(base, text.as_deref(), env, flags)?;
        c.check_credentials_file()?;
        c.check_secrets_key_file()?;
        Ok(c)
    }

    /// `load` without the file system: defaults, then `file_text` (the TOML file's contents),
    /// then `env`, then `flags`, then every check that needs no file (the credentials file is
    /// only read by `load` and `validate`). Total: any text and any environment give a
    /// configuration or a `ConfigError` naming the key.
    pub fn from_sources(
        file_text: Option<&str>,
        env: &HashMap<String, String>,
        flags: &Overrides,
    ) -> Result<Self, ConfigError> {
        Self::from_sources_over(Config::default(), file_text, env, flags)
    }

    fn from_sources_over(
        mut c: Config,
        file_text: Option<&str>,
        env: &HashMap<String, String>,
        flags: &Overrides,
    ) -> Result<Self, ConfigError> {
        if let Some(text) = file_text {
            c.apply_file(text)?;
        }
        c.apply_env(env)?;
        c.apply_flags(flags)?;
        c.check_values()?;
        Ok(c)
    }

    /// Checks every value, and that the credentials file reads; the error names the
    /// environment key (the TOML key is the same name in lower case without the prefix).
    /// The largest gRPC message a node accepts: four payloads' worth plus the overhead.
    pub fn max_message_bytes(&self) -> usize {
        self.max_payload_bytes
            .saturating_mul(4)
            .saturating_add(MESSAGE_OVERHEAD)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_values()?;
        self.check_credentials_file()?;
        self.check_secrets_key_file()
    }

    fn check_secrets_key_file(&self) -> Result<(), ConfigError> {
        if let Some(path) = &self.secrets_key_file {
            crate::keys::read(path).map_err(|e| bad("REBOUND_SECRETS_KEY_FILE", e))?;
        }
        Ok(())
    }

    fn check_credentials_file(&self) -> Result<(), ConfigError> {
        if let Some(path) = &self.credentials_file {
            crate::auth::Auth::load(path).map_err(|e| bad("REBOUND_CREDENTIALS_FILE", e))?;
        }
        Ok(())
    }

    /// Every check of `validate` but the credentials file.
    fn check_values(&self) -> Result<(), ConfigError> {
        self.check_tls()?;
        if let Some(t) = &self.trace_url_template {
            check_trace_url_template(t)
                .map_err(|m| bad("REBOUND_TRACE_URL_TEMPLATE", format!("{t:?} {m}")))?;
        }
        // Its message names the key already.
        rebound_engine::guard::Allow::parse(&self.push_allow).map_err(|m| {
            let m = m.strip_prefix("REBOUND_PUSH_ALLOW: ").unwrap_or(&m);
            bad("REBOUND_PUSH_ALLOW", m)
        })?;
        if self.store == StoreKind::Embedded && self.data_dir.is_none() {
            return Err(bad(
                "REBOUND_DATA_DIR",
                "is required with REBOUND_STORE=embedded (the directory of the node's data)",
            ));
        }
        if self.cassandra_contact_points.is_empty() {
            return Err(bad(
                "REBOUND_CASSANDRA_CONTACT_POINTS",
                "at least one host:port is required",
            ));
        }
        for cp in &self.cassandra_contact_points {
            if cp.is_empty() || cp.contains(char::is_whitespace) {
                return Err(bad(
                    "REBOUND_CASSANDRA_CONTACT_POINTS",
                    format!("{cp:?} is not a host:port"),
                ));
            }
        }
        let ident = |key: &str, v: &str, max: usize| -> Result<(), ConfigError> {
            let ok = !v.is_empty()
                && v.len() <= max
                && v.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if ok {
                Ok(())
            } else {
                Err(bad(
                    key,
                    format!(
                        "{v:?} must be 1-{max} characters of [A-Za-z0-9_] starting with a letter"
                    ),
                ))
            }
        };
        ident("REBOUND_KEYSPACE", &self.keyspace, 48)?;
        let ns = |key: &str, v: &str| -> Result<(), ConfigError> {
            if v.is_empty()
                || v.len() > 64
                || !v
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                Err(bad(
                    key,
                    format!("{v:?} must be 1-64 characters of [A-Za-z0-9._-]"),
                ))
            } else {
                Ok(())
            }
        };
        ns("REBOUND_REGION", &self.region)?;
        ns("REBOUND_CLUSTER", &self.cluster)?;
        ns("REBOUND_NODE_ID", &self.node_id)?;
        let r = self.replication.trim();
        if !(r.starts_with('{') && r.ends_with('}') && r.contains("'class'")) {
            return Err(bad(
                "REBOUND_REPLICATION",
                "must be a CQL replication map such as {'class': 'SimpleStrategy', 'replication_factor': 1}",
            ));
        }
        Level::check(&self.consistency).map_err(|e| bad("REBOUND_CONSISTENCY", e))?;
        Serial::check(&self.serial_consistency)
            .map_err(|e| bad("REBOUND_SERIAL_CONSISTENCY", e))?;
        range(
            "REBOUND_CASSANDRA_REQUEST_TIMEOUT_MS",
            self.cassandra_request_timeout_ms,
            100,
            600_000,
        )?;
        range(
            "REBOUND_CASSANDRA_CONNECT_TIMEOUT_MS",
            self.cassandra_connect_timeout_ms,
            100,
            600_000,
        )?;
        range(
            "REBOUND_CASSANDRA_STARTUP_WAIT_MS",
            self.cassandra_startup_wait_ms,
            0,
            MAX_STARTUP_WAIT_MS,
        )?;
        if self.window_seconds == 0 || 86_400 % self.window_seconds != 0 {
            return Err(bad(
                "REBOUND_WINDOW_SECONDS",
                format!(
                    "{} must be at least 1 and divide 86400 (e.g. 1, 2, 5, 10, 30, 60, 300, 3600)",
                    self.window_seconds
                ),
            ));
        }
        range(
            "REBOUND_SKEW_MARGIN_MS",
            self.skew_margin_ms,
            0,
            u64::from(self.window_seconds) * 1000 * 10,
        )?;
        range(
            "REBOUND_BUCKET_SIZE",
            u64::from(self.bucket_size),
            1,
            1_000_000,
        )?;
        range("REBOUND_LANES", u64::from(self.lanes), 1, 1024)?;
        range("REBOUND_SLOTS", u64::from(self.slots), 1, 65_536)?;
        range("REBOUND_LEASE_TTL_MS", self.lease_ttl_ms, 1_000, 3_600_000)?;
        range(
            "REBOUND_MAX_PAYLOAD_BYTES",
            self.max_payload_bytes as u64,
            1,
            16 * 1024 * 1024,
        )?;
        range(
            "REBOUND_MAX_DELAY_SECONDS",
            self.max_delay_seconds,
            u64::from(self.window_seconds),
            10 * 365 * 86_400,
        )?;
        range(
            "REBOUND_TERMINAL_TTL_SECONDS",
            u64::from(self.terminal_ttl_seconds),
            1,
            30 * 86_400,
        )?;
        range(
            "REBOUND_MAX_BATCH_ITEMS",
            self.max_batch_items as u64,
            1,
            100_000,
        )?;
        range(
            "REBOUND_MAX_CONCURRENT_WRITES",
            self.max_concurrent_writes as u64,
            1,
            1_000_000,
        )?;
        range(
            "REBOUND_MAX_SUBSCRIBERS",
            self.max_subscribers as u64,
            1,
            1_000_000,
        )?;
        range(
            "REBOUND_TIMER_MAX_ENTRIES",
            self.timer_max_entries as u64,
            0,
            10_000_000,
        )?;
        range(
            "REBOUND_TIMER_MAX_BYTES",
            self.timer_max_bytes as u64,
            0,
            16 << 30,
        )?;
        range(
            "REBOUND_TIMER_HORIZON_SECONDS",
            self.timer_horizon_seconds,
            0,
            self.max_delay_seconds.max(1),
        )?;
        range(
            "REBOUND_MAX_CONNECTIONS",
            self.max_connections as u64,
            1,
            1_000_000,
        )?;
        range(
            "REBOUND_MAX_CONCURRENT_STREAMS",
            u64::from(self.max_concurrent_streams),
            1,
            1_000_000,
        )?;
        range(
            "REBOUND_REQUEST_HEADER_TIMEOUT_MS",
            self.request_header_timeout_ms,
            100,
            600_000,
        )?;
        range(
            "REBOUND_KEEPALIVE_INTERVAL_MS",
            self.keepalive_interval_ms,
            1_000,
            86_400_000,
        )?;
        range(
            "REBOUND_KEEPALIVE_TIMEOUT_MS",
            self.keepalive_timeout_ms,
            1_000,
            600_000,
        )?;
        range(
            "REBOUND_CLOCK_SYNC_INTERVAL_MS",
            self.clock_sync_interval_ms,
            100,
            3_600_000,
        )?;
        range(
            "REBOUND_MAX_IN_FLIGHT_BYTES",
            self.max_in_flight_bytes as u64,
            1 << 20,
            1 << 40,
        )?;
        range(
            "REBOUND_MAX_INFLIGHT_BYTES",
            self.max_inflight_bytes as u64,
            1 << 20,
            1 << 40,
        )?;
        let largest = self.max_message_bytes();
        let least = largest.saturating_mul(crate::budget::REQUEST_COPIES);
        if self.max_inflight_bytes < least {
            return Err(bad(
                "REBOUND_MAX_INFLIGHT_BYTES",
                format!(
                    "{} is below {least} bytes: the largest request a node accepts, {largest} \
                     bytes (4 x REBOUND_MAX_PAYLOAD_BYTES + 1 MiB), counted {} times (its \
                     copies while it is served), could then never be taken",
                    self.max_inflight_bytes,
                    crate::budget::REQUEST_COPIES
                ),
            ));
        }
        range(
            "REBOUND_DEAD_LETTER_RETENTION_SECONDS",
            u64::from(self.dead_letter_retention_seconds),
            60,
            10 * 365 * 86_400,
        )?;
        range(
            "REBOUND_SCAN_INTERVAL_MS",
            self.scan_interval_ms,
            10,
            60_000,
        )?;
        range(
            "REBOUND_SETTINGS_REFRESH_MS",
            self.settings_refresh_ms,
            10,
            60_000,
        )?;
        range(
            "REBOUND_COMPACTION_INTERVAL_MS",
            self.compaction_interval_ms,
            10,
            600_000,
        )?;
        range(
            "REBOUND_METRICS_MAX_SERVICES",
            self.metrics_max_services as u64,
            1,
            100_000,
        )?;
        range(
            "REBOUND_STATS_INTERVAL_MS",
            self.stats_interval_ms,
            100,
            3_600_000,
        )?;
        if !(-MAX_TEST_CLOCK_SKEW_MS..=MAX_TEST_CLOCK_SKEW_MS).contains(&self.test_clock_skew_ms) {
            return Err(bad(
                "REBOUND_TEST_CLOCK_SKEW_MS",
                format!(
                    "{} is outside {}..={MAX_TEST_CLOCK_SKEW_MS}",
                    self.test_clock_skew_ms, -MAX_TEST_CLOCK_SKEW_MS
                ),
            ));
        }
        self.default_policy
            .validate()
            .map_err(|e| bad(&format!("default_policy.{}", e.field), e.message))?;
        Ok(())
    }
}

fn range(key: &str, v: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if v < min || v > max {
        Err(bad(key, format!("{v} is outside {min}..={max}")))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = Config::load(None, &HashMap::new(), &Overrides::default()).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:50051");
        assert_eq!(c.keyspace, "rebound");
        assert_eq!(c.window_seconds, 60);
        assert_eq!(c.skew_margin_ms, 2000);
        assert_eq!(c.bucket_size, 50_000);
        assert_eq!(c.lanes, 8);
        assert_eq!((c.slots, c.lease_ttl_ms), (64, 10_000));
        assert_eq!(c.max_payload_bytes, 262_144);
        assert_eq!(c.max_delay_seconds, 2_592_000);
        assert_eq!(
            (c.max_subscribers, c.max_in_flight_bytes),
            (1_024, 268_435_456)
        );
        assert_eq!(
            (c.max_connections, c.max_concurrent_streams),
            (4_096, 1_024)
        );
        assert_eq!(
            (
                c.request_header_timeout_ms,
                c.keepalive_interval_ms,
                c.keepalive_timeout_ms
            ),
            (10_000, 60_000, 20_000)
        );
        assert_eq!(
            (c.region.as_str(), c.cluster.as_str()),
            ("local", "default")
        );
    }

    #[test]
    fn env_beats_file_and_flags_beat_env() {
        let dir = std::env::temp_dir().join(format!("rebound-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rebound.toml");
        std::fs::write(
            &file,
            "window_seconds = 30\nlanes = 4\nkeyspace = \"fromfile\"\n[default_policy]\nmax_attempts = 9\n",
        )
        .unwrap();
        let c = Config::load(
            Some(&file),
            &env(&[("REBOUND_LANES", "2"), ("REBOUND_KEYSPACE", "fromenv")]),
            &Overrides {
                keyspace: Some("fromflag".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(c.window_seconds, 30);
        assert_eq!(c.lanes, 2);
        assert_eq!(c.keyspace, "fromflag");
        assert_eq!(c.default_policy.max_attempts, 9);
    }

    #[test]
    fn bad_values_name_the_key() {
        for (k, v) in [
            ("REBOUND_WINDOW_SECONDS", "7"),
            ("REBOUND_WINDOW_SECONDS", "0"),
            ("REBOUND_WINDOW_SECONDS", "abc"),
            ("REBOUND_BUCKET_SIZE", "0"),
            ("REBOUND_LANES", "0"),
            ("REBOUND_SLOTS", "-1"),
            ("REBOUND_LEASE_TTL_MS", "5"),
            ("REBOUND_MAX_PAYLOAD_BYTES", "0"),
            ("REBOUND_MAX_DELAY_SECONDS", "1"),
            ("REBOUND_LISTEN", "nowhere"),
            ("REBOUND_KEYSPACE", "bad-name"),
            ("REBOUND_REGION", "a b"),
            ("REBOUND_CONSISTENCY", "SOMETIMES"),
            ("REBOUND_MAX_SUBSCRIBERS", "0"),
            ("REBOUND_MAX_CONNECTIONS", "0"),
            ("REBOUND_MAX_CONCURRENT_STREAMS", "0"),
            ("REBOUND_MAX_CONCURRENT_STREAMS", "4294967296"),
            ("REBOUND_REQUEST_HEADER_TIMEOUT_MS", "10"),
            ("REBOUND_KEEPALIVE_INTERVAL_MS", "0"),
            ("REBOUND_KEEPALIVE_TIMEOUT_MS", "999999999"),
            ("REBOUND_MAX_IN_FLIGHT_BYTES", "1000"),
            ("REBOUND_MAX_INFLIGHT_BYTES", "1000"),
            ("REBOUND_CLOCK_SYNC", "maybe"),
            ("REBOUND_CLOCK_SYNC_INTERVAL_MS", "5"),
            ("REBOUND_CREDENTIALS_FILE", "/nonexistent/credentials.toml"),
            ("REBOUND_SECRETS_KEY_FILE", "/nonexistent/secrets.keys"),
        ] {
            let err = Config::load(None, &env(&[(k, v)]), &Overrides::default()).unwrap_err();
            assert_eq!(err.key, k, "{k}={v} gave {err}");
        }
    }

    #[test]
    fn trace_url_templates_are_http_urls_with_the_trace_id() {
        let ok = "http://localhost:16686/trace/{trace_id}";
        let c = Config::from_sources(
            None,
            &env(&[("REBOUND_TRACE_URL_TEMPLATE", ok)]),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.trace_url_template.as_deref(), Some(ok));
        for v in [
            "localhost:16686/trace/{trace_id}",
            "ftp://x/{trace_id}",
            "https://jaeger/trace/",
            "https:///{trace_id}",
            "https://x/{trace_id} y",
        ] {
            let err = Config::from_sources(
                None,
                &env(&[("REBOUND_TRACE_URL_TEMPLATE", v)]),
                &Overrides::default(),
            )
            .unwrap_err();
            assert_eq!(err.key, "REBOUND_TRACE_URL_TEMPLATE", "{v}: {err}");
        }
    }

    #[test]
    fn values_that_would_overflow_later_are_refused() {
        for (k, v) in [
            ("REBOUND_TEST_CLOCK_SKEW_MS", "9223372036854775807"),
            ("REBOUND_TEST_CLOCK_SKEW_MS", "-9223372036854775808"),
            ("REBOUND_CASSANDRA_STARTUP_WAIT_MS", "18446744073709551615"),
        ] {
            let err =
                Config::from_sources(None, &env(&[(k, v)]), &Overrides::default()).unwrap_err();
            assert_eq!(err.key, k, "{k}={v} gave {err}");
            assert!(err.message.contains("is outside"), "{err}");
        }
        let c = Config::from_sources(
            None,
            &env(&[("REBOUND_TEST_CLOCK_SKEW_MS", "-30000")]),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(c.test_clock_skew_ms, -30_000);
    }
}
