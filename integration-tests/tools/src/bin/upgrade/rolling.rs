//! Scenario B, the rolling upgrade: node n0 of the old build and node n1 of the new one on
//! one keyspace, an executor subscribed to each (acks go to the node that delivered); for
//! 20 s about 50 retries a second (due 0-5 s ahead) go to the two nodes in turn; at 10 s n0
//! is SIGTERMed, stays down for `down` and is started again, same node id, as the new build
//! (its enqueues go to n1 meanwhile). Down for longer than the lease TTL (2 s), its slots
//! move to n1 and back when it returns; a restart at once keeps them with n0 (same node
//! id). Then everything is drained. Every accepted id must be delivered; duplicates
//! (at-least-once around a lease move) are printed, and are a failure only past two
//! deliveries of one id.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use rand::{rngs::StdRng, Rng, SeedableRng};
use rebound_integration_tests::{process::wait_for_shared_ring, unique_keyspace};
use rebound_tools::chaos::{
    cluster::{Node, NodeSettings},
    directory, fmt_counts,
    history::{now_ms, History},
};
use tonic::transport::Channel;

use super::common::{
    self, enqueue_one, secs_since, spawn_executor, wait_delivered, Ctx, Enqueued, Judge, Tally,
    Verdict,
};

const NAME: &str = "B (rolling upgrade)";
/// How long the enqueues go on, and how many a second.
const PHASE: Duration = Duration::from_secs(20);
const RATE: u64 = 50;
/// When, in the phase, n0 is SIGTERMed to be started again as the new build.
const RESTART_AT: Duration = Duration::from_secs(10);
/// How long n0 has to exit after SIGTERM before it is SIGKILLed.
const TERM_GRACE: Duration = Duration::from_secs(10);
/// Longest delay asked for.
const MAX_DELAY_MS: u64 = 5_000;
const DRAIN_WITHIN: Duration = Duration::from_secs(90);
const EXECUTOR_MAX_IN_FLIGHT: u32 = 100;

/// Whether each node takes enqueues (n0 does not while it is being upgraded).
type Up = Arc<[AtomicBool; 2]>;

/// Runs scenario B, n0 down for `down` between its SIGTERM and its start as the new build.
pub async fn run(ctx: &Ctx, down: Duration) -> anyhow::Result<Verdict> {
    let keyspace = unique_keyspace("upgrade_rolling");
    println!(
        "== {NAME}: keyspace {keyspace}, {} s of {RATE} retries/s of service {:?}; n0 down for {:.1} s",
        PHASE.as_secs(),
        common::SERVICE,
        down.as_secs_f64()
    );
    let (t0, t0_ms) = (Instant::now(), now_ms());
    let cql = directory::session(&ctx.contact_point).await?;
    let mut n0 = common::node(0, "n0");
    let mut n1 = common::node(1, "n1");
    // The first node alone: it creates the keyspace.
    common::start(&mut n0, &ctx.settings(&ctx.old, &keyspace)).await?;
    common::start(&mut n1, &ctx.settings(&ctx.new, &keyspace)).await?;
    wait_for_shared_ring(&n1.channel, 2).await;
    println!(
        "B: {:.1} s: n0 (old build {}) and n1 (new build {}) share the ring; executors subscribe to both",
        secs_since(t0),
        ctx.old.rev,
        ctx.new.rev
    );

    let channels = [n0.channel.clone(), n1.channel.clone()];
    let history = History::default();
    let executors: Vec<_> = channels
        .iter()
        .enumerate()
        .map(|(i, ch)| spawn_executor(ch.clone(), i, history.clone(), EXECUTOR_MAX_IN_FLIGHT))
        .collect();
    let up: Up = Arc::new([AtomicBool::new(true), AtomicBool::new(true)]);
    let phase = Instant::now();
    let roll = tokio::spawn(upgrade_n0(
        n0,
        ctx.settings(&ctx.new, &keyspace),
        up.clone(),
        (phase + RESTART_AT, down),
        t0,
    ));
    let (enqueued, via) = enqueue_phase(&channels, &up, ctx.seed).await;
    println!(
        "B: {:.1} s: enqueued: {} (sent to n0 {}, to n1 {})",
        secs_since(t0),
        enqueued.summary(),
        via[0],
        via[1]
    );
    let (n0, restart_ms) = roll.await??;

    wait_delivered("B", &history, &enqueued.accepted, DRAIN_WITHIN).await;
    tokio::time::sleep(common::SETTLE).await;
    for e in executors {
        e.abort();
    }
    let verdict = common::judge(Judge {
        tag: "B",
        name: NAME,
        channel: &n1.channel,
        cql: &cql,
        keyspace: &keyspace,
        accepted: &enqueued.accepted,
        history: &history,
        nodes: &["n0", "n1"],
        t0_ms,
        allowed_per_id: 2,
    })
    .await;
    let before = Tally::of(&history).by_node_until(&["n0", "n1"], restart_ms);
    println!(
        "B: deliveries before n0's SIGTERM: {} (n0 the old build)",
        fmt_counts(&before)
    );
    for mut n in [n0, n1] {
        n.terminate(Duration::from_secs(3)).await;
    }
    common::drop_keyspace(ctx, &cql, &keyspace, &verdict).await;
    println!("B: {:.1} s: done", secs_since(t0));
    Ok(verdict)
}

/// At `at`: takes n0 out of the enqueues, SIGTERMs it (SIGKILL after [`TERM_GRACE`]),
/// leaves it down for `down`, starts it again as `new` and puts it back. Returns it
/// running, and when the SIGTERM went (ms, Cassandra's clock).
async fn upgrade_n0(
    mut n0: Node,
    new: NodeSettings,
    up: Up,
    (at, down): (Instant, Duration),
    t0: Instant,
) -> anyhow::Result<(Node, i64)> {
    tokio::time::sleep_until(at.into()).await;
    up[0].store(false, Ordering::SeqCst);
    let term_ms = now_ms();
    println!(
        "B: {:.1} s: n0 SIGTERM ({} s into the enqueues)",
        secs_since(t0),
        RESTART_AT.as_secs()
    );
    let term = Instant::now();
    n0.terminate(TERM_GRACE).await;
    let how = if term.elapsed() >= TERM_GRACE {
        "did not exit; SIGKILLed"
    } else {
        "exited"
    };
    println!("B: {:.1} s: n0 {how}", secs_since(t0));
    tokio::time::sleep(down).await;
    common::start(&mut n0, &new).await?;
    up[0].store(true, Ordering::SeqCst);
    println!("B: {:.1} s: n0 up again as the new build", secs_since(t0));
    Ok((n0, term_ms))
}

/// [`PHASE`] of [`RATE`] enqueues a second, one call each, to n0 and n1 in turn (to the
/// other while one is down). Returns the answers and how many went to each node.
async fn enqueue_phase(channels: &[Channel; 2], up: &Up, seed: u64) -> (Enqueued, [usize; 2]) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xb);
    let total = PHASE.as_secs() * RATE;
    let start = Instant::now();
    let mut via = [0; 2];
    let mut calls = Vec::new();
    for i in 0..total {
        tokio::time::sleep_until((start + Duration::from_millis(i * 1000 / RATE)).into()).await;
        let want = (i % 2) as usize;
        let node = if up[want].load(Ordering::SeqCst) {
            want
        } else {
            1 - want
        };
        via[node] += 1;
        let delay = rng.random_range(0..=MAX_DELAY_MS);
        calls.push(tokio::spawn(enqueue_one(
            channels[node].clone(),
            format!("b-{i:05}"),
            delay,
        )));
    }
    let mut e = Enqueued {
        single: total as usize,
        ..Enqueued::default()
    };
    for c in calls {
        if let Ok(a) = c.await {
            e.record(a);
        }
    }
    (e, via)
}
