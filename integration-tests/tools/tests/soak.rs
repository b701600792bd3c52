//! The CI-size soak: 3 minutes of `scripts/soak` (see `rebound_tools::chaos::soak`):
//! 3 real `rebound-server` processes under a steady mixed load with a fault, sampled every
//! 10 s, then drained and judged (checker, directory end state, tombstone warnings, RSS and
//! open files, lateness, subscribers). Needs the Cassandra of `scripts/cassandra start` and
//! the server binary (`cargo build -p rebound-server --bin rebound-server`, or
//! REBOUND_SERVER_BIN). Seed: REBOUND_SOAK_SEED (default 1); load: REBOUND_SOAK_SECONDS
//! (default 180; 0 skips it). Takes about 4 minutes; the samples and the summary are written
//! under target/soak/.

use std::time::Duration;

use rebound_tools::chaos::{cluster, soak};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_minute_soak_shows_nothing_grows() {
    let env = |k: &str, default: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let secs = env("REBOUND_SOAK_SECONDS", 180);
    if secs == 0 {
        println!("REBOUND_SOAK_SECONDS=0: the soak is skipped");
        return;
    }
    let o = soak::SoakOptions::new(env("REBOUND_SOAK_SEED", 1), Duration::from_secs(secs));
    let report = soak::run(o).await.expect("the soak harness runs");
    cluster::emergency_cleanup_cassandra();
    println!("{}", report.text);
    assert!(report.passed, "the soak failed:\n{}", report.text);
}
