//! The TOML file, the environment and the flags, each applied over a `Config`; the
//! parsers of their values.

use std::{collections::HashMap, net::SocketAddr, time::Duration};

use serde::Deserialize;

use super::{bad, Config, ConfigError, LogFormat, Overrides, StoreKind};

impl StoreKind {
    fn parse(key: &str, v: &str) -> Result<Self, ConfigError> {
        match v.trim().to_ascii_lowercase().as_str() {
            "cassandra" => Ok(StoreKind::Cassandra),
            "embedded" => Ok(StoreKind::Embedded),
            _ => Err(bad(key, format!("{v:?} must be cassandra or embedded"))),
        }
    }
}

/// Every environment key the configuration reads (`apply_env`; docs/configuration.md lists them).
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
    "REBOUND_TIMER_MAX_ENTRIES",
    "REBOUND_TIMER_MAX_BYTES",
    "REBOUND_TIMER_HORIZON_SECONDS",
    "REBOUND_MAX_CONNECTIONS",
    "REBOUND_MAX_CONCURRENT_STREAMS",
    "REBOUND_REQUEST_HEADER_TIMEOUT_MS",
    "REBOUND_KEEPALIVE_INTERVAL_MS",
    "REBOUND_KEEPALIVE_TIMEOUT_MS",
    "REBOUND_MAX_IN_FLIGHT_BYTES",
    "REBOUND_MAX_INFLIGHT_BYTES",
    "REBOUND_CLOCK_SYNC",
    "REBOUND_CLOCK_SYNC_INTERVAL_MS",
    "REBOUND_TEST_CLOCK_SKEW_MS",
    "REBOUND_CREDENTIALS_FILE",
    "REBOUND_SECRETS_KEY_FILE",
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
    "REBOUND_PUSH_ALLOW",
];

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
    timer_max_entries: Option<usize>,
    timer_max_bytes: Option<usize>,
    timer_horizon_seconds: Option<u64>,
    max_connections: Option<usize>,
    max_concurrent_streams: Option<u32>,
    request_header_timeout_ms: Option<u64>,
    keepalive_interval_ms: Option<u64>,
    keepalive_timeout_ms: Option<u64>,
    max_in_flight_bytes: Option<usize>,
    max_inflight_bytes: Option<usize>,
    clock_sync: Option<bool>,
    clock_sync_interval_ms: Option<u64>,
    credentials_file: Option<std::path::PathBuf>,
    secrets_key_file: Option<std::path::PathBuf>,
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
    push_allow: Option<String>,
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

impl Config {
    pub(super) fn apply_file(&mut self, text: &str) -> Result<(), ConfigError> {
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
        set(&mut self.timer_max_entries, f.timer_max_entries);
        set(&mut self.timer_max_bytes, f.timer_max_bytes);
        set(&mut self.timer_horizon_seconds, f.timer_horizon_seconds);
        set(&mut self.max_connections, f.max_connections);
        set(&mut self.max_concurrent_streams, f.max_concurrent_streams);
        set(
            &mut self.request_header_timeout_ms,
            f.request_header_timeout_ms,
        );
        set(&mut self.keepalive_interval_ms, f.keepalive_interval_ms);
        set(&mut self.keepalive_timeout_ms, f.keepalive_timeout_ms);
        set(&mut self.max_in_flight_bytes, f.max_in_flight_bytes);
        set(&mut self.max_inflight_bytes, f.max_inflight_bytes);
        set(&mut self.clock_sync, f.clock_sync);
        set(&mut self.clock_sync_interval_ms, f.clock_sync_interval_ms);
        if f.credentials_file.is_some() {
            self.credentials_file = f.credentials_file;
        }
        if let Some(p) = f.secrets_key_file {
            self.secrets_key_file = (!p.as_os_str().is_empty()).then_some(p);
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
        if let Some(v) = f.push_allow {
            self.push_allow = v.trim().to_string();
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

    pub(super) fn apply_env(&mut self, env: &HashMap<String, String>) -> Result<(), ConfigError> {
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
        num!("REBOUND_TIMER_MAX_ENTRIES", timer_max_entries);
        num!("REBOUND_TIMER_MAX_BYTES", timer_max_bytes);
        num!("REBOUND_TIMER_HORIZON_SECONDS", timer_horizon_seconds);
        num!("REBOUND_MAX_CONNECTIONS", max_connections);
        num!("REBOUND_MAX_CONCURRENT_STREAMS", max_concurrent_streams);
        num!(
            "REBOUND_REQUEST_HEADER_TIMEOUT_MS",
            request_header_timeout_ms
        );
        num!("REBOUND_KEEPALIVE_INTERVAL_MS", keepalive_interval_ms);
        num!("REBOUND_KEEPALIVE_TIMEOUT_MS", keepalive_timeout_ms);
        num!("REBOUND_MAX_IN_FLIGHT_BYTES", max_in_flight_bytes);
        num!("REBOUND_MAX_INFLIGHT_BYTES", max_inflight_bytes);
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
        if let Some(v) = get("REBOUND_SECRETS_KEY_FILE") {
            self.secrets_key_file = (!v.is_empty()).then(|| v.into());
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
        if let Some(v) = get("REBOUND_PUSH_ALLOW") {
            self.push_allow = v.trim().to_string();
        }
        if let Some(v) = get("REBOUND_LOG_FORMAT") {
            self.log_format = parse_log_format("REBOUND_LOG_FORMAT", &v)?;
        }
        Ok(())
    }

    pub(super) fn apply_flags(&mut self, o: &Overrides) -> Result<(), ConfigError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{MAX_STARTUP_WAIT_MS, MAX_TEST_CLOCK_SKEW_MS};

    #[test]
    fn unknown_toml_key_is_refused() {
        let mut c = Config::default();
        let err = c.apply_file("windw_seconds = 5").unwrap_err();
        assert!(err.message.contains("windw_seconds"), "{err}");
    }

    #[test]
    fn env_keys_lists_what_apply_env_reads() {
        let source = include_str!("env.rs");
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
            "timer_max_entries",
            "timer_max_bytes",
            "timer_horizon_seconds",
            "max_connections",
            "max_concurrent_streams",
            "request_header_timeout_ms",
            "keepalive_interval_ms",
            "keepalive_timeout_ms",
            "max_in_flight_bytes",
            "max_inflight_bytes",
            "clock_sync",
            "clock_sync_interval_ms",
            "credentials_file",
            "secrets_key_file",
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
            "push_allow",
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
