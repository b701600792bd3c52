//! Scenario A, the drain after an upgrade: one node of the old build takes `items` retries
//! (due 0-8 s ahead; half in batches, half one by one) with no executor subscribed and is
//! SIGKILLed 2 s after the last answer; a node of the new build with the same node id then
//! starts on the keyspace, and an executor drains it. Every accepted id must be delivered
//! exactly once, GetRetry must answer SUCCEEDED for each, and the directory must end empty.

use std::time::{Duration, Instant};

use futures::StreamExt;
use rand::{rngs::StdRng, Rng, SeedableRng};
use rebound_integration_tests::unique_keyspace;
use rebound_tools::chaos::{
    cluster::Node,
    directory,
    history::{now_ms, History},
};

use super::common::{
    self, enqueue_batch, enqueue_one, secs_since, spawn_executor, wait_delivered, Ctx, Enqueued,
    Judge, Verdict,
};

const NAME: &str = "A (drain after upgrade)";
/// Items per EnqueueRetryBatch, and per run of single calls between two batches.
const CHUNK: usize = 50;
/// Single calls at once.
const SINGLE_CONCURRENCY: usize = 16;
/// Longest delay asked for.
const MAX_DELAY_MS: u64 = 8_000;
/// From the last enqueue's answer to the SIGKILL of the old node.
const KILL_AFTER: Duration = Duration::from_secs(2);
const DRAIN_WITHIN: Duration = Duration::from_secs(90);
const EXECUTOR_MAX_IN_FLIGHT: u32 = 200;

/// Runs scenario A with `items` retries.
pub async fn run(ctx: &Ctx, items: usize) -> anyhow::Result<Verdict> {
    let keyspace = unique_keyspace("upgrade_drain");
    println!(
        "== {NAME}: keyspace {keyspace}, {items} retries of service {:?}",
        common::SERVICE
    );
    let (t0, t0_ms) = (Instant::now(), now_ms());
    let cql = directory::session(&ctx.contact_point).await?;
    let mut node = common::node(0, "n0");
    common::start(&mut node, &ctx.settings(&ctx.old, &keyspace)).await?;
    println!(
        "A: {:.1} s: n0 up (old build {}), no executor subscribed",
        secs_since(t0),
        ctx.old.rev
    );

    let enqueued = enqueue_all(&node, &plan(ctx.seed, items)).await;
    println!(
        "A: {:.1} s: enqueued: {}",
        secs_since(t0),
        enqueued.summary()
    );
    tokio::time::sleep(KILL_AFTER).await;
    node.kill();
    println!("A: {:.1} s: n0 SIGKILLed", secs_since(t0));

    common::start(&mut node, &ctx.settings(&ctx.new, &keyspace)).await?;
    println!(
        "A: {:.1} s: n0 up again (new build {}); an executor subscribes (max_in_flight {EXECUTOR_MAX_IN_FLIGHT})",
        secs_since(t0),
        ctx.new.rev
    );
    let history = History::default();
    let executor = spawn_executor(
        node.channel.clone(),
        0,
        history.clone(),
        EXECUTOR_MAX_IN_FLIGHT,
    );
    wait_delivered("A", &history, &enqueued.accepted, DRAIN_WITHIN).await;
    tokio::time::sleep(common::SETTLE).await;
    executor.abort();

    let verdict = common::judge(Judge {
        tag: "A",
        name: NAME,
        channel: &node.channel,
        cql: &cql,
        keyspace: &keyspace,
        accepted: &enqueued.accepted,
        history: &history,
        nodes: &["n0"],
        t0_ms,
        allowed_per_id: 1,
    })
    .await;
    node.terminate(Duration::from_secs(3)).await;
    common::drop_keyspace(ctx, &cql, &keyspace, &verdict).await;
    println!("A: {:.1} s: done", secs_since(t0));
    Ok(verdict)
}

/// The ids and their delays (0-8 s), from the seed.
fn plan(seed: u64, items: usize) -> Vec<(String, u64)> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xa);
    (0..items)
        .map(|i| (format!("a-{i:05}"), rng.random_range(0..=MAX_DELAY_MS)))
        .collect()
}

/// Enqueues `plan` on `node` in chunks of [`CHUNK`]: every other chunk as one batch, the
/// others one call per item.
async fn enqueue_all(node: &Node, plan: &[(String, u64)]) -> Enqueued {
    let mut e = Enqueued::default();
    for (k, chunk) in plan.chunks(CHUNK).enumerate() {
        let answers = if k % 2 == 0 {
            e.batched += chunk.len();
            enqueue_batch(node.channel.clone(), chunk).await
        } else {
            e.single += chunk.len();
            futures::stream::iter(chunk.iter().cloned())
                .map(|(id, delay)| enqueue_one(node.channel.clone(), id, delay))
                .buffer_unordered(SINGLE_CONCURRENCY)
                .collect()
                .await
        };
        for a in answers {
            e.record(a);
        }
    }
    e
}
