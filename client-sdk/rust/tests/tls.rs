//! `tls_mutual_auth` (client-sdk/CONFORMANCE.md) against a live node: the repository's
//! rebound-server (`$REBOUND_SERVER_BIN`, or target/debug/rebound-server) in dev mode (embedded
//! store, 1 s windows) under mutual TLS, with the certificates of scripts/test-certs.

use std::{
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use rebound_client::{Client, Code, Error, Executor, Outcome, RetryStatus};
use tokio::sync::oneshot;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

const SERVICE: &str = "rustsdk";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_node(dir: &Path, certs: &Path, creds: &Path) -> (Node, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let bin = std::env::var_os("REBOUND_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/debug/rebound-server"));
    let log = std::fs::File::create(dir.join("node.log")).unwrap();
    let child = Command::new(&bin)
        .args(["dev", "--data-dir"])
        .arg(dir.join("data"))
        .env("REBOUND_LISTEN", &address)
        .env("REBOUND_HTTP_LISTEN", "")
        .env("REBOUND_TLS_CERT_FILE", certs.join("node.pem"))
        .env("REBOUND_TLS_KEY_FILE", certs.join("node.key"))
        .env("REBOUND_TLS_CLIENT_CA_FILE", certs.join("ca.pem"))
        .env("REBOUND_CREDENTIALS_FILE", creds)
        .env("RUST_LOG", "warn")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (cargo build -p rebound-server)", bin.display()));
    let node = Node(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(&address).is_err() {
        assert!(Instant::now() < deadline, "rebound-server did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    (node, address)
}

fn tls(certs: &Path, ca: &str, client_cert: bool) -> ClientTlsConfig {
    let pem = |f: &str| std::fs::read(certs.join(f)).unwrap();
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem(ca)));
    if client_cert {
        tls = tls.identity(Identity::from_pem(pem("client.pem"), pem("client.key")));
    }
    tls
}

#[tokio::test]
async fn tls_mutual_auth() {
    let dir = std::env::temp_dir().join(format!("rebound-rust-tls-{}", std::process::id()));
    let certs = dir.join("certs");
    let status = Command::new(repo().join("scripts/test-certs"))
        .arg(&certs)
        .status()
        .unwrap();
    assert!(status.success(), "scripts/test-certs: {status}");
    let creds = dir.join("credentials.toml");
    std::fs::write(
        &creds,
        format!("[[credential]]\nname = \"sdk-client\"\nservices = [\"{SERVICE}\"]\n"),
    )
    .unwrap();
    let (_node, address) = start_node(&dir, &certs, &creds);

    let good = tls(&certs, "ca.pem", true);
    let client = Client::connect_with_tls(&address, good.clone())
        .await
        .unwrap();
    client
        .enqueue(SERVICE, "tx-tls")
        .payload("over tls")
        .delay(Duration::ZERO)
        .send()
        .await
        .unwrap();
    let payloads = Arc::new(Mutex::new(Vec::new()));
    let (stop, stopped) = oneshot::channel::<()>();
    let stop = Arc::new(Mutex::new(Some(stop)));
    let seen = payloads.clone();
    let run = Executor::builder(address.as_str(), SERVICE)
        .tls(good)
        .build()
        .run(
            move |job: rebound_client::Job| {
                seen.lock().unwrap().push(job.payload.clone());
                if let Some(stop) = stop.lock().unwrap().take() {
                    let _ = stop.send(());
                }
                async { Outcome::success() }
            },
            async {
                let _ = stopped.await;
            },
        );
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("no delivery within 30 s")
        .unwrap();
    assert_eq!(*payloads.lock().unwrap(), vec![b"over tls".to_vec()]);
    let retry = client.get(SERVICE, "tx-tls").await.unwrap();
    assert_eq!(retry.status, RetryStatus::Succeeded);

    for ca in ["ca.pem", "other-ca.pem"] {
        let refused = async {
            let c = Client::connect_with_tls(&address, tls(&certs, ca, false)).await?;
            c.enqueue(SERVICE, "tx-tls-refused")
                .delay(Duration::ZERO)
                .send()
                .await
        };
        let e = tokio::time::timeout(Duration::from_secs(30), refused)
            .await
            .unwrap()
            .expect_err(ca);
        // The node refuses the handshake: `connect_with_tls` fails (Error::Transport), or, when
        // the TLS 1.3 alert comes after it, the call does, as tonic's client-side status for a
        // broken connection (UNKNOWN "transport error" or CANCELLED "connection closed"; the
        // SDK does not map these to UNAVAILABLE).
        assert!(
            matches!(e, Error::Transport(_))
                || matches!(
                    e.code(),
                    Code::Unavailable | Code::Cancelled | Code::Unknown
                ),
            "trusting {ca}: {e:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
