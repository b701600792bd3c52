//! `scripts/sdk-roundtrip rust ADDR SERVICE N`: enqueues N retries due in about a second, runs
//! an executor until all N are delivered, stops it (which sends every ack), asks the node
//! for each retry's state (acked = SUCCEEDED) and prints
//! `roundtrip: N enqueued, N delivered, N acked` (exit 0), or exits 1 after
//! `ROUNDTRIP_TIMEOUT` seconds (default 120). `REBOUND_TOKEN` is sent when set.

use std::{
    collections::HashSet,
    process::ExitCode,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant, SystemTime},
};

use rebound_client::{Client, Executor, Job, Outcome, RetryStatus};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, service, n] = args.as_slice() else {
        eprintln!("usage: roundtrip ADDR SERVICE N");
        return ExitCode::from(2);
    };
    let Ok(n) = n.parse::<usize>() else {
        eprintln!("N must be a number, not {n:?}");
        return ExitCode::from(2);
    };
    let addr = if addr.contains("://") {
        addr.clone()
    } else {
        format!("http://{addr}")
    };
    let token = std::env::var("REBOUND_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let timeout: u64 = std::env::var("ROUNDTRIP_TIMEOUT")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(120);
    let run = format!(
        "{:x}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
    );
    let mut client = match Client::connect(&addr).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot connect to {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(t) = &token {
        client = match client.with_token(t) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("bad token: {e}");
                return ExitCode::FAILURE;
            }
        };
    }
    let prefix = format!("roundtrip-{run}-");
    let mut enqueued = 0;
    for start in (0..n).step_by(500) {
        let batch: Vec<_> = (start..n.min(start + 500))
            .map(|i| {
                client
                    .enqueue(service.as_str(), format!("{prefix}{i}"))
                    .payload(b"x".to_vec())
                    .delay(Duration::from_secs(1))
                    .into_request()
            })
            .collect();
        match client.enqueue_batch(batch).await {
            Ok(results) => enqueued += results.iter().filter(|r| r.is_ok()).count(),
            Err(e) => eprintln!("batch failed: {e}"),
        }
    }
    let delivered = Arc::new(Mutex::new(HashSet::new()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let handler = {
        let delivered = delivered.clone();
        let prefix = prefix.clone();
        move |job: Job| {
            if job.transaction_id.starts_with(&prefix) {
                delivered
                    .lock()
                    .expect("delivered")
                    .insert(job.transaction_id);
            }
            async { Outcome::success() }
        }
    };
    let executor = Executor::builder(client.clone(), service.as_str()).concurrency(64);
    let run = tokio::spawn(executor.run(handler, async {
        let _ = stopped.await;
    }));
    let started = Instant::now();
    while delivered.lock().expect("delivered").len() < n
        && started.elapsed() < Duration::from_secs(timeout)
        && !run.is_finished()
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A graceful stop sends every ack before it returns; then the node says which are done.
    let _ = stop.send(());
    if let Ok(Err(e)) = run.await {
        eprintln!("executor: {e}");
    }
    let delivered = delivered.lock().expect("delivered").len();
    let acked = Arc::new(AtomicUsize::new(0));
    let mut checks = tokio::task::JoinSet::new();
    for i in 0..n {
        while checks.len() >= 32 {
            checks.join_next().await;
        }
        let (client, service, acked) = (client.clone(), service.clone(), acked.clone());
        let tx = format!("{prefix}{i}");
        checks.spawn(async move {
            if let Ok(r) = client.get(service.as_str(), tx.as_str()).await {
                if r.status == RetryStatus::Succeeded {
                    acked.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while checks.join_next().await.is_some() {}
    let acked = acked.load(Ordering::Relaxed);
    println!("roundtrip: {enqueued} enqueued, {delivered} delivered, {acked} acked");
    if enqueued == n && delivered == n && acked >= n {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
