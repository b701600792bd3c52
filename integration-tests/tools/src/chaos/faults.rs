//! The fault injector: faults drawn from the seed ([`draw_fault`]) and run one after the
//! other on the cluster ([`inject`]): SIGKILL and restart of a node, SIGSTOP of a node past
//! its lease, a restart with the clock off, SIGSTOP of Cassandra past the request timeout,
//! and a spare node that joins the ring and leaves it (leases move with no process fault).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use rand::{rngs::StdRng, Rng};

use super::{
    cluster::{CassandraPause, NodeSettings},
    history::{now_ms, Event, FaultKind, Kind},
    Shared, LEASE_TTL_MS, REQUEST_TIMEOUT_MS,
};

#[derive(Clone, Debug)]
pub struct PlannedFault {
    pub at_ms: i64,
    pub kind: FaultKind,
    pub node: usize,
    /// Down time (kill), stop time (stop, pause), or the new clock offset (skew).
    pub value: i64,
}

/// A fault at `at_ms` of a random kind on a random node: a node down for 0.5-3 s (kill),
/// stopped past its lease (stop), restarted with its clock off by up to `max_skew_ms` (skew),
/// Cassandra stopped past the request timeout, or, with `spare`, the spare node in the ring
/// for 2-4 lease lifetimes (join; `node` is then the spare's index, `nodes`).
pub fn draw_fault(
    rng: &mut StdRng,
    at_ms: i64,
    nodes: usize,
    max_skew_ms: i64,
    spare: bool,
) -> PlannedFault {
    let all = [
        FaultKind::Kill,
        FaultKind::Stop,
        FaultKind::Skew,
        FaultKind::CassandraPause,
        FaultKind::Join,
    ];
    // Join, the last, only with a spare node.
    let kinds = &all[..all.len() - usize::from(!spare)];
    let kind = kinds[rng.random_range(0..kinds.len())];
    let node = if kind == FaultKind::Join {
        nodes
    } else {
        rng.random_range(0..nodes)
    };
    let value = match kind {
        FaultKind::Kill => rng.random_range(500..=3_000),
        FaultKind::Stop => LEASE_TTL_MS as i64 + rng.random_range(500..=1_500),
        FaultKind::Skew => {
            if rng.random_bool(0.2) {
                0
            } else {
                let m = rng.random_range(100..=max_skew_ms.max(100));
                if rng.random_bool(0.5) {
                    m
                } else {
                    -m
                }
            }
        }
        FaultKind::CassandraPause => REQUEST_TIMEOUT_MS as i64 + rng.random_range(500..=2_000),
        FaultKind::Join => 2 * LEASE_TTL_MS as i64 + rng.random_range(0..=2 * LEASE_TTL_MS as i64),
    };
    PlannedFault {
        at_ms,
        kind,
        node,
        value,
    }
}

/// Runs the planned faults one after the other; every fault ends with its target running.
pub(super) async fn inject(
    shared: Arc<Shared>,
    settings: NodeSettings,
    faults: Vec<PlannedFault>,
    cassandra: Option<u32>,
    t0: i64,
) -> anyhow::Result<BTreeMap<String, usize>> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for f in faults {
        let wait = t0 + f.at_ms - now_ms();
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait as u64)).await;
        }
        let start = now_ms();
        let detail;
        let node = match f.kind {
            FaultKind::CassandraPause => {
                let Some(pid) = cassandra else { continue };
                let inflight = shared.history.in_flight_at(start, None);
                {
                    let _pause = CassandraPause::start(pid);
                    tokio::time::sleep(Duration::from_millis(f.value as u64)).await;
                }
                detail = format!("SIGSTOP for {} ms; {inflight} in flight", f.value);
                None
            }
            FaultKind::Kill => {
                let mut n = shared.nodes[f.node].lock().await;
                let inflight = shared.history.in_flight_at(start, Some(f.node));
                n.kill();
                tokio::time::sleep(Duration::from_millis(f.value as u64)).await;
                let skew = n.skew_ms;
                n.start(&settings, skew)?;
                let ready = n.wait_ready(Duration::from_secs(60)).await;
                detail = format!(
                    "SIGKILL, restarted after {} ms (ready: {ready}); {inflight} in flight",
                    f.value
                );
                Some(f.node)
            }
            FaultKind::Stop => {
                let mut n = shared.nodes[f.node].lock().await;
                let inflight = shared.history.in_flight_at(start, Some(f.node));
                n.stop();
                tokio::time::sleep(Duration::from_millis(f.value as u64)).await;
                n.resume();
                detail = format!("SIGSTOP for {} ms; {inflight} in flight", f.value);
                Some(f.node)
            }
            FaultKind::Join => {
                let mut n = shared.nodes[f.node].lock().await;
                let inflight = shared.history.in_flight_at(start, None);
                n.start(&settings, 0)?;
                let ready = n.wait_ready(Duration::from_secs(60)).await;
                tokio::time::sleep(Duration::from_millis(f.value as u64)).await;
                n.terminate(Duration::from_secs(3)).await;
                detail = format!(
                    "{} joined (ready: {ready}) and left (SIGTERM) {} ms later; {inflight} in flight",
                    n.id, f.value
                );
                Some(f.node)
            }
            FaultKind::Skew => {
                let mut n = shared.nodes[f.node].lock().await;
                let inflight = shared.history.in_flight_at(start, Some(f.node));
                n.terminate(Duration::from_secs(3)).await;
                n.start(&settings, f.value)?;
                let ready = n.wait_ready(Duration::from_secs(60)).await;
                detail = format!(
                    "restarted (SIGTERM) with clock offset {} ms{} (ready: {ready}); {inflight} in flight",
                    f.value,
                    if f.value == 0 { " (clock sync on)" } else { ", clock sync off" }
                );
                Some(f.node)
            }
        };
        *counts.entry(format!("{:?}", f.kind)).or_default() += 1;
        shared.history.push(Event {
            start_ms: start,
            end_ms: now_ms(),
            kind: Kind::Fault {
                kind: f.kind,
                node,
                detail,
            },
        });
    }
    Ok(counts)
}
