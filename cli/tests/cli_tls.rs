//! The `rebound` binary against a node serving TLS (see `cli.rs`): verifying the node and
//! presenting a client certificate.

mod common;

use common::*;

#[tokio::test]
async fn tls_flags_verify_the_node_and_present_a_client_certificate() {
    use rebound_integration_tests::pki::Ca;
    let dir = std::env::temp_dir().join(format!("rebound-cli-tls-{}", std::process::id()));
    let ca = Ca::new(&dir, "ca");
    let other = Ca::new(&dir, "other");
    let node_cert = ca.node("node");
    let client = ca.client("client", "operator");
    let creds = dir.join("credentials.toml");
    std::fs::write(
        &creds,
        "[[credential]]\nname = \"operator\"\nadmin = true\nservices = [\"*\"]\n",
    )
    .unwrap();
    let config = rebound_server::config::Config {
        store: rebound_server::config::StoreKind::Embedded,
        data_dir: Some(dir.join("data")),
        listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: None,
        node_id: "cli-tls".into(),
        clock_sync: false,
        lease_ttl_ms: 2_000,
        tls_cert_file: Some(node_cert.cert.clone()),
        tls_key_file: Some(node_cert.key.clone()),
        tls_client_ca_file: Some(ca.cert()),
        credentials_file: Some(creds),
        ..rebound_server::config::Config::default()
    };
    let node = rebound_server::node::Node::start(
        config,
        std::sync::Arc::new(rebound_store::clock::SystemClock),
    )
    .await
    .unwrap();
    let a = node.local_addr().to_string();
    let (ca_file, cert, key) = (
        ca.cert().display().to_string(),
        client.cert.display().to_string(),
        client.key.display().to_string(),
    );
    // CA and client certificate: the certificate's CN is the admin credential.
    let with_cert = [
        "--ca-file",
        ca_file.as_str(),
        "--cert-file",
        cert.as_str(),
        "--key-file",
        key.as_str(),
    ];
    let mut args = with_cert.to_vec();
    args.extend(["enqueue", "orders", "o-1", "--delay", "1h"]);
    rebound(&a, &args).await.ok();
    let mut args = with_cert.to_vec();
    args.extend(["services", "--json"]);
    let doc = rebound(&a, &args).await.ok().json();
    assert_eq!(doc["services"][0]["service"], "orders", "{doc:#}");
    // Without a client certificate, in plain text, or trusting another CA: refused. The
    // handshake fails at connect (exit 5), or, under TLS 1.3, when the node rejects the
    // missing certificate right after it (a transport error on the call: exit 1).
    let other_ca = other.cert().display().to_string();
    for args in [
        vec!["--ca-file", ca_file.as_str(), "services"],
        vec!["services"],
        vec![
            "--ca-file",
            other_ca.as_str(),
            "--cert-file",
            cert.as_str(),
            "--key-file",
            key.as_str(),
            "services",
        ],
    ] {
        let r = rebound(&a, &args).await;
        assert!(r.code == 5 || r.code == 1, "{r:#?}");
        assert!(r.stdout.is_empty(), "{r:#?}");
    }
    // --cert-file without --key-file is a usage error.
    let r = rebound(&a, &["--cert-file", cert.as_str(), "services"]).await;
    assert_eq!(r.code, 2, "{r:#?}");
    node.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
