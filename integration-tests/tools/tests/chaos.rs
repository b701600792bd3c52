//! The CI-size chaos round: 3 real `rebound-server` processes, a seeded workload and faults
//! (see `rebound_tools::chaos`). Needs the Cassandra of `scripts/cassandra start`
//! and the server binary (`cargo build -p rebound-server --bin rebound-server`, or
//! REBOUND_SERVER_BIN). Seed: REBOUND_CHAOS_SEED (default 1); faulty phase:
//! REBOUND_CHAOS_SECONDS (default 75). Takes under 3 minutes.

use std::time::Duration;

use rebound_tools::chaos;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_round_has_no_violations() {
    let seed = std::env::var("REBOUND_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let secs = std::env::var("REBOUND_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(75);
    let mut o = chaos::Options::new(seed, Duration::from_secs(secs));
    o.drain_timeout = Duration::from_secs(45);
    let report = chaos::run(o).await.expect("the chaos harness runs");
    chaos::cluster::emergency_cleanup_cassandra();
    println!("{}", report.text);
    assert_eq!(report.violations, 0, "violations:\n{}", report.text);
}
