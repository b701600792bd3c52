//! Each component's options from the node configuration. The engine's components take their
//! own options and know nothing of `Config`; the node and the logic tests build them here.

use std::time::Duration;

use super::Config;
use rebound_engine::{
    compactor::CompactorOptions,
    dispatch::{hub::HubLimits, DispatchOptions},
    engine::{EngineOptions, LoopOptions},
    guard::Allow,
    ring::RingOptions,
    writer::WriterOptions,
};

impl Config {
    /// How long a pointer may wait for its state row before a reader takes it for the remains
    /// of a failed enqueue: two request timeouts plus the skew margin.
    pub fn orphan_grace_ms(&self) -> i64 {
        (2 * self.cassandra_request_timeout_ms + self.skew_margin_ms) as i64
    }

    /// Lease validity a dispatch step or a compactor delete needs left before it starts: a
    /// fifth of the lease lifetime.
    pub fn fence_margin_ms(&self) -> i64 {
        (self.lease_ttl_ms / 5) as i64
    }
}

impl Config {
    /// Every engine component's options, for a process started at `boot_epoch` that tells
    /// executors its address is `advertised`.
    pub fn engine_options(
        &self,
        boot_epoch: i64,
        advertised: &str,
    ) -> anyhow::Result<EngineOptions> {
        Ok(EngineOptions {
            node_id: self.node_id.clone(),
            boot_epoch,
            default_policy: self.default_policy.clone(),
            writer: self.writer_options(boot_epoch),
            dispatch: self.dispatch_options(),
            hub: self.hub_limits(),
            compactor: self.compactor_options(),
            ring: self.ring_options(boot_epoch, advertised),
            push_allow: Allow::parse(&self.push_allow)
                .map_err(|e| anyhow::anyhow!("REBOUND_PUSH_ALLOW: {e}"))?,
            loops: LoopOptions {
                settings_refresh: Duration::from_millis(self.settings_refresh_ms),
                compaction: Duration::from_millis(self.compaction_interval_ms),
                stats: Duration::from_millis(self.stats_interval_ms),
                clock_sync: Duration::from_millis(self.clock_sync_interval_ms),
                clock_sync_off: !self.clock_sync,
            },
        })
    }

    /// The lease ring's options, for a process started at `boot_epoch` at `advertised`.
    pub fn ring_options(&self, boot_epoch: i64, advertised: &str) -> RingOptions {
        RingOptions {
            node_id: self.node_id.clone(),
            address: advertised.to_string(),
            boot_epoch,
            slots: self.slots,
            lease_ttl_ms: self.lease_ttl_ms as i64,
            clock_deadband_ms: (self.skew_margin_ms / 2) as i64,
        }
    }

    /// The writer's options, for a process started at `boot_epoch`.
    pub fn writer_options(&self, boot_epoch: i64) -> WriterOptions {
        let c = self;
        WriterOptions {
            node_id: c.node_id.clone(),
            boot_epoch,
            window_seconds: c.window_seconds,
            bucket_size: c.bucket_size,
            lanes: c.lanes,
            max_delay: Duration::from_secs(c.max_delay_seconds),
            terminal_ttl_seconds: c.terminal_ttl_seconds,
            dead_ttl_seconds: c.dead_letter_retention_seconds.max(c.terminal_ttl_seconds),
            max_concurrent_writes: c.max_concurrent_writes,
            default_policy: c.default_policy.clone(),
            orphan_grace_ms: c.orphan_grace_ms(),
        }
    }
}

impl Config {
    pub fn dispatch_options(&self) -> DispatchOptions {
        let c = self;
        DispatchOptions {
            skew_margin_ms: c.skew_margin_ms as i64,
            fence_margin_ms: c.fence_margin_ms(),
            scan_interval: Duration::from_millis(c.scan_interval_ms),
            workers_per_service: 4,
            // State reads in flight per bucket being fed; they coalesce into `IN` reads. 64
            // drained 4,600-4,900/s against 3,700-3,800/s with 16 in 20k `bench rebound`
            // runs; the 1M drain stayed at about 3,200-3,300/s.
            read_ahead: 64,
            dead_letter_ttl_seconds: c.dead_letter_retention_seconds,
            orphan_grace_ms: c.orphan_grace_ms(),
        }
    }
}

impl Config {
    pub fn hub_limits(&self) -> HubLimits {
        let c = self;
        HubLimits {
            max_subscribers: c.max_subscribers,
            max_in_flight_bytes: c.max_in_flight_bytes,
        }
    }
}

impl Config {
    pub fn compactor_options(&self) -> CompactorOptions {
        let c = self;
        CompactorOptions {
            // Gate 2 with twice the skew margin: a late writer has a full extra margin.
            gate_margin_ms: 2 * c.skew_margin_ms as i64,
            fence_margin_ms: c.fence_margin_ms(),
        }
    }
}
