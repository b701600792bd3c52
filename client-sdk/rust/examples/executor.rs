//! Processes a service's due retries: prints each delivery and acknowledges it.
//!
//! ```text
//! cargo run -p rebound-client --example executor -- http://127.0.0.1:50051 orders
//! ```
//!
//! Every `N`th delivery (third argument, default 5; 0 for never) asks for a retry in 10 s
//! instead, to show retries coming back. Ctrl-C stops taking deliveries, lets running handlers
//! finish and exits. Set `RUST_LOG=rebound_client=debug` to see acks and deadline extensions.

use std::{
    process::ExitCode,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, SystemTime},
};

use rebound_client::{Executor, Job, Outcome};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();

    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:50051".to_owned());
    let service = args.next().unwrap_or_else(|| "example".to_owned());
    let retry_every: u64 = match args.next().map(|n| n.parse()) {
        None => 5,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("the third argument must be a number: {e}");
            return ExitCode::FAILURE;
        }
    };

    let executor = Executor::builder(addr.as_str(), service.as_str())
        .concurrency(4)
        .build();
    println!(
        "executing {service} from {addr} as {} (Ctrl-C to stop)",
        executor.executor_id()
    );

    let seen = Arc::new(AtomicU64::new(0));
    let handler = move |job: Job| {
        let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
        async move { handle(n, retry_every, job).await }
    };
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
        println!("shutting down: waiting for running handlers");
    };
    match executor.run(handler, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn handle(n: u64, retry_every: u64, job: Job) -> Outcome {
    let late = SystemTime::now()
        .duration_since(job.due_time)
        .unwrap_or_default();
    println!(
        "#{n} {}/{} attempt {} ({} ms after due), payload {}, attributes {:?}, last error {:?}",
        job.service,
        job.transaction_id,
        job.attempt,
        late.as_millis(),
        String::from_utf8_lossy(&job.payload),
        job.attributes,
        job.last_error,
    );
    // Stand-in for real work.
    tokio::time::sleep(Duration::from_millis(100)).await;
    if n.checked_rem(retry_every) == Some(0) {
        println!("#{n} -> RETRY in 10 s");
        Outcome::retry_after(
            Duration::from_secs(10),
            format!("simulated failure (delivery #{n})"),
        )
    } else {
        println!("#{n} -> SUCCEEDED");
        Outcome::success()
    }
}
