//! `bench costs`: Cassandra CPU per state-row operation, measured from its process.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Context;

use super::*;

/// CPU seconds the process `pid` has used so far (utime + stime).
/// What one phase of a run costs per item: CPU of Cassandra, of the node and of this harness
/// (µs, from /proc), and the node's Cassandra requests (the count of its
/// `rebound_store_request_duration_seconds` histogram, from its /metrics).
#[derive(Clone)]
pub(crate) struct Meter {
    cassandra: u32,
    node: u32,
    metrics: Option<std::net::SocketAddr>,
}

#[derive(Clone, Copy, Default)]
pub(crate) struct Reading {
    cassandra: f64,
    node: f64,
    client: f64,
    requests: Option<f64>,
}

impl Meter {
    pub(crate) fn from_args(a: &Args, node: u32) -> anyhow::Result<Meter> {
        let metrics = match a.map.get("metrics") {
            Some(m) => Some(m.parse().with_context(|| format!("--metrics {m:?}"))?),
            None => None,
        };
        Ok(Meter {
            cassandra: a.get("cassandra-pid", 0)?,
            node,
            metrics,
        })
    }

    pub(crate) async fn read(&self) -> Reading {
        let cpu = |pid: u32| {
            if pid > 0 {
                cpu_secs(pid).unwrap_or(0.0)
            } else {
                0.0
            }
        };
        let requests = match self.metrics {
            None => None,
            Some(addr) => rebound_integration_tests::http_get(addr, "/metrics")
                .await
                .ok()
                .map(|(_, body)| {
                    body.lines()
                        .filter(|l| l.starts_with("rebound_store_request_duration_seconds_count"))
                        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                        .sum()
                }),
        };
        Reading {
            cassandra: cpu(self.cassandra),
            node: cpu(self.node),
            client: cpu(std::process::id()),
            requests,
        }
    }

    /// The cost per item of what happened since `before`.
    pub(crate) async fn per_item(&self, before: Reading, items: usize) -> J {
        let after = self.read().await;
        let n = items.max(1) as f64;
        let us = |a: f64, b: f64, pid: u32| {
            if pid > 0 {
                J::N((a - b) * 1e6 / n)
            } else {
                J::Null
            }
        };
        let client = (after.client - before.client) * 1e6 / n;
        // The whole system, as the peers' are counted: the server side (Cassandra and the
        // node) and the harness (producer and executors).
        let server = (self.cassandra > 0 && self.node > 0)
            .then(|| (after.cassandra - before.cassandra + after.node - before.node) * 1e6 / n);
        J::O(vec![
            (
                "cassandra_cpu_us",
                us(after.cassandra, before.cassandra, self.cassandra),
            ),
            ("node_cpu_us", us(after.node, before.node, self.node)),
            ("client_cpu_us", J::N(client)),
            ("server_cpu_us", server.map_or(J::Null, J::N)),
            ("total_cpu_us", server.map_or(J::Null, |s| J::N(s + client))),
            (
                "cassandra_requests",
                match (after.requests, before.requests) {
                    (Some(a), Some(b)) => J::N((a - b) / n),
                    _ => J::Null,
                },
            ),
        ])
    }
}

/// Waits (at most 30 s) until Cassandra is quiet: under 0.3 of a core over a second. A schema
/// change (the node's migrations, a baseline's CREATE TABLE) keeps Cassandra busy for several
/// seconds after it returns; every system measured on Cassandra starts after the same wait.
pub(crate) async fn quiesce(a: &Args, what: &str) -> anyhow::Result<f64> {
    let pid: u32 = a.get("cassandra-pid", 0)?;
    let started = Instant::now();
    if pid == 0 {
        return Ok(0.0);
    }
    while started.elapsed() < Duration::from_secs(30) {
        let before = cpu_secs(pid)?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        if cpu_secs(pid)? - before < 0.3 {
            break;
        }
    }
    let waited = started.elapsed().as_secs_f64();
    eprintln!("{what}: Cassandra quiet after {waited:.1} s");
    Ok(waited)
}

pub(crate) fn cpu_secs(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_name = &stat[stat.rfind(')').context("bad /proc stat")? + 2..];
    let f: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// What one state-row operation of Rebound's store costs Cassandra, in requests per second
/// and Cassandra CPU per operation, one at a time (each call its own request) and at
/// `--concurrency` (coalesced into `IN` reads and small batches). On a box where Cassandra
/// shares the cores this is what bounds Rebound. Needs `--cassandra-pid PID`.
pub(crate) async fn costs(a: &Args) -> anyhow::Result<J> {
    use rebound_server::config::Config;
    use rebound_store::{policy::RetryPolicy, RetryStore, Status, TxState};
    use rebound_store_cassandra as cassandra;
    let n: usize = a.get("n", 20_000)?;
    let conc: usize = a.get("concurrency", 32)?;
    let pid: u32 = a.get("cassandra-pid", 0)?;
    anyhow::ensure!(pid > 0, "--cassandra-pid is required");
    let config = Config {
        cassandra_contact_points: vec![a.text("cassandra", "127.0.0.1:9042")],
        keyspace: format!("bench_costs_{}", now_ms()),
        ..Config::default()
    };
    let clock: rebound_store::clock::SharedClock = Arc::new(rebound_store::clock::SystemClock);
    rebound_server::node::run_migrations(&config, &clock).await?;
    let opts = rebound_server::node::cassandra_options(&config).expect("cassandra options");
    let connection = cassandra::connect(&opts).await?;
    let store: Arc<dyn RetryStore> =
        Arc::new(cassandra::CassandraStore::new(&connection, &opts).await?);
    let state = |i: usize| TxState {
        service: "bench".into(),
        transaction_id: format!("tx-{i}"),
        status: Status::Scheduled,
        generation: i as i64,
        attempt: 1,
        payload: vec![b'x'; 64],
        attributes: Default::default(),
        policy: RetryPolicy::default(),
        first_enqueued_at_ms: now_ms(),
        last_enqueued_at_ms: now_ms(),
        updated_at_ms: now_ms(),
        due_at_ms: now_ms(),
        last_error: String::new(),
        location: None,
        enqueue_count: 1,
        delivery_count: 0,
        legacy_columns: false,
        base_generation: 0,
        cancelled_generation: None,
        succeeded_generation: None,
        dependency: String::new(),
        saga: Default::default(),
        history: Default::default(),
        trace: Default::default(),
        written: Default::default(),
    };
    let mut fields = Vec::new();
    for (label, c) in [("one_at_a_time", 1usize), ("concurrent", conc)] {
        let base = if c == 1 { 0 } else { n };
        let mut ops = Vec::new();
        for op in ["write", "read_hit", "read_miss"] {
            let cpu0 = cpu_secs(pid)?;
            let (rate, _) = closed_loop(n, c, |i| {
                let store = store.clone();
                let st = state(base + i);
                async move {
                    match op {
                        "write" => store.put_state(&st, None).await?,
                        "read_hit" => {
                            let got = store.get_state("bench", &st.transaction_id).await?;
                            anyhow::ensure!(got.is_some_and(|g| g.generation == st.generation));
                        }
                        _ => {
                            let missing = format!("missing-{}", st.transaction_id);
                            anyhow::ensure!(store.get_state("bench", &missing).await?.is_none());
                        }
                    }
                    Ok(())
                }
            })
            .await?;
            let us = (cpu_secs(pid)? - cpu0) * 1e6 / n as f64;
            eprintln!("costs: {label} {op}: {rate:.0}/s, Cassandra {us:.0} us CPU each");
            ops.push((
                op,
                J::O(vec![
                    ("ops_per_sec", J::N(rate)),
                    ("cassandra_cpu_us", J::N(us)),
                ]),
            ));
        }
        fields.push((label, J::O(ops)));
    }
    // A session of its own: the store's connection carries only its prepared statements.
    session(a)
        .await?
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {}", config.keyspace), ())
        .await?;
    fields.push(("n", J::N(n as f64)));
    fields.push(("concurrency", J::N(conc as f64)));
    Ok(J::O(fields))
}
