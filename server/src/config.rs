//! Node configuration: defaults, then a TOML file, then the environment, then flags, then
//! `validate()`. The environment is passed in as a map so tests control it; the names are part
//! of the contract of DESIGN.md "Configuration".

use std::{collections::HashMap, net::SocketAddr, path::Path, time::Duration};

use serde::Deserialize;

use crate::{policy::RetryPolicy, store::cassandra};

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
    /// Payload, attribute and error bytes of this node's unacknowledged deliveries; at the
    /// budget, further deliveries wait (in Cassandra) for acks.
    pub max_in_flight_bytes: usize,
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
    pub log_format: LogFormat,
    /// Node-wide default retry policy; services and enqueues override it.
    pub default_policy: RetryPolicy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// A configuration value that failed validation; the message names the key.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid configuration: {key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

/// The store behind the storage traits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreKind {
    /// Apache Cassandra: any number of nodes.
    #[default]
    Cassandra,
    /// The embedded store in `REBOUND_DATA_DIR`: one node.
    Embedded,
}

impl StoreKind {
    fn parse(key: &str, v: &str) -> Result<Self, ConfigError> {
        match v.trim().to_ascii_lowercase().as_str() {
            "cassandra" => Ok(StoreKind::Cassandra),
            "embedded" => Ok(StoreKind::Embedded),
            _ => Err(bad(key, format!("{v:?} must be cassandra or embedded"))),
        }
    }
}

/// Every environment key the configuration reads (`apply_env`; README.md lists them).
pub const ENV_KEYS: &[&str] = &[
    "REBOUND_STORE",
    "REBOUND_DATA_DIR",
    "REBOUND_LISTEN",
    "REBOUND_ADVERTISE",
    "REBOUND_CASSANDRA_CONTACT_POINTS",
    "REBOUND_KEYSPACE",
    "REBOUND_REPLICATION",
    "REBOUND_CONSISTENCY",
    "REBOUND_SERIAL_CONSISTENCY",
    "REBOUND_CASSANDRA_REQUEST_TIMEOUT_MS",
    "REBOUND_CASSANDRA_CONNECT_TIMEOUT_MS",
    "REBOUND_CASSANDRA_STARTUP_WAIT_MS",
    "REBOUND_REGION",
    "REBOUND_CLUSTER",
    "REBOUND_NODE_ID",
    "REBOUND_WINDOW_SECONDS",
    "REBOUND_SKEW_MARGIN_MS",
    "REBOUND_BUCKET_SIZE",
    "REBOUND_LANES",
    "REBOUND_SLOTS",
    "REBOUND_LEASE_TTL_MS",
    "REBOUND_MAX_PAYLOAD_BYTES",
    "REBOUND_MAX_DELAY_SECONDS",
    "REBOUND_TERMINAL_TTL_SECONDS",
    "REBOUND_MAX_BATCH_ITEMS",
    "REBOUND_MAX_CONCURRENT_WRITES",
    "REBOUND_MAX_SUBSCRIBERS",
    "REBOUND_MAX_IN_FLIGHT_BYTES",
    "REBOUND_CLOCK_SYNC",
    "REBOUND_CLOCK_SYNC_INTERVAL_MS",
    "REBOUND_TEST_CLOCK_SKEW_MS",
    "REBOUND_CREDENTIALS_FILE",
    "REBOUND_TLS_CERT_FILE",
    "REBOUND_TLS_KEY_FILE",
    "REBOUND_TLS_CLIENT_CA_FILE",
    "REBOUND_TLS_PEER_CA_FILE",
    "REBOUND_CASSANDRA_TLS_CA_FILE",
    "REBOUND_CASSANDRA_TLS_CERT_FILE",
    "REBOUND_CASSANDRA_TLS_KEY_FILE",
    "REBOUND_CASSANDRA_LOCAL_DC",
    "REBOUND_SHUTDOWN_GRACE_MS",
    "REBOUND_DEAD_LETTER_RETENTION_SECONDS",
    "REBOUND_SCAN_INTERVAL_MS",
    "REBOUND_SETTINGS_REFRESH_MS",
    "REBOUND_COMPACTION_INTERVAL_MS",
    "REBOUND_LOG_FORMAT",
    "REBOUND_HTTP_LISTEN",
    "REBOUND_METRICS_MAX_SERVICES",
    "REBOUND_STATS_INTERVAL_MS",
    "REBOUND_TRACE_URL_TEMPLATE",
];

/// Longest `REBOUND_CASSANDRA_STARTUP_WAIT_MS`: one day.
pub const MAX_STARTUP_WAIT_MS: u64 = 86_400_000;
/// Largest `REBOUND_TEST_CLOCK_SKEW_MS` either way: one year, far past any real clock error,
/// and small enough that no time computed from the skewed clock overflows.
pub const MAX_TEST_CLOCK_SKEW_MS: i64 = 365 * 86_400_000;

/// A trace link template: an `http://` or `https://` URL with `{trace_id}` in it, and no
/// whitespace, control characters or quotes (it becomes a link in the dashboard).
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
            max_in_flight_bytes: 256 << 20,
            clock_sync: true,
            clock_sync_interval_ms: 10_000,
            test_clock_skew_ms: 0,
            credentials_file: None,
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
            metrics_max_services: crate::metrics::DEFAULT_MAX_SERVICES,
            stats_interval_ms: 15_000,
            trace_url_template: None,
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

/// The TOML file: the same names as the environment, lower case, without `REBOUND_`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    store: Option<String>,
    data_dir: Option<std::path::PathBuf>,
    listen: Option<String>,
    advertise: Option<String>,
    cassandra_contact_points: Option<ContactPoints>,
    keyspace: Option<String>,
    replication: Option<String>,
    consistency: Option<String>,
    serial_consistency: Option<String>,
    cassandra_request_timeout_ms: Option<u64>,
    cassandra_connect_timeout_ms: Option<u64>,
    cassandra_startup_wait_ms: Option<u64>,
    region: Option<String>,
    cluster: Option<String>,
    node_id: Option<String>,
    window_seconds: Option<u32>,
    skew_margin_ms: Option<u64>,
    bucket_size: Option<u32>,
    lanes: Option<u32>,
    slots: Option<u32>,
    lease_ttl_ms: Option<u64>,
    max_payload_bytes: Option<usize>,
    max_delay_seconds: Option<u64>,
    terminal_ttl_seconds: Option<u32>,
    max_batch_items: Option<usize>,
    max_concurrent_writes: Option<usize>,
    max_subscribers: Option<usize>,
    max_in_flight_bytes: Option<usize>,
    clock_sync: Option<bool>,
    clock_sync_interval_ms: Option<u64>,
    credentials_file: Option<std::path::PathBuf>,
    tls_cert_file: Option<std::path::PathBuf>,
    tls_key_file: Option<std::path::PathBuf>,
    tls_client_ca_file: Option<std::path::PathBuf>,
    tls_peer_ca_file: Option<std::path::PathBuf>,
    cassandra_tls_ca_file: Option<std::path::PathBuf>,
    cassandra_tls_cert_file: Option<std::path::PathBuf>,
    cassandra_tls_key_file: Option<std::path::PathBuf>,
    cassandra_local_dc: Option<String>,
    shutdown_grace_ms: Option<u64>,
    dead_letter_retention_seconds: Option<u32>,
    scan_interval_ms: Option<u64>,
    settings_refresh_ms: Option<u64>,
    compaction_interval_ms: Option<u64>,
    http_listen: Option<String>,
    metrics_max_services: Option<usize>,
    stats_interval_ms: Option<u64>,
    trace_url_template: Option<String>,
    log_format: Option<String>,
    default_policy: Option<FilePolicy>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum ContactPoints {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePolicy {
    max_attempts: Option<u32>,
    initial_backoff_ms: Option<u64>,
    max_backoff_ms: Option<u64>,
    multiplier: Option<f64>,
    jitter: Option<f64>,
    max_retry_duration_ms: Option<u64>,
    ack_timeout_ms: Option<u64>,
    max_deliveries_per_attempt: Option<u32>,
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

    fn apply_file(&mut self, text: &str) -> Result<(), ConfigError> {
        let f: FileConfig =
            toml::from_str(text).map_err(|e| bad("--config", format!("bad TOML: {e}")))?;
        if let Some(v) = f.store {
            self.store = StoreKind::parse("store", &v)?;
        }
        if f.data_dir.is_some() {
            self.data_dir = f.data_dir;
        }
        if let Some(v) = f.listen {
            self.listen = parse_addr("listen", &v)?;
        }
        set(&mut self.advertise, f.advertise.map(Some));
        if let Some(v) = f.cassandra_contact_points {
            self.cassandra_contact_points = match v {
                ContactPoints::One(s) => split_list(&s),
                ContactPoints::Many(v) => v,
            };
        }
        set(&mut self.keyspace, f.keyspace);
        set(&mut self.replication, f.replication);
        set(&mut self.consistency, f.consistency);
        set(&mut self.serial_consistency, f.serial_consistency);
        set(
            &mut self.cassandra_request_timeout_ms,
            f.cassandra_request_timeout_ms,
        );
        set(
            &mut self.cassandra_connect_timeout_ms,
            f.cassandra_connect_timeout_ms,
        );
        set(
            &mut self.cassandra_startup_wait_ms,
            f.cassandra_startup_wait_ms,
        );
        set(&mut self.region, f.region);
        set(&mut self.cluster, f.cluster);
        set(&mut self.node_id, f.node_id);
        set(&mut self.window_seconds, f.window_seconds);
        set(&mut self.skew_margin_ms, f.skew_margin_ms);
        set(&mut self.bucket_size, f.bucket_size);
        set(&mut self.lanes, f.lanes);
        set(&mut self.slots, f.slots);
        set(&mut self.lease_ttl_ms, f.lease_ttl_ms);
        set(&mut self.max_payload_bytes, f.max_payload_bytes);
        set(&mut self.max_delay_seconds, f.max_delay_seconds);
        set(&mut self.terminal_ttl_seconds, f.terminal_ttl_seconds);
        set(&mut self.max_batch_items, f.max_batch_items);
        set(&mut self.max_concurrent_writes, f.max_concurrent_writes);
        set(&mut self.max_subscribers, f.max_subscribers);
        set(&mut self.max_in_flight_bytes, f.max_in_flight_bytes);
        set(&mut self.clock_sync, f.clock_sync);
        set(&mut self.clock_sync_interval_ms, f.clock_sync_interval_ms);
        if f.credentials_file.is_some() {
            self.credentials_file = f.credentials_file;
        }
        if let Some(dc) = f.cassandra_local_dc {
            self.cassandra_local_dc = (!dc.trim().is_empty()).then(|| dc.trim().to_string());
        }
        for (mine, theirs) in [
            (&mut self.tls_cert_file, f.tls_cert_file),
            (&mut self.tls_key_file, f.tls_key_file),
            (&mut self.tls_client_ca_file, f.tls_client_ca_file),
            (&mut self.tls_peer_ca_file, f.tls_peer_ca_file),
            (&mut self.cassandra_tls_ca_file, f.cassandra_tls_ca_file),
            (&mut self.cassandra_tls_cert_file, f.cassandra_tls_cert_file),
            (&mut self.cassandra_tls_key_file, f.cassandra_tls_key_file),
        ] {
            if let Some(p) = theirs {
                *mine = (!p.as_os_str().is_empty()).then_some(p);
            }
        }
        set(&mut self.shutdown_grace_ms, f.shutdown_grace_ms);
        set(
            &mut self.dead_letter_retention_seconds,
            f.dead_letter_retention_seconds,
        );
        set(&mut self.scan_interval_ms, f.scan_interval_ms);
        set(&mut self.settings_refresh_ms, f.settings_refresh_ms);
        set(&mut self.compaction_interval_ms, f.compaction_interval_ms);
        if let Some(v) = f.http_listen {
            self.http_listen = parse_optional_addr("http_listen", &v)?;
            self.http_listen_set = true;
        }
        set(&mut self.metrics_max_services, f.metrics_max_services);
        set(&mut self.stats_interval_ms, f.stats_interval_ms);
        if let Some(v) = f.trace_url_template {
            self.trace_url_template = (!v.trim().is_empty()).then(|| v.trim().to_string());
        }
        if let Some(v) = f.log_format {
            self.log_format = parse_log_format("log_format", &v)?;
        }
        if let Some(p) = f.default_policy {
            let d = &mut self.default_policy;
            set(&mut d.max_attempts, p.max_attempts);
            set(
                &mut d.initial_backoff,
                p.initial_backoff_ms.map(Duration::from_millis),
            );
            set(
                &mut d.max_backoff,
                p.max_backoff_ms.map(Duration::from_millis),
            );
            set(&mut d.multiplier, p.multiplier);
            set(&mut d.jitter, p.jitter);
            if let Some(ms) = p.max_retry_duration_ms {
                d.max_retry_duration = Some(Duration::from_millis(ms));
            }
            set(
                &mut d.ack_timeout,
                p.ack_timeout_ms.map(Duration::from_millis),
            );
            set(
                &mut d.max_deliveries_per_attempt,
                p.max_deliveries_per_attempt,
            );
        }
        Ok(())
    }

    fn apply_env(&mut self, env: &HashMap<String, String>) -> Result<(), ConfigError> {
        let get = |k: &str| env.get(k).map(|v| v.trim().to_string());
        if let Some(v) = get("REBOUND_LISTEN") {
            self.listen = parse_addr("REBOUND_LISTEN", &v)?;
        }
        if let Some(v) = get("REBOUND_STORE") {
            self.store = StoreKind::parse("REBOUND_STORE", &v)?;
        }
        if let Some(v) = get("REBOUND_DATA_DIR") {
            self.data_dir = (!v.is_empty()).then(|| v.into());
        }
        if let Some(v) = get("REBOUND_ADVERTISE") {
            self.advertise = Some(v);
        }
        if let Some(v) = get("REBOUND_CASSANDRA_CONTACT_POINTS") {
            self.cassandra_contact_points = split_list(&v);
        }
        macro_rules! text {
            ($key:literal, $field:ident) => {
                if let Some(v) = get($key) {
                    self.$field = v;
                }
            };
        }
        macro_rules! num {
            ($key:literal, $field:ident) => {
                if let Some(v) = get($key) {
                    self.$field = parse_num($key, &v)?;
                }
            };
        }
        text!("REBOUND_KEYSPACE", keyspace);
        text!("REBOUND_REPLICATION", replication);
        text!("REBOUND_CONSISTENCY", consistency);
        text!("REBOUND_SERIAL_CONSISTENCY", serial_consistency);
        num!(
            "REBOUND_CASSANDRA_REQUEST_TIMEOUT_MS",
            cassandra_request_timeout_ms
        );
        num!(
            "REBOUND_CASSANDRA_CONNECT_TIMEOUT_MS",
            cassandra_connect_timeout_ms
        );
        num!(
            "REBOUND_CASSANDRA_STARTUP_WAIT_MS",
            cassandra_startup_wait_ms
        );
        text!("REBOUND_REGION", region);
        text!("REBOUND_CLUSTER", cluster);
        text!("REBOUND_NODE_ID", node_id);
        num!("REBOUND_WINDOW_SECONDS", window_seconds);
        num!("REBOUND_SKEW_MARGIN_MS", skew_margin_ms);
        num!("REBOUND_BUCKET_SIZE", bucket_size);
        num!("REBOUND_LANES", lanes);
        num!("REBOUND_SLOTS", slots);
        num!("REBOUND_LEASE_TTL_MS", lease_ttl_ms);
        num!("REBOUND_MAX_PAYLOAD_BYTES", max_payload_bytes);
        num!("REBOUND_MAX_DELAY_SECONDS", max_delay_seconds);
        num!("REBOUND_TERMINAL_TTL_SECONDS", terminal_ttl_seconds);
        num!("REBOUND_MAX_BATCH_ITEMS", max_batch_items);
        num!("REBOUND_MAX_CONCURRENT_WRITES", max_concurrent_writes);
        num!("REBOUND_MAX_SUBSCRIBERS", max_subscribers);
        num!("REBOUND_MAX_IN_FLIGHT_BYTES", max_in_flight_bytes);
        if let Some(v) = get("REBOUND_CLOCK_SYNC") {
            self.clock_sync = match v.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => true,
                "false" | "0" | "no" | "off" => false,
                _ => {
                    return Err(bad(
                        "REBOUND_CLOCK_SYNC",
                        format!("{v:?} must be true or false"),
                    ))
                }
            };
        }
        num!("REBOUND_CLOCK_SYNC_INTERVAL_MS", clock_sync_interval_ms);
        num!("REBOUND_TEST_CLOCK_SKEW_MS", test_clock_skew_ms);
        if let Some(v) = get("REBOUND_CREDENTIALS_FILE") {
            self.credentials_file = (!v.is_empty()).then(|| v.into());
        }
        if let Some(v) = get("REBOUND_CASSANDRA_LOCAL_DC") {
            self.cassandra_local_dc = (!v.is_empty()).then_some(v);
        }
        for (key, field) in [
            ("REBOUND_TLS_CERT_FILE", &mut self.tls_cert_file),
            ("REBOUND_TLS_KEY_FILE", &mut self.tls_key_file),
            ("REBOUND_TLS_CLIENT_CA_FILE", &mut self.tls_client_ca_file),
            ("REBOUND_TLS_PEER_CA_FILE", &mut self.tls_peer_ca_file),
            (
                "REBOUND_CASSANDRA_TLS_CA_FILE",
                &mut self.cassandra_tls_ca_file,
            ),
            (
                "REBOUND_CASSANDRA_TLS_CERT_FILE",
                &mut self.cassandra_tls_cert_file,
            ),
            (
                "REBOUND_CASSANDRA_TLS_KEY_FILE",
                &mut self.cassandra_tls_key_file,
            ),
        ] {
            if let Some(v) = get(key) {
                *field = (!v.is_empty()).then(|| v.into());
            }
        }
        num!("REBOUND_SHUTDOWN_GRACE_MS", shutdown_grace_ms);
        num!(
            "REBOUND_DEAD_LETTER_RETENTION_SECONDS",
            dead_letter_retention_seconds
        );
        num!("REBOUND_SCAN_INTERVAL_MS", scan_interval_ms);
        num!("REBOUND_SETTINGS_REFRESH_MS", settings_refresh_ms);
        num!("REBOUND_COMPACTION_INTERVAL_MS", compaction_interval_ms);
        if let Some(v) = get("REBOUND_HTTP_LISTEN") {
            self.http_listen = parse_optional_addr("REBOUND_HTTP_LISTEN", &v)?;
            self.http_listen_set = true;
        }
        num!("REBOUND_METRICS_MAX_SERVICES", metrics_max_services);
        num!("REBOUND_STATS_INTERVAL_MS", stats_interval_ms);
        if let Some(v) = get("REBOUND_TRACE_URL_TEMPLATE") {
            self.trace_url_template = (!v.trim().is_empty()).then(|| v.trim().to_string());
        }
        if let Some(v) = get("REBOUND_LOG_FORMAT") {
            self.log_format = parse_log_format("REBOUND_LOG_FORMAT", &v)?;
        }
        Ok(())
    }

    fn apply_flags(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        if let Some(v) = &o.listen {
            self.listen = parse_addr("--listen", v)?;
        }
        if let Some(v) = &o.keyspace {
            self.keyspace = v.clone();
        }
        if let Some(v) = &o.node_id {
            self.node_id = v.clone();
        }
        if let Some(v) = &o.contact_points {
            self.cassandra_contact_points = split_list(v);
        }
        Ok(())
    }

    /// Checks every value, and that the credentials file reads; the error names the
    /// environment key (the TOML key is the same name in lower case without the prefix).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_values()?;
        self.check_credentials_file()
    }

    fn check_credentials_file(&self) -> Result<(), ConfigError> {
        if let Some(path) = &self.credentials_file {
            crate::auth::Auth::load(path).map_err(|e| bad("REBOUND_CREDENTIALS_FILE", e))?;
        }
        Ok(())
    }

    /// TLS files come in pairs, and the CAs only with what they verify. Their contents are
    /// read when the node starts (`tls`).
    fn check_tls(&self) -> Result<(), ConfigError> {
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(_), None) => {
                return Err(bad(
                    "REBOUND_TLS_KEY_FILE",
                    "is required with REBOUND_TLS_CERT_FILE (the certificate's private key, PEM)",
                ))
            }
            (None, Some(_)) => {
                return Err(bad(
                    "REBOUND_TLS_CERT_FILE",
                    "is required with REBOUND_TLS_KEY_FILE (the certificate chain, PEM)",
                ))
            }
            _ => {}
        }
        if self.tls_cert_file.is_none() {
            for (key, set) in [
                (
                    "REBOUND_TLS_CLIENT_CA_FILE",
                    self.tls_client_ca_file.is_some(),
                ),
                ("REBOUND_TLS_PEER_CA_FILE", self.tls_peer_ca_file.is_some()),
            ] {
                if set {
                    return Err(bad(
                        key,
                        "needs TLS on: set REBOUND_TLS_CERT_FILE and REBOUND_TLS_KEY_FILE too",
                    ));
                }
            }
        }
        match (&self.cassandra_tls_cert_file, &self.cassandra_tls_key_file) {
            (Some(_), None) => {
                return Err(bad(
                    "REBOUND_CASSANDRA_TLS_KEY_FILE",
                    "is required with REBOUND_CASSANDRA_TLS_CERT_FILE",
                ))
            }
            (None, Some(_)) => {
                return Err(bad(
                    "REBOUND_CASSANDRA_TLS_CERT_FILE",
                    "is required with REBOUND_CASSANDRA_TLS_KEY_FILE",
                ))
            }
            (Some(_), Some(_)) if self.cassandra_tls_ca_file.is_none() => {
                return Err(bad(
                    "REBOUND_CASSANDRA_TLS_CA_FILE",
                    "is required with a Cassandra client certificate (the CA of Cassandra's nodes)",
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// The listeners' TLS files (None: TLS off).
    pub fn tls_files(&self) -> Option<crate::tls::TlsFiles> {
        Some(crate::tls::TlsFiles {
            cert: self.tls_cert_file.clone()?,
            key: self.tls_key_file.clone()?,
            client_ca: self.tls_client_ca_file.clone(),
            peer_ca: self.tls_peer_ca_file.clone(),
        })
    }

    /// Every check of `validate` but the credentials file.
    fn check_values(&self) -> Result<(), ConfigError> {
        self.check_tls()?;
        if let Some(t) = &self.trace_url_template {
            check_trace_url_template(t)
                .map_err(|m| bad("REBOUND_TRACE_URL_TEMPLATE", format!("{t:?} {m}")))?;
        }
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
        cassandra::check_consistency(&self.consistency)
            .map_err(|e| bad("REBOUND_CONSISTENCY", e))?;
        cassandra::check_serial_consistency(&self.serial_consistency)
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

fn set<T>(slot: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *slot = v;
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn parse_addr(key: &str, v: &str) -> Result<SocketAddr, ConfigError> {
    v.parse()
        .map_err(|_| bad(key, format!("{v:?} is not an ip:port address")))
}

/// An address, or the empty string for none (a listener turned off).
fn parse_optional_addr(key: &str, v: &str) -> Result<Option<SocketAddr>, ConfigError> {
    if v.trim().is_empty() {
        return Ok(None);
    }
    v.trim().parse().map(Some).map_err(|_| {
        bad(
            key,
            format!("{v:?} is not an ip:port address (empty turns the listener off)"),
        )
    })
}

fn parse_num<T: std::str::FromStr>(key: &str, v: &str) -> Result<T, ConfigError> {
    v.parse()
        .map_err(|_| bad(key, format!("{v:?} is not a valid non-negative integer")))
}

fn parse_log_format(key: &str, v: &str) -> Result<LogFormat, ConfigError> {
    match v.to_ascii_lowercase().as_str() {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err(bad(key, format!("{v:?} must be text or json"))),
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
            ("REBOUND_MAX_IN_FLIGHT_BYTES", "1000"),
            ("REBOUND_CLOCK_SYNC", "maybe"),
            ("REBOUND_CLOCK_SYNC_INTERVAL_MS", "5"),
            ("REBOUND_CREDENTIALS_FILE", "/nonexistent/credentials.toml"),
        ] {
            let err = Config::load(None, &env(&[(k, v)]), &Overrides::default()).unwrap_err();
            assert_eq!(err.key, k, "{k}={v} gave {err}");
        }
    }

    #[test]
    fn unknown_toml_key_is_refused() {
        let mut c = Config::default();
        let err = c.apply_file("windw_seconds = 5").unwrap_err();
        assert!(err.message.contains("windw_seconds"), "{err}");
    }

    #[test]
    fn env_keys_lists_what_apply_env_reads() {
        let source = include_str!("config.rs");
        let start = source.find("fn apply_env").unwrap();
        let end = source.find("fn apply_flags").unwrap();
        let mut read: Vec<&str> = source[start..end]
            .split('"')
            .filter(|s| s.starts_with("REBOUND_"))
            .collect();
        read.sort_unstable();
        read.dedup();
        let mut listed = ENV_KEYS.to_vec();
        listed.sort_unstable();
        assert_eq!(read, listed);
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

    mod props {
        use proptest::prelude::*;

        use super::*;

        /// Values biased to what the parsers look for: numbers of every size and sign,
        /// padded, words, addresses, and anything at all.
        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<String>(),
                "[+-]?[0-9]{0,22}",
                " *[0-9]{1,12}(\\.[0-9]{0,3})? *",
                prop::sample::select(vec![
                    "true",
                    "off",
                    "json",
                    "TEXT",
                    "LOCAL_SERIAL",
                    "quorum",
                    "0.0.0.0:0",
                    "[::1]:50051",
                    "a,b, ,c",
                    "{'class': 'x'}",
                    "é",
                    "",
                ])
                .prop_map(String::from),
                prop::collection::vec(any::<u8>(), 0..40)
                    .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            ]
        }

        /// A TOML value: integers of any size, floats with nan and inf, strings, arrays.
        fn toml_value() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                "-?[0-9]{1,25}",
                prop::sample::select(vec!["nan", "inf", "-inf", "1e308", "0.5", "true", "[]"])
                    .prop_map(String::from),
                value().prop_map(|v| format!("{v:?}")),
                prop::collection::vec(value(), 0..3).prop_map(|v| format!("{v:?}")),
            ]
        }

        const FILE_KEYS: &[&str] = &[
            "listen",
            "advertise",
            "cassandra_contact_points",
            "keyspace",
            "replication",
            "consistency",
            "serial_consistency",
            "cassandra_request_timeout_ms",
            "cassandra_connect_timeout_ms",
            "cassandra_startup_wait_ms",
            "region",
            "cluster",
            "node_id",
            "window_seconds",
            "skew_margin_ms",
            "bucket_size",
            "lanes",
            "slots",
            "lease_ttl_ms",
            "max_payload_bytes",
            "max_delay_seconds",
            "terminal_ttl_seconds",
            "max_batch_items",
            "max_concurrent_writes",
            "max_subscribers",
            "max_in_flight_bytes",
            "clock_sync",
            "clock_sync_interval_ms",
            "credentials_file",
            "tls_cert_file",
            "tls_key_file",
            "tls_client_ca_file",
            "tls_peer_ca_file",
            "cassandra_tls_ca_file",
            "cassandra_tls_cert_file",
            "cassandra_tls_key_file",
            "cassandra_local_dc",
            "shutdown_grace_ms",
            "dead_letter_retention_seconds",
            "scan_interval_ms",
            "settings_refresh_ms",
            "compaction_interval_ms",
            "http_listen",
            "metrics_max_services",
            "stats_interval_ms",
            "trace_url_template",
            "log_format",
        ];
        const POLICY_KEYS: &[&str] = &[
            "max_attempts",
            "initial_backoff_ms",
            "max_backoff_ms",
            "multiplier",
            "jitter",
            "max_retry_duration_ms",
            "ack_timeout_ms",
            "max_deliveries_per_attempt",
        ];

        fn toml_file() -> impl Strategy<Value = String> {
            (
                prop::collection::vec((prop::sample::select(FILE_KEYS), toml_value()), 0..4),
                prop::collection::vec((prop::sample::select(POLICY_KEYS), toml_value()), 0..4),
            )
                .prop_map(|(top, policy)| {
                    let mut f = String::new();
                    for (k, v) in top {
                        f.push_str(&format!("{k} = {v}\n"));
                    }
                    if !policy.is_empty() {
                        f.push_str("[default_policy]\n");
                        for (k, v) in policy {
                            f.push_str(&format!("{k} = {v}\n"));
                        }
                    }
                    f
                })
        }

        /// The error names a key someone can look up.
        fn known_key(e: &ConfigError) -> bool {
            e.key == "--config"
                || e.key.starts_with("default_policy.")
                || ENV_KEYS.contains(&e.key.as_str())
                || FILE_KEYS.contains(&e.key.as_str())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn config_files_are_total(text in prop_oneof![any::<String>(), toml_file()]) {
                if let Err(e) = Config::from_sources(Some(&text), &HashMap::new(), &Overrides::default()) {
                    prop_assert!(known_key(&e), "{e}");
                }
            }

            #[test]
            fn config_env_is_total(
                pairs in prop::collection::vec((prop::sample::select(ENV_KEYS), value()), 0..6),
            ) {
                let env: HashMap<String, String> =
                    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                match Config::from_sources(None, &env, &Overrides::default()) {
                    Ok(c) => {
                        // Whatever passes is safe to compute with.
                        prop_assert!(c.test_clock_skew_ms.abs() <= MAX_TEST_CLOCK_SKEW_MS);
                        prop_assert!(c.cassandra_startup_wait_ms <= MAX_STARTUP_WAIT_MS);
                    }
                    Err(e) => prop_assert!(known_key(&e), "{e}"),
                }
            }

            #[test]
            fn config_flags_are_total(listen in value(), contact_points in value(), node_id in value()) {
                let flags = Overrides {
                    listen: Some(listen),
                    contact_points: Some(contact_points),
                    node_id: Some(node_id),
                    ..Default::default()
                };
                if let Err(e) = Config::from_sources(None, &HashMap::new(), &flags) {
                    prop_assert!(known_key(&e) || e.key == "--listen", "{e}");
                }
            }
        }
    }
}
