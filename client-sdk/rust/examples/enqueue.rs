//! Enqueues one retry and reads it back.
//!
//! ```text
//! cargo run -p rebound-client --example enqueue -- http://127.0.0.1:50051
//! ```
//!
//! Optional further arguments: the service (default `example`) and the transaction id (default
//! derived from the current time, so each run schedules a new retry).

use std::{
    process::ExitCode,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use rebound_client::{Client, Error, RetryPolicy};

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:50051".to_owned());
    let service = args.next().unwrap_or_else(|| "example".to_owned());
    let transaction_id = args.next().unwrap_or_else(|| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        format!("example-{}", now.as_millis())
    });

    match run(&addr, &service, &transaction_id).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e} (retryable: {})", e.is_retryable());
            ExitCode::FAILURE
        }
    }
}

async fn run(addr: &str, service: &str, transaction_id: &str) -> Result<(), Error> {
    let client = Client::connect(addr).await?;
    println!("connected to {addr}");

    let enqueued = client
        .enqueue(service, transaction_id)
        .payload(format!("{{\"hello\":\"{transaction_id}\"}}"))
        .attribute("origin", "rebound-client example")
        .attempt(1)
        .last_error("simulated failure")
        .delay(Duration::from_secs(60))
        .policy(
            RetryPolicy::new()
                .max_attempts(3)
                .initial_backoff(Duration::from_secs(10)),
        )
        .send()
        .await?;
    println!(
        "enqueued {}: due {}, generation {}, deduplicated: {}",
        enqueued.transaction_id,
        describe(enqueued.due_time),
        enqueued.generation,
        enqueued.deduplicated,
    );

    let retry = client.get(service, transaction_id).await?;
    println!(
        "read back {}/{}: {} (attempt {}, generation {}), due {}",
        retry.service,
        retry.transaction_id,
        retry.status,
        retry.attempt,
        retry.generation,
        describe(retry.due_time),
    );
    println!(
        "payload: {}, attributes: {:?}, last error: {:?}",
        String::from_utf8_lossy(&retry.payload),
        retry.attributes,
        retry.last_error,
    );
    println!("effective policy: {:#?}", retry.policy);
    Ok(())
}

/// A time as Unix seconds plus its distance from now, readable without a date library.
fn describe(t: SystemTime) -> String {
    let unix = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    match t.duration_since(SystemTime::now()) {
        Ok(ahead) => format!("at {unix} (in {}s)", ahead.as_secs()),
        Err(e) => format!("at {unix} ({}s ago)", e.duration().as_secs()),
    }
}
