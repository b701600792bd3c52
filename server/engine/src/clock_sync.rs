//! The node's clock set to Cassandra's (docs/architecture.md, "Guarantees across nodes", clock sync): `sync_clock` at start,
//! `run_clock_sync` every `REBOUND_CLOCK_SYNC_INTERVAL_MS` after, and `measure_offset` for a
//! node whose clock sync is off (it reports its offset, and does not apply it).

use std::{sync::Arc, time::Duration};

use tokio::sync::watch;

use rebound_store::clock::{offset_sample, Clock, ClusterClock};
use rebound_store::LeaseStore;

/// An offset change smaller than this is measurement noise and is not applied, so the
/// node's clock does not wobble back and forth by a millisecond or two at every sync.
const CLOCK_SYNC_DEADBAND_MS: i64 = 50;

/// Measures this node's clock against Cassandra's (`currentTimestamp()` of a coordinator):
/// five samples, the one with the shortest round trip wins, and its offset is applied.
pub async fn sync_clock(
    store: &dyn LeaseStore,
    clock: &ClusterClock,
    skew_margin_ms: i64,
) -> Result<i64, rebound_store::StoreError> {
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..5 {
        let sent = clock.base_now_ms();
        let server = store.server_time_ms().await?;
        let (offset, rtt) = offset_sample(sent, server, clock.base_now_ms());
        if best.is_none_or(|(_, r)| rtt < r) {
            best = Some((offset, rtt));
        }
    }
    let (offset, rtt) = best.expect("five samples");
    let before = clock.offset_ms().unwrap_or(0);
    if (offset - before).abs() >= CLOCK_SYNC_DEADBAND_MS {
        clock.set_offset_ms(offset);
        if offset.abs() * 2 > skew_margin_ms {
            tracing::warn!(
                offset_ms = offset,
                rtt_ms = rtt,
                skew_margin_ms,
                "this node's clock differs from Cassandra's by more than half the skew margin \
                 (REBOUND_SKEW_MARGIN_MS); the node runs on Cassandra's time, but check NTP"
            );
        } else {
            tracing::info!(
                offset_ms = offset,
                rtt_ms = rtt,
                "clock offset from Cassandra applied"
            );
        }
    }
    Ok(clock.offset_ms().unwrap_or(0))
}

/// This node's offset from Cassandra's clock (best of three by round trip), without applying
/// it; None when the database cannot tell its time.
pub async fn measure_offset(store: &dyn LeaseStore, clock: &dyn Clock) -> Option<i64> {
    let mut best: Option<(i64, i64)> = None;
    for _ in 0..3 {
        let sent = clock.now_ms();
        let server = store.server_time_ms().await.ok()?;
        let (offset, rtt) = offset_sample(sent, server, clock.now_ms());
        if best.is_none_or(|(_, r)| rtt < r) {
            best = Some((offset, rtt));
        }
    }
    best.map(|(o, _)| o)
}

pub async fn run_clock_sync(
    store: Arc<dyn LeaseStore>,
    clock: Arc<ClusterClock>,
    every: Duration,
    skew_margin_ms: i64,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        match sync_clock(store.as_ref(), &clock, skew_margin_ms).await {
            Ok(_) => {}
            // The database cannot report its clock at all: nothing to retry.
            Err(rebound_store::StoreError::Internal(_)) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read Cassandra's clock; keeping the last offset")
            }
        }
    }
}
