//! The loss of one Cassandra node (signalled, kept down, restarted and left to rejoin, each
//! step timed), and the samples of the Rebound nodes' HTTP listeners meanwhile.

use std::{
    path::PathBuf,
    process::Command,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use rebound_tools::chaos::{cluster::signal, history::now_ms};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{traffic::Shared, Args};

/// Runs the Cassandra script with the inherited environment (the cluster's).
async fn script(path: PathBuf, args: Vec<String>) -> anyhow::Result<(bool, String)> {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(&path).args(&args).output()?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        Ok((out.status.success(), text))
    })
    .await?
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

/// Whether `nodetool status` run against node `view` shows `n` nodes UN.
async fn all_un(a: &Args, view: usize, n: usize) -> bool {
    match script(
        a.script.clone(),
        vec!["nodetool".into(), view.to_string(), "status".into()],
    )
    .await
    {
        Ok((true, out)) => out.lines().filter(|l| l.starts_with("UN ")).count() >= n,
        _ => false,
    }
}

#[derive(Debug, Default, Clone)]
pub(super) struct LossTimes {
    /// All ms on Cassandra's clock.
    pub(super) kill: i64,
    pub(super) exited: i64,
    pub(super) restart: i64,
    pub(super) cql: i64,
    pub(super) un_others: Option<i64>,
    pub(super) un_victim: Option<i64>,
    pub(super) in_flight: usize,
    pub(super) restart_ok: bool,
    pub(super) detail: String,
}

pub(super) async fn node_loss(
    a: Args,
    shared: Arc<Shared>,
    trigger: usize,
) -> anyhow::Result<LossTimes> {
    while shared.accepted.load(Ordering::Relaxed) < trigger {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let v = a.victim;
    let (ok, out) = script(a.script.clone(), vec!["pid".into(), v.to_string()]).await?;
    let pid: u32 = out
        .trim()
        .parse()
        .ok()
        .filter(|_| ok)
        .ok_or_else(|| anyhow::anyhow!("no pid for Cassandra node {v}: {out}"))?;
    let mut t = LossTimes {
        kill: now_ms(),
        ..Default::default()
    };
    t.in_flight = shared.history.in_flight_at(t.kill, None);
    println!(
        "node_loss: SIG{} to Cassandra node {v} (pid {pid}) with {} accepted, {} deliveries in flight",
        a.signal,
        shared.accepted.load(Ordering::Relaxed),
        t.in_flight
    );
    signal(pid, &a.signal);
    let deadline = Instant::now() + Duration::from_secs(90);
    while pid_alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if pid_alive(pid) {
        signal(pid, "KILL");
    }
    t.exited = now_ms();
    // The script keeps a pid file; stop-node removes it (the process is gone already).
    let _ = script(a.script.clone(), vec!["stop-node".into(), v.to_string()]).await;
    tokio::time::sleep(a.down).await;
    t.restart = now_ms();
    println!(
        "node_loss: restarting Cassandra node {v} after {:.1} s down",
        (t.restart - t.exited) as f64 / 1000.0
    );
    let (ok, out) = script(a.script.clone(), vec!["start-node".into(), v.to_string()]).await?;
    t.cql = now_ms();
    t.restart_ok = ok;
    if !ok {
        t.detail = format!("start-node failed: {}", out.trim());
        return Ok(t);
    }
    let others: Vec<usize> = (1..=3).filter(|&i| i != v).collect();
    let deadline = Instant::now() + Duration::from_secs(180);
    while Instant::now() < deadline && (t.un_others.is_none() || t.un_victim.is_none()) {
        if t.un_others.is_none() && all_un(&a, others[0], 3).await {
            t.un_others = Some(now_ms());
        }
        if t.un_victim.is_none() && all_un(&a, v, 3).await {
            t.un_victim = Some(now_ms());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    t.detail = format!(
        "node loss: Cassandra node {v} SIG{}, down {:.1} s, restarted, rejoined: {}",
        a.signal,
        (t.restart - t.exited) as f64 / 1000.0,
        t.un_others.is_some() && t.un_victim.is_some()
    );
    Ok(t)
}

/// One sample of a Rebound node's HTTP listener: /readyz status and the store error count.
async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, text))
    };
    tokio::time::timeout(Duration::from_secs(3), fut)
        .await
        .ok()
        .flatten()
}

/// One node in one sample: /readyz answered 200, its store error count.
pub(super) type NodeSample = (Option<bool>, Option<f64>);

#[derive(Default, Debug)]
pub(super) struct Samples {
    /// (ms, per node)
    pub(super) rows: Vec<(i64, Vec<NodeSample>)>,
}

pub(super) async fn sampler(http: Vec<String>, stop: Arc<AtomicBool>) -> Samples {
    let mut s = Samples::default();
    while !stop.load(Ordering::SeqCst) {
        let at = now_ms();
        let mut row = Vec::new();
        for addr in &http {
            let ready = http_get(addr, "/readyz").await.map(|(c, _)| c == 200);
            let errors = http_get(addr, "/metrics").await.map(|(_, body)| {
                body.lines()
                    .filter(|l| l.starts_with("rebound_store_request_errors_total"))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .sum::<f64>()
            });
            row.push((ready, errors));
        }
        s.rows.push((at, row));
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    s
}
