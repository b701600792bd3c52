//! The one harness for end-to-end tests against the real Cassandra started by
//! `scripts/cassandra`, used by the tests of this crate, by those of rebound-cli (as a
//! dev-dependency) and by the test tools of rebound-tools (`integration-tests/tools`: chaos,
//! soak, benchmarks, node loss), which depend on it and never the other way round. Each test
//! gets its own keyspace, and either an in-process node on port 0 with an injected clock
//! ([`TestNode`]) or real `rebound-server` processes ([`process`]). Request builders and
//! executor calls shared by the tests live here too; [`rows`] reads the directory and state
//! rows back for tests that check what was written.

pub mod http;
pub mod pki;
pub mod process;
pub mod receiver;
pub mod rows;

use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::Duration,
};

use rebound_proto::v1::{
    self as pb, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use rebound_server::{config::Config, node::Node};
use rebound_store::clock::{ManualClock, SharedClock, SystemClock};
use scylla::client::{session::Session, session_builder::SessionBuilder};
use tonic::transport::Channel;

/// The Cassandra the tests use: `REBOUND_TEST_CASSANDRA` or 127.0.0.1:9042.
pub fn contact_point() -> String {
    std::env::var("REBOUND_TEST_CASSANDRA").unwrap_or_else(|_| "127.0.0.1:9042".into())
}

/// A keyspace name no other test (or earlier run) uses.
pub fn unique_keyspace(test: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let short: String = test
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(20)
        .collect();
    format!(
        "t_{}_{}_{}_{}",
        short.to_ascii_lowercase(),
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        rand::random::<u16>()
    )
}

pub async fn cql() -> Session {
    SessionBuilder::new()
        .known_node(contact_point())
        .build()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot reach Cassandra at {} ({e}); start it with `scripts/cassandra start`",
                contact_point()
            )
        })
}

/// Drops a test keyspace (stop its nodes first: a node scanning a dropped keyspace makes
/// Cassandra log errors).
pub async fn drop_keyspace(keyspace: &str) {
    drop_keyspace_with(&cql().await, keyspace).await;
}

async fn drop_keyspace_with(cql: &Session, keyspace: &str) {
    let _ = cql
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
        .await;
}

/// `SELECT COUNT(*)` of `keyspace.table`.
pub async fn count_rows(cql: &Session, keyspace: &str, table: &str) -> usize {
    let res = cql
        .query_unpaged(format!("SELECT COUNT(*) FROM {keyspace}.{table}"), ())
        .await
        .unwrap_or_else(|e| panic!("counting {table}: {e}"))
        .into_rows_result()
        .unwrap();
    let (n,): (i64,) = res.single_row().unwrap();
    n as usize
}

/// A test configuration: 2 s windows, small buckets, few lanes, a unique keyspace.
pub fn test_config(test: &str) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        cassandra_contact_points: vec![contact_point()],
        keyspace: unique_keyspace(test),
        node_id: "node-a".into(),
        window_seconds: 2,
        skew_margin_ms: 500,
        bucket_size: 4,
        lanes: 2,
        cassandra_request_timeout_ms: 2_000,
        cassandra_startup_wait_ms: 10_000,
        shutdown_grace_ms: 1_000,
        slots: 8,
        lease_ttl_ms: 3_000,
        // Most tests stand the node on a manual clock; syncing it to Cassandra's would undo
        // that. The clock-skew tests turn it on over a skewed system clock.
        clock_sync: false,
        // Tests that read /metrics or /readyz turn the listener on (on port 0).
        http_listen: None,
        ..Config::default()
    }
}

/// A node running in this process, its gRPC client and a CQL session for checks.
pub struct TestNode {
    pub node: Option<Node>,
    pub client: RetryServiceClient<Channel>,
    pub channel: Channel,
    pub cql: Session,
    pub config: Config,
}

/// Logs of the node under test, when `RUST_LOG` is set.
pub fn init_logs() {
    if std::env::var("RUST_LOG").is_ok() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

impl TestNode {
    pub async fn start(config: Config, clock: SharedClock) -> TestNode {
        init_logs();
        let node = Node::start(config.clone(), clock)
            .await
            .expect("node starts");
        let channel = Channel::from_shared(format!("http://{}", node.local_addr()))
            .unwrap()
            .connect()
            .await
            .expect("connect to node");
        TestNode {
            node: Some(node),
            client: RetryServiceClient::new(channel.clone()),
            channel,
            cql: cql().await,
            config,
        }
    }

    /// A node with a manual clock standing at `now_ms`.
    pub async fn with_manual_clock(config: Config, now_ms: i64) -> (TestNode, ManualClock) {
        let clock = ManualClock::new(now_ms);
        let node = TestNode::start(config, Arc::new(clock.clone())).await;
        (node, clock)
    }

    pub async fn with_system_clock(config: Config) -> TestNode {
        TestNode::start(config, Arc::new(SystemClock)).await
    }

    /// Waits until this node holds the compactor lease for at least another second of `now`
    /// (after a manual clock jump the ring needs one renewal round).
    pub async fn wait_for_compactor_lease(&self, now_ms: i64) {
        use rebound_engine::ownership::Ownership;
        let ring = self
            .node
            .as_ref()
            .and_then(|n| n.engine().ring().cloned())
            .expect("a ring");
        let started = std::time::Instant::now();
        while !ring.is_compactor(now_ms + 1_000) {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "no compactor lease"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn ks(&self) -> &str {
        &self.config.keyspace
    }

    /// Every row of a table as text, via CQL (`SELECT JSON`), sorted.
    pub async fn rows(&self, table: &str, columns: &str) -> Vec<String> {
        let res = self
            .cql
            .query_unpaged(
                format!("SELECT JSON {columns} FROM {}.{table}", self.ks()),
                (),
            )
            .await
            .unwrap_or_else(|e| panic!("reading {table}: {e}"))
            .into_rows_result()
            .unwrap();
        let mut out: Vec<String> = res
            .rows::<(String,)>()
            .unwrap()
            .map(|r| r.unwrap().0)
            .collect();
        out.sort();
        out
    }

    /// Runs `cql` (with `{ks}` standing for the test keyspace) and deserializes every row.
    pub async fn select<R>(&self, cql: &str) -> Vec<R>
    where
        R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
    {
        let res = self
            .cql
            .query_unpaged(cql.replace("{ks}", self.ks()), ())
            .await
            .unwrap_or_else(|e| panic!("{cql}: {e}"))
            .into_rows_result()
            .unwrap();
        res.rows::<R>().unwrap().map(|r| r.unwrap()).collect()
    }

    pub async fn count(&self, table: &str) -> usize {
        count_rows(&self.cql, self.ks(), table).await
    }

    /// Stops the node and drops the keyspace.
    pub async fn finish(mut self) {
        if let Some(node) = self.node.take() {
            tokio::time::timeout(Duration::from_secs(10), node.shutdown())
                .await
                .expect("node stops within 10 s")
                .expect("node stops cleanly");
        }
        drop_keyspace_with(&self.cql, &self.config.keyspace).await;
    }
}

/// The five tiers of the directory, top down (docs/architecture.md "Data model").
pub const DIRECTORY_TABLES: &[&str] = &[
    "days_by_year",
    "windows_by_day",
    "instances_by_window",
    "buckets_by_instance",
    "retry_transactions_by_bucket",
];

/// The directory, state and dead-letter tables, all of which must be empty when nothing was
/// written.
pub const DATA_TABLES: &[&str] = &[
    "days_by_year",
    "windows_by_day",
    "instances_by_window",
    "buckets_by_instance",
    "retry_transactions_by_bucket",
    "transactions",
    "dead_letters",
];

/// One HTTP/1.1 GET of `path` on `addr`: the status code and the body (tests of the metrics
/// and probes listener; no HTTP client crate needed).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    // Bodies come chunked or whole; undo the chunking when there is some.
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        http::unchunk(body)
    } else {
        body.to_string()
    };
    Ok((code, body))
}

/// Milliseconds of a UTC date-time written as `YYYY-MM-DD HH:MM:SS.mmm`.
pub fn utc_ms(s: &str) -> i64 {
    use chrono::{NaiveDateTime, TimeZone, Utc};
    let t = NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.3f").expect("date-time");
    Utc.from_utc_datetime(&t).timestamp_millis()
}

pub fn ts_ms(t: &prost_types::Timestamp) -> i64 {
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

/// A configuration for dispatch tests: 1 s windows, a short skew margin, fast scans.
pub fn dispatch_config(test: &str) -> Config {
    Config {
        window_seconds: 1,
        skew_margin_ms: 200,
        bucket_size: 3,
        lanes: 2,
        scan_interval_ms: 50,
        compaction_interval_ms: 100,
        ..test_config(test)
    }
}

/// Waits for the next delivery on a subscription, or `None` after `within` (or at its end).
pub async fn next_delivery(
    stream: &mut tonic::Streaming<pb::Delivery>,
    within: Duration,
) -> Option<pb::Delivery> {
    match tokio::time::timeout(within, stream.message()).await {
        Ok(Ok(Some(d))) => Some(d),
        Ok(Ok(None)) => None,
        Ok(Err(e)) => panic!("subscription failed: {e}"),
        Err(_) => None,
    }
}

/// Polls `check` every 100 ms until it is true or `within` has passed.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = std::time::Instant::now();
    while !check().await {
        assert!(
            started.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SHA-256 of a token in hex, as a credentials file stores it.
pub fn token_sha256(token: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes a credentials file (see `rebound_server::auth`) for `test` and returns its path.
/// Each entry: name, token, services, admin.
pub fn credentials_file(test: &str, entries: &[(&str, &str, &[&str], bool)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rebound-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut text = String::new();
    for (name, token, services, admin) in entries {
        let services: Vec<String> = services.iter().map(|s| format!("{s:?}")).collect();
        text.push_str(&format!(
            "[[credential]]\nname = {name:?}\ntoken_sha256 = \"{}\"\nservices = [{}]\nadmin = {admin}\n\n",
            token_sha256(token),
            services.join(", ")
        ));
    }
    let file = dir.join("credentials.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// `msg` with the metadata `authorization: Bearer <token>` when a token is given.
pub fn with_token<T>(msg: T, token: Option<&str>) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Some(t) = token {
        r.metadata_mut()
            .insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    r
}

/// The current time of a manual clock.
pub fn clock_now(c: &ManualClock) -> i64 {
    use rebound_store::clock::Clock;
    c.now_ms()
}

/// A protobuf duration of `ms` milliseconds.
pub fn dur_ms(ms: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: ms / 1000,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

/// A protobuf duration of `s` seconds.
pub fn secs(s: i64) -> prost_types::Duration {
    dur_ms(s * 1000)
}

/// A protobuf timestamp of `ms` milliseconds since the epoch.
pub fn ts(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// A first attempt of `txid` for `service`, due in `delay_ms`, its payload the id's bytes.
pub fn enqueue_req(service: &str, txid: &str, delay_ms: u64) -> pb::EnqueueRetryRequest {
    pb::EnqueueRetryRequest {
        service: service.into(),
        transaction_id: txid.into(),
        payload: txid.as_bytes().to_vec(),
        schedule: Some(pb::enqueue_retry_request::Schedule::Delay(dur_ms(
            delay_ms as i64,
        ))),
        attempt: 1,
        ..Default::default()
    }
}

/// True when every item of a batch was accepted.
pub fn batch_accepted(r: &pb::EnqueueRetryBatchResponse) -> bool {
    r.results.iter().all(|r| {
        matches!(
            r.result,
            Some(pb::enqueue_retry_result::Result::Response(_))
        )
    })
}

/// The retry of `txid` as GetRetry answers it.
pub async fn get_retry(ch: &Channel, service: &str, txid: &str) -> pb::Retry {
    RetryServiceClient::new(ch.clone())
        .get_retry(pb::GetRetryRequest {
            service: service.into(),
            transaction_id: txid.into(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// A `Subscribe` stream to `service` as executor "test".
pub async fn subscribe(
    ch: &Channel,
    service: &str,
    max_in_flight: u32,
) -> tonic::Streaming<pb::Delivery> {
    ExecutorServiceClient::new(ch.clone())
        .subscribe(pb::SubscribeRequest {
            service: service.into(),
            executor_id: "test".into(),
            max_in_flight,
        })
        .await
        .unwrap()
        .into_inner()
}

/// One `Subscribe` stream to `service` on every channel, merged: each delivery comes with the
/// index of the node that sent it (acks go back to that node).
pub async fn subscribe_all(
    chans: &[Channel],
    service: &str,
    max_in_flight: u32,
) -> tokio::sync::mpsc::UnboundedReceiver<(usize, pb::Delivery)> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for (i, ch) in chans.iter().enumerate() {
        let mut stream = ExecutorServiceClient::new(ch.clone())
            .subscribe(pb::SubscribeRequest {
                service: service.into(),
                executor_id: format!("test-{i}"),
                max_in_flight,
            })
            .await
            .unwrap()
            .into_inner();
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Ok(Some(d)) = stream.message().await {
                if tx.send((i, d)).is_err() {
                    return;
                }
            }
        });
    }
    rx
}

/// An ack of `d` with `outcome` and nothing else.
pub fn ack_req(d: &pb::Delivery, outcome: pb::AckOutcome) -> pb::AckRequest {
    pb::AckRequest {
        delivery_id: d.delivery_id.clone(),
        outcome: outcome as i32,
        ..Default::default()
    }
}

pub async fn ack(ch: &Channel, r: pb::AckRequest) -> Result<pb::AckResponse, tonic::Status> {
    ExecutorServiceClient::new(ch.clone())
        .ack(r)
        .await
        .map(|r| r.into_inner())
}

/// Acks `d` as SUCCEEDED, which must be accepted.
pub async fn ack_succeeded(ch: &Channel, d: &pb::Delivery) {
    ack(ch, ack_req(d, pb::AckOutcome::Succeeded))
        .await
        .expect("ack accepted");
}

/// Asserts INVALID_ARGUMENT whose message starts with the field name.
pub fn assert_invalid<T: std::fmt::Debug>(r: Result<T, tonic::Status>, field: &str) {
    let e = r.expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().starts_with(&format!("{field}:")),
        "expected the field {field:?} in {:?}",
        e.message()
    );
}
