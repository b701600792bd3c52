//! Several nodes on one keyspace share the token space through LWT leases: the ring covers
//! every token exactly once with one compactor, rebalances when a node joins or leaves, and
//! dispatch splits the work with every retry delivered once.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use rebound_integration_tests::{
    dispatch_config, enqueue_req, eventually, next_delivery, subscribe, TestNode,
};
use rebound_proto::v1::{self as pb, executor_service_client::ExecutorServiceClient};
use rebound_server::config::Config;
use rebound_store::clock::SystemClock;

fn ring_config(keyspace: &str, node: &str) -> Config {
    let mut c = dispatch_config("ring");
    c.keyspace = keyspace.to_string();
    c.node_id = node.to_string();
    c.slots = 16;
    c.lease_ttl_ms = 2_000;
    c
}

async fn ring(n: &TestNode) -> pb::Ring {
    ExecutorServiceClient::new(n.channel.clone())
        .get_ring(pb::GetRingRequest {})
        .await
        .unwrap()
        .into_inner()
}

/// True when the ring's ranges cover the token space exactly once among `nodes` live nodes,
/// with exactly one compactor.
fn covers_exactly_once(r: &pb::Ring, nodes: usize) -> Result<(), String> {
    if r.nodes.len() != nodes {
        return Err(format!("{} nodes listed", r.nodes.len()));
    }
    let compactors = r.nodes.iter().filter(|n| n.compactor).count();
    if compactors != 1 {
        return Err(format!("{compactors} compactors"));
    }
    let mut ranges: Vec<(i64, i64)> = r
        .nodes
        .iter()
        .flat_map(|n| n.ranges.iter().map(|t| (t.start, t.end)))
        .collect();
    ranges.sort();
    let mut next = i64::MIN;
    for (s, e) in &ranges {
        if *s != next {
            return Err(format!("gap or overlap at {next}: {ranges:?}"));
        }
        next = e.wrapping_add(1);
    }
    if ranges.last().map(|r| r.1) != Some(i64::MAX) {
        return Err(format!("does not reach the end: {ranges:?}"));
    }
    Ok(())
}

/// Enqueues `count` retries of `service`, due at once, through `node`.
async fn enqueue_due_now(node: &TestNode, service: &str, prefix: &str, count: usize) {
    let mut c = node.client.clone();
    for i in 0..count {
        c.enqueue_retry(enqueue_req(service, &format!("{prefix}{i}"), 0))
            .await
            .unwrap();
    }
}

/// One subscription to `service` on every node.
async fn subscribe_everywhere(
    nodes: &[TestNode],
    service: &str,
) -> Vec<tonic::Streaming<pb::Delivery>> {
    let mut subs = Vec::new();
    for n in nodes {
        subs.push(subscribe(&n.channel, service, 100).await);
    }
    subs
}

async fn converge(n: &TestNode, nodes: usize, balanced: bool) -> pb::Ring {
    let started = std::time::Instant::now();
    loop {
        let r = ring(n).await;
        let ok = covers_exactly_once(&r, nodes);
        // Balanced: every node holds at least one slot and at most ceil(16 / nodes).
        let slot = (1i128 << 64) / 16;
        let share = 16_i128.div_euclid(nodes as i128) + i128::from(16 % nodes != 0);
        let even = !balanced
            || r.nodes.iter().all(|x| {
                let width: i128 = x
                    .ranges
                    .iter()
                    .map(|t| i128::from(t.end) - i128::from(t.start) + 1)
                    .sum();
                width >= slot && width <= share * slot + 16
            });
        if ok.is_ok() && even {
            return r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "ring did not converge to {nodes} nodes: {ok:?} {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_share_the_ring_rebalance_and_take_over() {
    let keyspace = rebound_integration_tests::unique_keyspace("ring");
    let mut nodes = Vec::new();
    for id in ["n1", "n2", "n3"] {
        nodes.push(TestNode::start(ring_config(&keyspace, id), Arc::new(SystemClock)).await);
    }
    let r = converge(&nodes[0], 3, true).await;
    eprintln!(
        "3 nodes: {:?}",
        r.nodes
            .iter()
            .map(|n| (&n.node_id, n.ranges.len(), n.compactor))
            .collect::<Vec<_>>()
    );

    // A fourth node joins and gets its share.
    let joined = std::time::Instant::now();
    nodes.push(TestNode::start(ring_config(&keyspace, "n4"), Arc::new(SystemClock)).await);
    let r = converge(&nodes[0], 4, true).await;
    eprintln!("rebalanced after a join in {:?}", joined.elapsed());
    assert!(r
        .nodes
        .iter()
        .any(|n| n.node_id == "n4" && !n.ranges.is_empty()));

    // Work enqueued anywhere is delivered once, by whichever node holds its range.
    enqueue_due_now(&nodes[0], "split", "s", 40).await;
    let mut subs = subscribe_everywhere(&nodes, "split").await;
    let mut seen = BTreeSet::new();
    let started = std::time::Instant::now();
    while seen.len() < 40 && started.elapsed() < Duration::from_secs(30) {
        for (k, s) in subs.iter_mut().enumerate() {
            while let Some(d) = next_delivery(s, Duration::from_millis(200)).await {
                assert!(
                    seen.insert(d.transaction_id.clone()),
                    "{} delivered twice",
                    d.transaction_id
                );
                ExecutorServiceClient::new(nodes[k].channel.clone())
                    .ack(pb::AckRequest {
                        delivery_id: d.delivery_id,
                        outcome: pb::AckOutcome::Succeeded as i32,
                        retry_after: None,
                        error: String::new(),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
            }
        }
    }
    assert_eq!(seen.len(), 40);
    drop(subs);

    // The SDK's executor, given one node's address, follows the ring to all four.
    enqueue_due_now(&nodes[0], "sdk-split", "k", 30).await;
    let got: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let sink = got.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let addr = format!("http://{}", nodes[1].node.as_ref().unwrap().local_addr());
    let exec = tokio::spawn(
        rebound_client::executor::Executor::builder(addr.as_str(), "sdk-split")
            .concurrency(8)
            .ring_refresh(Duration::from_millis(500))
            .run(
                move |job: rebound_client::executor::Job| {
                    let sink = sink.clone();
                    async move {
                        sink.lock().unwrap().push(job.transaction_id.clone());
                        rebound_client::executor::Outcome::success()
                    }
                },
                async move {
                    let _ = stopped.await;
                },
            ),
    );
    let started = std::time::Instant::now();
    while got.lock().unwrap().len() < 30 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "sdk got {:?}",
            got.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(());
    exec.await.unwrap().unwrap();
    let mut all = got.lock().unwrap().clone();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 30, "every retry once, from every node");

    // The compactor leaves: its leases are handed back and taken over, compactor included.
    let compactor = r
        .nodes
        .iter()
        .find(|n| n.compactor)
        .unwrap()
        .node_id
        .clone();
    let pos = nodes
        .iter()
        .position(|n| n.config.node_id == compactor)
        .unwrap();
    let mut gone = nodes.remove(pos);
    let left = std::time::Instant::now();
    gone.node.take().unwrap().shutdown().await.unwrap();
    let r = converge(&nodes[0], 3, false).await;
    eprintln!(
        "ring whole again {:?} after {compactor} left",
        left.elapsed()
    );
    assert!(!r.nodes.iter().any(|n| n.node_id == compactor));
    let first = nodes.remove(0);
    for n in nodes {
        let mut n = n;
        n.node.take().unwrap().shutdown().await.unwrap();
    }
    first.finish().await;
}

/// Settings made through one node hold on every node: a pause taken by n1 stops n2 within the
/// refresh interval, a concurrency limit is shared between the nodes, and GetStats on either
/// node sums the in-flight deliveries of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_settings_and_stats_span_the_nodes() {
    use rebound_proto::v1::admin_service_client::AdminServiceClient;
    let keyspace = rebound_integration_tests::unique_keyspace("ringadmin");
    let mut nodes = Vec::new();
    for id in ["a1", "a2"] {
        let mut c = ring_config(&keyspace, id);
        c.settings_refresh_ms = 100;
        c.lanes = 8;
        nodes.push(TestNode::start(c, Arc::new(SystemClock)).await);
    }
    converge(&nodes[0], 2, true).await;
    let mut a1 = AdminServiceClient::new(nodes[0].channel.clone());
    let mut a2 = AdminServiceClient::new(nodes[1].channel.clone());
    a1.pause_service(pb::PauseServiceRequest {
        service: "svc".into(),
    })
    .await
    .unwrap();
    a1.set_service_limits(pb::SetServiceLimitsRequest {
        service: "svc".into(),
        limits: Some(pb::ServiceLimits {
            max_concurrent: Some(4),
            ..Default::default()
        }),
    })
    .await
    .unwrap();
    // Let a2 pick the settings up (refresh every 100 ms).
    tokio::time::sleep(Duration::from_millis(500)).await;
    enqueue_due_now(&nodes[0], "svc", "p", 40).await;
    let mut subs = subscribe_everywhere(&nodes, "svc").await;
    for s in subs.iter_mut() {
        assert!(
            next_delivery(s, Duration::from_millis(2_000))
                .await
                .is_none(),
            "a node delivered while the service was paused"
        );
    }
    let stats = a2
        .get_stats(pb::GetStatsRequest {
            service: "svc".into(),
            local_only: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.nodes.len(), 2);
    assert!(stats
        .nodes
        .iter()
        .all(|n| n.reachable && n.subscribers == 1));
    assert_eq!(
        stats.nodes.iter().map(|n| n.held_slots).sum::<u32>(),
        16,
        "{:?}",
        stats.nodes
    );
    assert!(stats.services[0].paused);
    assert_eq!(stats.services[0].pending, 40);

    // Resumed through the other node: deliveries start, at most 2 per node (4 / 2 nodes).
    a2.resume_service(pb::ResumeServiceRequest {
        service: "svc".into(),
    })
    .await
    .unwrap();
    let mut held: Vec<Vec<pb::Delivery>> = vec![Vec::new(), Vec::new()];
    let started = std::time::Instant::now();
    while held.iter().map(Vec::len).sum::<usize>() < 4
        && started.elapsed() < Duration::from_secs(10)
    {
        for (k, s) in subs.iter_mut().enumerate() {
            while let Some(d) = next_delivery(s, Duration::from_millis(200)).await {
                held[k].push(d);
            }
        }
    }
    for (k, s) in subs.iter_mut().enumerate() {
        while let Some(d) = next_delivery(s, Duration::from_millis(500)).await {
            held[k].push(d);
        }
        // Each node's share of max_concurrent 4 is 2. (A node holds 2 unless none of the 8
        // lanes' tokens fell in its slots, which the total below still covers.)
        assert!(
            held[k].len() <= 2,
            "node {k} has {} in flight",
            held[k].len()
        );
    }
    let total: usize = held.iter().map(Vec::len).sum();
    assert!(total >= 2);
    let stats = a1
        .get_stats(pb::GetStatsRequest {
            service: "svc".into(),
            local_only: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        stats.services[0].in_flight, total as u64,
        "summed over both nodes"
    );
    assert!(!stats.services[0].paused);

    // Acked as they come, all 40 arrive.
    let mut seen = BTreeSet::new();
    let started = std::time::Instant::now();
    loop {
        for (k, s) in subs.iter_mut().enumerate() {
            for d in held[k].drain(..) {
                assert!(seen.insert(d.transaction_id.clone()), "twice");
                ExecutorServiceClient::new(nodes[k].channel.clone())
                    .ack(pb::AckRequest {
                        delivery_id: d.delivery_id,
                        outcome: pb::AckOutcome::Succeeded as i32,
                        ..Default::default()
                    })
                    .await
                    .unwrap();
            }
            while let Some(d) = next_delivery(s, Duration::from_millis(100)).await {
                held[k].push(d);
            }
        }
        if seen.len() == 40 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "{} of 40",
            seen.len()
        );
    }
    drop(subs);
    let first = nodes.remove(0);
    for mut n in nodes {
        n.node.take().unwrap().shutdown().await.unwrap();
    }
    first.finish().await;
}

/// With credentials, a node answering GetStats asks its peers with the caller's own admin
/// token, so every live node is reachable and counted; a service token gets PERMISSION_DENIED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_ask_peers_with_the_callers_credential() {
    use rebound_proto::v1::admin_service_client::AdminServiceClient;
    let keyspace = rebound_integration_tests::unique_keyspace("ringauth");
    let file = rebound_integration_tests::credentials_file(
        "ringauth",
        &[
            ("ops", "ops-secret", &[], true),
            ("pay", "pay-secret", &["payments"], false),
        ],
    );
    let mut nodes = Vec::new();
    for id in ["b1", "b2"] {
        let mut c = ring_config(&keyspace, id);
        c.credentials_file = Some(file.clone());
        nodes.push(TestNode::start(c, Arc::new(SystemClock)).await);
    }
    let stats = |token: &'static str| {
        let mut admin = AdminServiceClient::new(nodes[0].channel.clone());
        async move {
            admin
                .get_stats(rebound_integration_tests::with_token(
                    pb::GetStatsRequest::default(),
                    Some(token),
                ))
                .await
        }
    };
    let e = stats("pay-secret").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    eventually(
        Duration::from_secs(20),
        "both nodes in GetStats",
        || async { stats("ops-secret").await.unwrap().into_inner().nodes.len() == 2 },
    )
    .await;
    let nodes_seen = stats("ops-secret").await.unwrap().into_inner().nodes;
    assert!(
        nodes_seen.iter().all(|n| n.reachable),
        "a peer refused the forwarded credential: {nodes_seen:?}"
    );
    for n in nodes {
        n.finish().await;
    }
}

/// Scan only your share (issue 14, defect 7): with four nodes on one keyspace, each node's
/// scans read the Tier-3 rows of its own token ranges only, bounded in CQL: per scan, the
/// nodes together read every row once, each about a quarter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_of_four_nodes_reads_only_its_share_of_tier_3() {
    let first = ring_config("x", "n0");
    let keyspace = first.keyspace.clone();
    let mut nodes = vec![TestNode::start(first, Arc::new(SystemClock)).await];
    for i in 1..4 {
        let c = ring_config(&keyspace, &format!("n{i}"));
        nodes.push(TestNode::start(c, Arc::new(SystemClock)).await);
    }
    converge(&nodes[0], 4, true).await;
    // 48 services x 2 lanes: 96 Tier-3 rows per window written to (one or two), nobody
    // subscribed, so they stay and every scan reads them. Spread over the four nodes: each
    // writes into lanes of its own slots (docs/architecture.md, "Data model", Instances).
    for i in 0..48 {
        enqueue_due_now(&nodes[i % 4], &format!("svc{i:02}"), "t", 4).await;
    }
    let total: usize = nodes[0].count("instances_by_window").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    converge(&nodes[0], 4, true).await;
    let counts = |nodes: &[TestNode]| -> Vec<(u64, u64)> {
        nodes
            .iter()
            .map(|n| {
                n.node
                    .as_ref()
                    .unwrap()
                    .engine()
                    .dispatcher()
                    .instance_rows_read()
            })
            .collect()
    };
    let before = counts(&nodes);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = counts(&nodes);
    let per_scan: Vec<f64> = before
        .iter()
        .zip(&after)
        .map(|((r0, s0), (r1, s1))| (r1 - r0) as f64 / (s1 - s0).max(1) as f64)
        .collect();
    let sum: f64 = per_scan.iter().sum();
    // Every row is read by some node (a slot in handover is read by all, so the sum may
    // exceed the total for a moment).
    assert!(
        sum >= total as f64 * 0.85,
        "per scan the nodes read {per_scan:?} Tier-3 rows, together {sum:.1} of {total}: some went unread"
    );
    for share in &per_scan {
        assert!(
            *share <= total as f64 * 0.45,
            "a node read {share:.1} of {total} Tier-3 rows per scan ({per_scan:?}): more than its share"
        );
    }
    eprintln!("Tier-3 rows per scan by node: {per_scan:?} of {total}");
    for n in nodes {
        n.finish().await;
    }
}

/// A node whose window size, slots or lanes differ from what its keyspace's first node
/// recorded refuses to start, naming both values; one with the same values starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_other_shared_settings_refuses_to_start() {
    let keyspace = rebound_integration_tests::unique_keyspace("ringshared");
    let first = TestNode::start(ring_config(&keyspace, "s1"), Arc::new(SystemClock)).await;
    let mut other = ring_config(&keyspace, "s2");
    other.window_seconds = first.config.window_seconds * 2;
    other.lanes = first.config.lanes + 1;
    let e = match rebound_server::node::Node::start(other, Arc::new(SystemClock)).await {
        Ok(_) => panic!("a node with another window size started"),
        Err(e) => format!("{e:#}"),
    };
    let w = first.config.window_seconds;
    assert!(
        e.contains(&format!(
            "REBOUND_WINDOW_SECONDS is {} on this node but {w} in keyspace {keyspace}",
            w * 2
        )),
        "{e}"
    );
    assert!(e.contains("REBOUND_LANES is"), "{e}");
    assert!(!e.contains("REBOUND_SLOTS"), "{e}");
    // The same values start.
    let same = TestNode::start(ring_config(&keyspace, "s2"), Arc::new(SystemClock)).await;
    same.finish().await;
    first.finish().await;
}
