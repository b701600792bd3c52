//! TLS (issue 19): the listeners refuse plain text and unknown CAs; under mutual TLS a client
//! without a certificate is refused and a certificate's CN stands for a credential; SIGHUP
//! serves a new certificate to new connections while an open Subscribe stream goes on; peers
//! ask each other over TLS; the node reaches Cassandra over TLS.

use std::{path::Path, sync::Arc, time::Duration};

use rebound_integration_tests::{
    enqueue_req, eventually, http_get,
    pki::{client_tls, https_get, tls_channel, Ca, Issued},
    process::{free_port, server_bin, Proc},
    subscribe, token_sha256, with_token,
};
use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient, retry_service_client::RetryServiceClient,
};
use rebound_server::{config::Config, node::Node};
use rebound_store::clock::SystemClock;
use tonic::{transport::Channel, Code};

/// A node on the embedded store (no Cassandra needed for what these tests check), with
/// both listeners on port 0 and TLS from `cert`.
fn embedded_config(dir: &Path, cert: &Issued) -> Config {
    Config {
        store: rebound_server::config::StoreKind::Embedded,
        data_dir: Some(dir.join("data")),
        listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: Some("127.0.0.1:0".parse().unwrap()),
        http_listen_set: true,
        node_id: "tls-node".into(),
        window_seconds: 1,
        skew_margin_ms: 250,
        scan_interval_ms: 100,
        lease_ttl_ms: 2_000,
        clock_sync: false,
        shutdown_grace_ms: 1_000,
        tls_cert_file: Some(cert.cert.clone()),
        tls_key_file: Some(cert.key.clone()),
        ..Config::default()
    }
}

async fn enqueue(ch: Channel, service: &str, txid: &str) -> Result<(), tonic::Status> {
    RetryServiceClient::new(ch)
        .enqueue_retry(enqueue_req(service, txid, 0))
        .await
        .map(|_| ())
}

async fn list_services(ch: Channel, token: Option<&str>) -> Result<(), tonic::Status> {
    AdminServiceClient::new(ch)
        .list_services(with_token(pb::ListServicesRequest::default(), token))
        .await
        .map(|_| ())
}

/// A failure to connect at all (as opposed to a refusal by the node's logic).
fn assert_no_connection(r: Result<(), tonic::Status>, what: &str) {
    let e = r.expect_err(what);
    assert!(
        matches!(e.code(), Code::Unavailable | Code::Unknown | Code::Internal),
        "{what}: {e:?}"
    );
}

#[tokio::test]
async fn tls_listeners_refuse_plain_text_and_unknown_cas() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let other = Ca::new(dir.path(), "other");
    let node = Node::start(
        embedded_config(dir.path(), &ca.node("node")),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let addr = node.local_addr();
    let http = node.http_addr().unwrap();

    // The node's CA: served.
    let good = tls_channel(addr, client_tls(&ca.cert_pem(), None));
    enqueue(good.clone(), "orders", "over-tls").await.unwrap();

    // Plain text against the TLS port: no answer, and nothing written.
    let plain = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    assert_no_connection(enqueue(plain, "orders", "plain").await, "plain text");
    // A client that does not trust the node's certificate: refused before any call.
    let stranger = tls_channel(addr, client_tls(&other.cert_pem(), None));
    assert_no_connection(
        enqueue(stranger, "orders", "unknown-ca").await,
        "unknown CA",
    );
    for txid in ["plain", "unknown-ca"] {
        let e = RetryServiceClient::new(good.clone())
            .get_retry(pb::GetRetryRequest {
                service: "orders".into(),
                transaction_id: txid.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{txid}: {e:?}");
    }

    // The HTTP listener: HTTPS with the CA; plain HTTP and an unknown CA get nothing.
    let pem = ca.cert_pem();
    eventually(Duration::from_secs(10), "/readyz over HTTPS", || {
        let pem = pem.clone();
        async move { https_get(http, "/readyz", &pem).await.ok() == Some(200) }
    })
    .await;
    assert_eq!(
        https_get(http, "/metrics", &ca.cert_pem()).await.unwrap(),
        200
    );
    assert!(!matches!(http_get(http, "/readyz").await, Ok((200, _))));
    assert!(https_get(http, "/readyz", &other.cert_pem()).await.is_err());
    node.shutdown().await.unwrap();
}

#[tokio::test]
async fn mutual_tls_requires_a_certificate_and_its_cn_names_the_credential() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let other = Ca::new(dir.path(), "other");
    let creds = dir.path().join("credentials.toml");
    std::fs::write(
        &creds,
        format!(
            "[[credential]]\nname = \"orders-worker\"\nservices = [\"orders\"]\n\n\
             [[credential]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nadmin = true\n",
            token_sha256("ops-secret")
        ),
    )
    .unwrap();
    let mut config = embedded_config(dir.path(), &ca.node("node"));
    config.tls_client_ca_file = Some(ca.cert());
    config.credentials_file = Some(creds);
    let node = Node::start(config, Arc::new(SystemClock)).await.unwrap();
    let addr = node.local_addr();
    let ca_pem = ca.cert_pem();

    // No client certificate: the handshake fails, whatever the call.
    let anonymous = tls_channel(addr, client_tls(&ca_pem, None));
    assert_no_connection(enqueue(anonymous, "orders", "a").await, "no certificate");
    // A certificate from another CA, even with a known CN: refused too.
    let forged = other.client("forged", "orders-worker");
    let forged = tls_channel(addr, client_tls(&ca_pem, Some(&forged)));
    assert_no_connection(enqueue(forged, "orders", "b").await, "foreign certificate");

    // CN=orders-worker is that credential: its service, and nothing else.
    let worker = ca.client("worker", "orders-worker");
    let worker_ch = tls_channel(addr, client_tls(&ca_pem, Some(&worker)));
    enqueue(worker_ch.clone(), "orders", "c").await.unwrap();
    let e = enqueue(worker_ch.clone(), "payments", "d")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = list_services(worker_ch.clone(), None).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // A token, when sent, decides: the same connection with the admin token is admin.
    list_services(worker_ch.clone(), Some("ops-secret"))
        .await
        .unwrap();
    let e = list_services(worker_ch, Some("wrong")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");

    // A CA-signed certificate whose CN names no credential: UNAUTHENTICATED.
    let stranger = ca.client("stranger", "stranger");
    let stranger = tls_channel(addr, client_tls(&ca_pem, Some(&stranger)));
    let e = enqueue(stranger, "orders", "e").await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("\"stranger\""), "{e:?}");

    // The HTTP listener asks for a certificate but does not require one (probes, Prometheus).
    let http = node.http_addr().unwrap();
    eventually(Duration::from_secs(10), "/readyz over HTTPS", || {
        let pem = ca_pem.clone();
        async move { https_get(http, "/readyz", &pem).await.ok() == Some(200) }
    })
    .await;
    node.shutdown().await.unwrap();
}

/// Sends SIGHUP to the node process.
fn hangup(p: &Proc) {
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &p.0.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -HUP");
}

#[tokio::test]
async fn sighup_serves_a_new_certificate_while_an_open_stream_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let old_ca = Ca::new(dir.path(), "old");
    let new_ca = Ca::new(dir.path(), "new");
    let live = old_ca.node("live");
    let port = free_port();
    let node = Proc(
        std::process::Command::new(server_bin().unwrap())
            .args(["dev", "--data-dir"])
            .arg(dir.path().join("data"))
            .envs([
                ("REBOUND_LISTEN", format!("127.0.0.1:{port}")),
                ("REBOUND_HTTP_LISTEN", String::new()),
                ("REBOUND_TLS_CERT_FILE", live.cert.display().to_string()),
                ("REBOUND_TLS_KEY_FILE", live.key.display().to_string()),
                ("RUST_LOG", "warn".into()),
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let old = tls_channel(addr, client_tls(&old_ca.cert_pem(), None));
    eventually(Duration::from_secs(30), "the node serves TLS", || {
        let old = old.clone();
        async move { enqueue(old, "warmup", "w").await.is_ok() }
    })
    .await;
    let mut stream = subscribe(&old, "orders", 10).await;

    // New files in place, then SIGHUP: new connections get the new certificate.
    let fresh = new_ca.node("fresh");
    std::fs::copy(&fresh.cert, &live.cert).unwrap();
    std::fs::copy(&fresh.key, &live.key).unwrap();
    hangup(&node);
    let new_pem = new_ca.cert_pem();
    eventually(
        Duration::from_secs(10),
        "the new certificate is served",
        || {
            let ch = tls_channel(addr, client_tls(&new_pem, None));
            async move { enqueue(ch, "orders", "after-reload").await.is_ok() }
        },
    )
    .await;
    let stale = tls_channel(addr, client_tls(&old_ca.cert_pem(), None));
    assert_no_connection(
        enqueue(stale, "orders", "stale").await,
        "a new connection trusting only the old CA",
    );

    // The stream opened before the reload goes on: it delivers what was enqueued after it.
    let d = tokio::time::timeout(Duration::from_secs(20), stream.message())
        .await
        .expect("a delivery on the old stream")
        .unwrap()
        .unwrap();
    assert_eq!(d.transaction_id, "after-reload");
    rebound_integration_tests::ack_succeeded(&old, &d).await;

    // A reload of a broken file changes nothing: the certificate loaded last is served.
    std::fs::write(&live.cert, "not a certificate").unwrap();
    hangup(&node);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ch = tls_channel(addr, client_tls(&new_ca.cert_pem(), None));
    enqueue(ch, "orders", "after-bad-reload").await.unwrap();
    node.kill();
}

/// The test PKI of the Cassandra node (`scripts/cassandra tls-dir`).
fn cassandra_tls_dir() -> std::path::PathBuf {
    if let Ok(d) = std::env::var("REBOUND_TEST_CASSANDRA_TLS_DIR") {
        return d.into();
    }
    let home = std::env::var("REBOUND_CASSANDRA_HOME").unwrap_or_else(|_| {
        format!(
            "{}/.cache/rebound/cassandra-run",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    Path::new(&home).join("tls")
}

#[tokio::test]
async fn the_node_reaches_cassandra_over_tls_with_its_client_certificate() {
    let tls = cassandra_tls_dir();
    let mut config = rebound_integration_tests::test_config("tls_cassandra");
    config.cassandra_tls_ca_file = Some(tls.join("ca.pem"));
    config.cassandra_tls_cert_file = Some(tls.join("client.pem"));
    config.cassandra_tls_key_file = Some(tls.join("client.key"));
    config.cassandra_startup_wait_ms = 1_000;
    let node = rebound_integration_tests::TestNode::with_system_clock(config.clone()).await;
    RetryServiceClient::new(node.channel.clone())
        .enqueue_retry(enqueue_req("orders", "through-tls", 0))
        .await
        .unwrap();
    // Cassandra's own view: encrypted client connections (no other test uses TLS).
    let rows = node
        .cql
        .query_unpaged(
            "SELECT ssl_enabled, ssl_protocol FROM system_views.clients",
            &[],
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    let encrypted: Vec<String> = rows
        .rows::<(Option<bool>, Option<String>)>()
        .unwrap()
        .filter_map(|r| match r.unwrap() {
            (Some(true), p) => Some(p.unwrap_or_default()),
            _ => None,
        })
        .collect();
    assert!(
        !encrypted.is_empty(),
        "Cassandra lists no encrypted client connection"
    );
    assert!(
        encrypted.iter().all(|p| p.starts_with("TLS")),
        "{encrypted:?}"
    );

    // Cassandra requires a client certificate over TLS; and a CA that is not Cassandra's is
    // refused: the node does not start, and says it cannot connect.
    let mut no_cert = config.clone();
    no_cert.cassandra_tls_cert_file = None;
    no_cert.cassandra_tls_key_file = None;
    let dir = tempfile::tempdir().unwrap();
    let mut wrong_ca = config.clone();
    wrong_ca.cassandra_tls_ca_file = Some(Ca::new(dir.path(), "stranger").cert());
    for (what, c) in [
        ("no client certificate", no_cert),
        ("a foreign CA", wrong_ca),
    ] {
        let e = Node::start(c, Arc::new(SystemClock)).await.err();
        let e = format!(
            "{:#}",
            e.unwrap_or_else(|| panic!("{what}: the node started"))
        );
        assert!(e.contains("connect"), "{what}: {e}");
    }
    node.finish().await;
}

#[tokio::test]
async fn peers_answer_get_stats_over_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let mut a = rebound_integration_tests::test_config("tls_peers");
    let keyspace = a.keyspace.clone();
    let cert = ca.node("a");
    a.tls_cert_file = Some(cert.cert);
    a.tls_key_file = Some(cert.key);
    a.tls_client_ca_file = Some(ca.cert());
    let mut b = a.clone();
    b.node_id = "node-b".into();
    let na = Node::start(a, Arc::new(SystemClock)).await.unwrap();
    let nb = Node::start(b, Arc::new(SystemClock)).await.unwrap();
    let me = ca.client("me", "operator");
    let ch = tls_channel(na.local_addr(), client_tls(&ca.cert_pem(), Some(&me)));
    eventually(
        Duration::from_secs(30),
        "both nodes answer GetStats",
        || {
            let ch = ch.clone();
            async move {
                let Ok(r) = AdminServiceClient::new(ch)
                    .get_stats(pb::GetStatsRequest::default())
                    .await
                else {
                    return false;
                };
                let r = r.into_inner();
                r.nodes.len() == 2 && r.nodes.iter().all(|n| n.reachable)
            }
        },
    )
    .await;
    nb.shutdown().await.unwrap();
    na.shutdown().await.unwrap();
    rebound_integration_tests::drop_keyspace(&keyspace).await;
}

/// `REBOUND_CASSANDRA_LOCAL_DC` (a connection setting, like TLS): requests are coordinated
/// in that datacenter only, so a node that names one Cassandra does not have never serves
/// (instead of counting another DC's replicas as "local").
#[tokio::test]
async fn a_local_dc_coordinates_every_request_and_a_wrong_one_stops_the_node() {
    let mut config = rebound_integration_tests::test_config("local_dc");
    config.cassandra_local_dc = Some("datacenter1".into());
    let node = rebound_integration_tests::TestNode::with_system_clock(config.clone()).await;
    RetryServiceClient::new(node.channel.clone())
        .enqueue_retry(enqueue_req("orders", "in-dc", 0))
        .await
        .unwrap();
    let mut wrong = config;
    wrong.cassandra_local_dc = Some("elsewhere".into());
    wrong.cassandra_startup_wait_ms = 1_000;
    let e = Node::start(wrong, Arc::new(SystemClock)).await.err();
    assert!(
        e.is_some(),
        "a node in a datacenter Cassandra lacks started"
    );
    node.finish().await;
}

/// The other half of a reload: the credentials file. A new file takes effect for the next
/// call; one that does not parse leaves the credentials as they were.
#[tokio::test]
async fn a_reload_reads_the_credentials_file_again() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let creds = dir.path().join("credentials.toml");
    let write = |token: &str| {
        std::fs::write(
            &creds,
            format!(
                "[[credential]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nadmin = true\n",
                token_sha256(token)
            ),
        )
        .unwrap()
    };
    write("first");
    let mut config = embedded_config(dir.path(), &ca.node("node"));
    config.credentials_file = Some(creds.clone());
    let node = Node::start(config, Arc::new(SystemClock)).await.unwrap();
    let ch = tls_channel(node.local_addr(), client_tls(&ca.cert_pem(), None));
    list_services(ch.clone(), Some("first")).await.unwrap();

    write("second");
    node.reload().unwrap();
    list_services(ch.clone(), Some("second")).await.unwrap();
    let e = list_services(ch.clone(), Some("first")).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");

    std::fs::write(&creds, "[[credential]]\nname = 1\n").unwrap();
    let e = node.reload().unwrap_err().to_string();
    assert!(e.contains("REBOUND_CREDENTIALS_FILE"), "{e}");
    list_services(ch, Some("second")).await.unwrap();
    node.shutdown().await.unwrap();
}
