//! A three-step order saga: reserve stock (done), charge the card (always declined here), ship
//! (never reached). The charge is retried three times; then its compensations run in reverse
//! order of the steps: void the card authorisation, then release the stock, each once.
//!
//!   cargo run -p rebound-client --example saga -- http://127.0.0.1:50051

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rebound_client::{Client, Compensation, Executor, Job, Outcome, RetryPolicy, RetryStatus};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:50051".into());
    let client = Client::connect(&addr).await?;
    let order = format!("order-{}", std::process::id());
    // Step 1 reserved the stock; step 2, the charge, failed: retry it, and name what undoes
    // the steps before it, in the order to run them.
    client
        .enqueue("checkout", format!("{order}/charge"))
        .payload(format!(r#"{{"order": "{order}", "cents": 1200}}"#))
        .last_error("card network timeout")
        .policy(
            RetryPolicy::new()
                .max_attempts(3)
                .initial_backoff(Duration::from_millis(200)),
        )
        .delay(Duration::ZERO)
        .compensation(Compensation::new(
            "checkout",
            format!("{order}/void-authorisation"),
        ))
        .compensation(Compensation::new("stock", format!("{order}/release")).payload(order.clone()))
        .send()
        .await?;

    // Each service's executor: the charge is declined every time; a compensation succeeds.
    let ran = Arc::new(Mutex::new(Vec::<String>::new()));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut executors = Vec::new();
    for service in ["checkout", "stock"] {
        let ran = ran.clone();
        let mut stopped = stopped.clone();
        let handler = move |job: Job| {
            let ran = ran.clone();
            async move {
                if job.transaction_id.ends_with("/charge") {
                    println!("charge attempt {}: declined", job.attempt);
                    return Outcome::retry("card declined");
                }
                println!("compensating: {}", job.transaction_id);
                ran.lock().unwrap().push(job.transaction_id.clone());
                Outcome::success()
            }
        };
        let executor = Executor::builder(client.clone(), service).run(handler, async move {
            let _ = stopped.wait_for(|s| *s).await;
        });
        executors.push(tokio::spawn(executor));
    }

    // Wait until the charge's chain says every compensation succeeded.
    let started = Instant::now();
    loop {
        let charge = client.get("checkout", format!("{order}/charge")).await?;
        let chain = charge.chain.expect("the charge carries its compensations");
        let done = chain
            .compensations
            .iter()
            .all(|c| c.status == Some(RetryStatus::Succeeded));
        if done {
            println!(
                "charge {:?} after {} attempts; saga compensated",
                charge.status, charge.attempt
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the saga did not finish"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = stop.send(true);
    for e in executors {
        e.await??;
    }
    let ran = ran.lock().unwrap().clone();
    assert_eq!(
        ran,
        [
            format!("{order}/void-authorisation"),
            format!("{order}/release")
        ],
        "in order, each once"
    );
    Ok(())
}
