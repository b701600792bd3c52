//! Three real `rebound-server` processes form a ring that covers every token exactly once with
//! one compactor; a fourth joins and gets its share; then the compactor (Node-0) is killed with
//! SIGKILL in the middle of a 20,000-item drain. Its slots and the compactor role are taken
//! once its leases expire, every retry is delivered and acknowledged, no SUCCEEDED retry is
//! delivered again, and the only duplicates are retries that were in flight on the killed
//! node. All along the lease rows are sampled: a slot never changes hands before its previous
//! lease has expired or been handed back.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rebound_integration_tests::{
    ack, ack_req, cql, drop_keyspace, enqueue_req,
    process::{connect, free_port, spawn_node, Proc},
    unique_keyspace,
};
use rebound_proto::v1::{
    self as pb, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use scylla::value::CqlTimestamp;

const ITEMS: usize = 20_000;

/// One sampled lease row.
#[derive(Debug, Clone)]
struct Sample {
    slot: i32,
    owner: String,
    epoch: i64,
    expires_at: i64,
    taken_at: i64,
    released_at: i64,
    released_epoch: i64,
}

#[derive(Default)]
struct Log {
    /// transaction -> nodes that delivered it, in order
    deliveries: HashMap<String, Vec<String>>,
    /// transactions whose SUCCEEDED ack was accepted, and when
    acked: HashMap<String, Instant>,
    /// deliveries made after the transaction's SUCCEEDED ack was accepted
    after_success: Vec<String>,
    /// (node, transaction) delivered but not acknowledged, per node
    unacked: HashMap<String, HashSet<String>>,
}

/// Waits until the ring (as `ch` reports it) lists `members` nodes whose ranges, leaving out
/// `dead`, cover every token exactly once, every live node with a share, and exactly one live
/// compactor.
async fn wait_exact(
    ch: &tonic::transport::Channel,
    members: usize,
    dead: Option<&str>,
) -> pb::Ring {
    let started = Instant::now();
    loop {
        let ring = ExecutorServiceClient::new(ch.clone())
            .get_ring(pb::GetRingRequest {})
            .await
            .unwrap()
            .into_inner();
        let live: Vec<&pb::RingNode> = ring
            .nodes
            .iter()
            .filter(|n| Some(n.node_id.as_str()) != dead)
            .collect();
        let mut ranges: Vec<(i64, i64)> = live
            .iter()
            .flat_map(|n| n.ranges.iter().map(|t| (t.start, t.end)))
            .collect();
        ranges.sort();
        // Expected start of the next range; None once i64::MAX has been covered.
        let mut next = Some(i64::MIN);
        let mut contiguous = true;
        for (s, e) in &ranges {
            if next != Some(*s) {
                contiguous = false;
                break;
            }
            next = e.checked_add(1);
        }
        let exact = contiguous && !ranges.is_empty() && next.is_none();
        let compactors = live.iter().filter(|n| n.compactor).count();
        let shared = live.iter().all(|n| !n.ranges.is_empty());
        if exact && compactors == 1 && shared && live.len() == members {
            return ring;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "ring never exact: {ring:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_the_compactor_of_four_nodes_during_a_drain() {
    let keyspace = unique_keyspace("ringkill");
    let mut ids: Vec<String> = ["r1", "r2", "r3"].iter().map(|s| s.to_string()).collect();
    let mut ports: Vec<u16> = ids.iter().map(|_| free_port()).collect();
    let mut procs: Vec<Option<Proc>> = Vec::new();
    for (id, port) in ids.iter().zip(&ports) {
        procs.push(Some(spawn_node(&keyspace, *port, id)));
        // Let the first node create the schema before the others race for it.
        if procs.len() == 1 {
            connect(*port).await;
        }
    }
    let mut chans = Vec::new();
    for port in &ports {
        chans.push(connect(*port).await);
    }
    // The ring covers the token space exactly once, with one compactor, within seconds.
    let started = Instant::now();
    wait_exact(&chans[0], 3, None).await;
    eprintln!(
        "3 processes: ring complete {:?} after start",
        started.elapsed()
    );

    // Sample the lease rows all along.
    let cql = Arc::new(cql().await);
    let history: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let sampler = {
        let cql = cql.clone();
        let history = history.clone();
        let keyspace = keyspace.clone();
        tokio::spawn(async move {
            loop {
                let cql_text = format!(
                    "SELECT slot, owner, epoch, expires_at, taken_at, released_at, \
                     released_epoch FROM {keyspace}.ring_leases"
                );
                if let Ok(r) = cql.query_unpaged(cql_text, ()).await {
                    let rows = r.into_rows_result().unwrap();
                    let mut h = history.lock().unwrap();
                    type Row = (
                        i32,
                        String,
                        i64,
                        CqlTimestamp,
                        Option<CqlTimestamp>,
                        Option<CqlTimestamp>,
                        Option<i64>,
                    );
                    for row in rows.rows::<Row>().unwrap() {
                        let (slot, owner, epoch, exp, taken, released, released_epoch) =
                            row.unwrap();
                        h.push(Sample {
                            slot,
                            owner,
                            epoch,
                            expires_at: exp.0,
                            taken_at: taken.map_or(0, |t| t.0),
                            released_at: released.map_or(0, |t| t.0),
                            released_epoch: released_epoch.unwrap_or(0),
                        });
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // A fourth process joins and gets its share.
    ids.push("r4".to_string());
    ports.push(free_port());
    procs.push(Some(spawn_node(&keyspace, ports[3], "r4")));
    chans.push(connect(ports[3]).await);
    let joined = Instant::now();
    let ring = wait_exact(&chans[0], 4, None).await;
    eprintln!("r4 joined: ring rebalanced in {:?}", joined.elapsed());
    let victim = ring
        .nodes
        .iter()
        .find(|n| n.compactor)
        .unwrap()
        .node_id
        .clone();
    let victim_index = ids.iter().position(|i| *i == victim).unwrap();

    // Enqueue through every node.
    let enqueue_started = Instant::now();
    let mut tasks = Vec::new();
    for chunk in 0..(ITEMS / 500) {
        let ch = chans[chunk % chans.len()].clone();
        tasks.push(tokio::spawn(async move {
            let requests = (chunk * 500..(chunk + 1) * 500)
                .map(|i| enqueue_req("drain", &format!("d{i:05}"), 0))
                .collect();
            let r = RetryServiceClient::new(ch)
                .enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
                .await
                .unwrap()
                .into_inner();
            let failed: Vec<_> = r
                .results
                .iter()
                .filter(|r| {
                    !matches!(
                        r.result,
                        Some(pb::enqueue_retry_result::Result::Response(_))
                    )
                })
                .collect();
            assert!(
                failed.is_empty(),
                "{} failed, first {:?}",
                failed.len(),
                failed[0]
            );
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    eprintln!("enqueued {ITEMS} in {:?}", enqueue_started.elapsed());

    // Executors on every node, acking as they go.
    let log: Arc<Mutex<Log>> = Arc::default();
    let mut subs = Vec::new();
    for (k, ch) in chans.iter().enumerate() {
        let ch = ch.clone();
        let log = log.clone();
        let node = ids[k].to_string();
        subs.push(tokio::spawn(async move {
            let Ok(resp) = ExecutorServiceClient::new(ch.clone())
                .subscribe(pb::SubscribeRequest {
                    service: "drain".into(),
                    executor_id: format!("x-{node}"),
                    max_in_flight: 200,
                })
                .await
            else {
                return;
            };
            let mut stream = resp.into_inner();
            while let Ok(Some(d)) = stream.message().await {
                {
                    let mut l = log.lock().unwrap();
                    if l.acked.contains_key(&d.transaction_id) {
                        l.after_success.push(d.transaction_id.clone());
                    }
                    l.deliveries
                        .entry(d.transaction_id.clone())
                        .or_default()
                        .push(node.clone());
                    l.unacked
                        .entry(node.clone())
                        .or_default()
                        .insert(d.transaction_id.clone());
                }
                let ch = ch.clone();
                let log = log.clone();
                let node = node.clone();
                tokio::spawn(async move {
                    let ok = ack(&ch, ack_req(&d, pb::AckOutcome::Succeeded))
                        .await
                        .is_ok();
                    let mut l = log.lock().unwrap();
                    if ok {
                        l.acked
                            .entry(d.transaction_id.clone())
                            .or_insert_with(Instant::now);
                        l.unacked.entry(node).or_default().remove(&d.transaction_id);
                    }
                });
            }
        }));
    }
    // Kill the compactor (Node-0) once a quarter has been acknowledged.
    let drain_started = Instant::now();
    while log.lock().unwrap().acked.len() < ITEMS / 4 {
        assert!(
            drain_started.elapsed() < Duration::from_secs(120),
            "drain stalled before the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    procs[victim_index].take().unwrap().kill();
    let killed_at = Instant::now();
    let in_flight_at_kill: HashSet<String> = log
        .lock()
        .unwrap()
        .unacked
        .get(&victim)
        .cloned()
        .unwrap_or_default();
    eprintln!(
        "killed {victim} (the compactor) after {} acks, with {} deliveries in flight on it",
        ITEMS / 4,
        in_flight_at_kill.len()
    );
    // Time until the survivors cover its slots and one of them is the compactor.
    let survivor = chans[(victim_index + 1) % chans.len()].clone();
    wait_exact(&survivor, 3, Some(&victim)).await;
    eprintln!(
        "{victim}'s slots and the compactor role taken over {:?} after the kill (lease TTL 2 s)",
        killed_at.elapsed()
    );
    // Done when every retry is acknowledged, or SUCCEEDED in Cassandra: an ack sent to the victim just
    // before the kill may have been applied without its answer reaching the executor.
    let mut retries = RetryServiceClient::new(survivor.clone());
    loop {
        let missing: Vec<String> = {
            let l = log.lock().unwrap();
            (0..ITEMS)
                .map(|i| format!("d{i:05}"))
                .filter(|t| !l.acked.contains_key(t))
                .collect()
        };
        if missing.len() < 500 {
            let mut open = 0;
            for t in &missing {
                let r = retries
                    .get_retry(pb::GetRetryRequest {
                        service: "drain".into(),
                        transaction_id: t.clone(),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                if r.status != pb::RetryStatus::Succeeded as i32 {
                    open += 1;
                }
            }
            if open == 0 {
                eprintln!("{} acks were lost with {victim} but applied", missing.len());
                break;
            }
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(180),
            "{} of {ITEMS} not finished",
            missing.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drain = drain_started.elapsed();
    sampler.abort();
    for s in subs {
        s.abort();
    }

    {
        let l = log.lock().unwrap();
        let dups: BTreeMap<&String, &Vec<String>> =
            l.deliveries.iter().filter(|(_, v)| v.len() > 1).collect();
        eprintln!(
            "drained {ITEMS} in {drain:?}; {} delivered more than once",
            dups.len()
        );
        assert!(
            l.after_success.is_empty(),
            "SUCCEEDED retries delivered again: {:?}",
            l.after_success
        );
        // In flight on the victim at the kill: delivered by it and never acknowledged there (acks
        // fail from the kill on; deliveries still in the client's buffer count too).
        let lost_with_victim = l.unacked.get(&victim).cloned().unwrap_or_default();
        eprintln!(
            "{} deliveries were unacknowledged on {victim} when it died",
            lost_with_victim.len()
        );
        for (txid, nodes) in &dups {
            assert!(
                lost_with_victim.contains(*txid) && nodes[0] == victim,
                "{txid} delivered by {nodes:?} but was not in flight on the killed node"
            );
        }

        // Lease history: every change of owner is checked from the new row itself. A take
        // records `taken_at`; a hand-back records `released_at`/`released_epoch`, which the
        // later take leaves in place. So a slot handed back by a live node (the join) must be
        // taken at or after its release, and a slot of the killed node only after the
        // victim's last sampled expiry: no slot is held by two nodes at once.
        let h = history.lock().unwrap();
        let mut last: HashMap<i32, Sample> = HashMap::new();
        let (mut expired, mut handed_back) = (0, 0);
        for row in h.iter() {
            if let Some(prev) = last.get(&row.slot) {
                if row.epoch != prev.epoch && row.owner != prev.owner {
                    assert!(row.taken_at > 0, "take without taken_at: {row:?}");
                    if row.released_epoch == prev.epoch {
                        handed_back += 1;
                        assert!(
                            row.taken_at >= row.released_at,
                            "slot {}: {} took epoch {} at {} before {} released epoch {} at {}",
                            row.slot,
                            row.owner,
                            row.epoch,
                            row.taken_at,
                            prev.owner,
                            prev.epoch,
                            row.released_at
                        );
                    } else {
                        expired += 1;
                        assert!(
                            row.taken_at >= prev.expires_at,
                            "slot {}: {} took epoch {} at {} while {}'s epoch {} ran to {}",
                            row.slot,
                            row.owner,
                            row.epoch,
                            row.taken_at,
                            prev.owner,
                            prev.epoch,
                            prev.expires_at
                        );
                    }
                }
            }
            last.insert(row.slot, row.clone());
        }
        assert!(
            expired > 0,
            "no slot of the killed node was seen changing hands"
        );
        assert!(handed_back > 0, "no slot was seen handed back on the join");
        eprintln!(
            "{} lease samples: {handed_back} hand-backs and {expired} takeovers after expiry, none overlapping",
            h.len()
        );
    }
    drop(procs);
    drop_keyspace(&keyspace).await;
}
