//! The engine's settings from the node configuration. The engine derives each component's
//! options from its `Settings` (`Settings::options`) and knows nothing of `Config`.

use super::Config;
use rebound_engine::{engine::Settings, guard::Allow};

impl Config {
    /// The engine's settings: the fields of this configuration it runs on. Fails only on a
    /// `REBOUND_PUSH_ALLOW` that does not parse (`validate` refuses it first).
    pub fn engine_settings(&self) -> anyhow::Result<Settings> {
        let c = self;
        Ok(Settings {
            node_id: c.node_id.clone(),
            window_seconds: c.window_seconds,
            skew_margin_ms: c.skew_margin_ms,
            bucket_size: c.bucket_size,
            lanes: c.lanes,
            slots: c.slots,
            lease_ttl_ms: c.lease_ttl_ms,
            store_request_timeout_ms: c.cassandra_request_timeout_ms,
            max_delay_seconds: c.max_delay_seconds,
            terminal_ttl_seconds: c.terminal_ttl_seconds,
            dead_letter_retention_seconds: c.dead_letter_retention_seconds,
            max_concurrent_writes: c.max_concurrent_writes,
            max_subscribers: c.max_subscribers,
            max_in_flight_bytes: c.max_in_flight_bytes,
            timer_max_entries: c.timer_max_entries,
            timer_max_bytes: c.timer_max_bytes,
            timer_horizon_seconds: c.timer_horizon_seconds,
            scan_interval_ms: c.scan_interval_ms,
            settings_refresh_ms: c.settings_refresh_ms,
            compaction_interval_ms: c.compaction_interval_ms,
            stats_interval_ms: c.stats_interval_ms,
            clock_sync: c.clock_sync,
            clock_sync_interval_ms: c.clock_sync_interval_ms,
            default_policy: c.default_policy.clone(),
            push_allow: Allow::parse(&c.push_allow)
                .map_err(|e| anyhow::anyhow!("REBOUND_PUSH_ALLOW: {e}"))?,
        })
    }
}
