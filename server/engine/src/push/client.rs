//! One push request: a POST to a vetted address, with a timeout (docs/architecture.md, "Push
//! delivery").
//!
//! The target's host is resolved once, through the guard ([`guard::resolve`]), and the
//! connection goes to exactly one of the addresses it kept (tried in order), so what was
//! checked is what is reached. HTTPS verifies the certificate for the URL's host name (SNI
//! too) against the system's root certificates, with rustls and its default (aws-lc-rs)
//! provider like the rest of the node.
//!
//! Simple and correct before fast: HTTP/1.1, one connection per request (no pool, no
//! keep-alive), redirects not followed (a 3xx is a [`Response`] like any other), and at most
//! the first 1 KiB of the response body read before the connection is dropped. The whole
//! exchange, from the DNS lookup to that 1 KiB, fits in the caller's timeout.

use std::{fmt, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::{
    pki_types::{pem::PemObject, CertificateDer, ServerName},
    RootCertStore,
};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpStream,
};

use crate::guard::{self, ResolveError};

/// The most bytes of the response body read (and kept in [`Response::body_prefix`]).
pub const MAX_BODY_PREFIX: usize = 1024;

/// Sends push requests; cheap to share (`Arc`) between the worker's tasks.
pub struct Client {
    allow: guard::Allow,
    roots: RootCertStore,
    tls: Arc<rustls::ClientConfig>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("allow", &self.allow)
            .field("roots", &self.roots.len())
            .finish_non_exhaustive()
    }
}

/// What the receiver answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    /// At most the first 1 KiB of the body (less if the body was shorter or broke off).
    pub body_prefix: Vec<u8>,
}

/// Why there is no [`Response`]. Display gives a one-line message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The guard refused an address of the host (`REBOUND_PUSH_ALLOW`), or the URL cannot be
    /// pushed to (not http or https, no host).
    #[error("{0}")]
    Refused(String),
    /// The host name did not resolve.
    #[error("{0}")]
    Dns(String),
    /// No TCP connection to any of the host's addresses.
    #[error("{0}")]
    Connect(String),
    /// The TLS handshake failed (certificate, protocol).
    #[error("{0}")]
    Tls(String),
    /// The exchange did not finish within the timeout.
    #[error("no response within the push timeout")]
    Timeout,
    /// The connection broke, or the receiver's answer was not HTTP/1.1.
    #[error("{0}")]
    Protocol(String),
}

impl Client {
    /// A client that reaches public addresses and those `allow` permits, trusting the
    /// system's root certificates (none found: a warning, and HTTPS fails verification).
    pub fn new(allow: guard::Allow) -> Result<Client, String> {
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        let (added, _unusable) = roots.add_parsable_certificates(native.certs);
        if added == 0 {
            let errors: Vec<String> = native.errors.iter().map(|e| e.to_string()).collect();
            tracing::warn!(
                ?errors,
                "push: no system root certificate found; HTTPS push targets will fail"
            );
        }
        let tls = tls_config(roots.clone())?;
        Ok(Client { allow, roots, tls })
    }

    /// For tests: trust these extra root certificates (PEM) as well.
    pub fn with_extra_roots(mut self, pem: &[u8]) -> Result<Client, String> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("extra roots are not PEM: {e}"))?;
        if certs.is_empty() {
            return Err("extra roots: no certificate (-----BEGIN CERTIFICATE-----)".into());
        }
        for c in certs {
            self.roots
                .add(c)
                .map_err(|e| format!("extra roots: a certificate is not usable as a root: {e}"))?;
        }
        self.tls = tls_config(self.roots.clone())?;
        Ok(self)
    }

    /// POSTs `body` with `headers` to `url` (http or https), the whole exchange (resolve,
    /// connect, TLS, request, response head, up to 1 KiB of body) within `timeout`.
    ///
    /// Connects only to addresses [`guard::resolve`] kept: the connection goes to that exact
    /// IP; TLS uses the URL's host for SNI and the certificate check. `Host` (with the port
    /// when it is not the scheme's default) and `Content-Length` are set here, replacing any
    /// in `headers`. Redirects are not followed.
    pub async fn post(
        &self,
        url: &url::Url,
        headers: HeaderMap,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Response, PushError> {
        tokio::time::timeout(timeout, self.exchange(url, headers, body))
            .await
            .unwrap_or(Err(PushError::Timeout))
    }

    async fn exchange(
        &self,
        url: &url::Url,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Response, PushError> {
        let https = match url.scheme() {
            "http" => false,
            "https" => true,
            other => {
                return Err(PushError::Refused(format!(
                    "push URL scheme {other:?} is not http or https"
                )))
            }
        };
        let host = match url.host_str() {
            Some(h) if !h.is_empty() => h,
            _ => return Err(PushError::Refused("push URL has no host".into())),
        };
        let Some(port) = url.port_or_known_default() else {
            return Err(PushError::Refused("push URL has no port".into()));
        };
        let addrs = guard::resolve(host, port, &self.allow)
            .await
            .map_err(|e| match e {
                ResolveError::Refused(r) => PushError::Refused(r.0),
                ResolveError::Dns(m) => PushError::Dns(m),
            })?;
        let request = request(url, host, headers, body)?;
        let tcp = connect(&addrs).await?;
        if https {
            let name = server_name(url)?;
            let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| PushError::Tls(format!("TLS with {host}: {}", chain(&e))))?;
            send(tls, request).await
        } else {
            send(tcp, request).await
        }
    }
}

fn tls_config(roots: RootCertStore) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The name the certificate must be for: the URL's host, a DNS name or an IP address.
fn server_name(url: &url::Url) -> Result<ServerName<'static>, PushError> {
    match url.host() {
        Some(url::Host::Domain(d)) => ServerName::try_from(d.to_owned())
            .map_err(|e| PushError::Tls(format!("{d:?} is not a TLS server name: {e}"))),
        Some(url::Host::Ipv4(a)) => Ok(ServerName::from(std::net::IpAddr::V4(a))),
        Some(url::Host::Ipv6(a)) => Ok(ServerName::from(std::net::IpAddr::V6(a))),
        None => Err(PushError::Refused("push URL has no host".into())),
    }
}

/// The POST in origin form (path and query; never the fragment or user info).
fn request(
    url: &url::Url,
    host: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Result<http::Request<Full<Bytes>>, PushError> {
    let target = &url[url::Position::BeforePath..url::Position::AfterQuery];
    let target = if target.is_empty() { "/" } else { target };
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    let length = body.len();
    let mut req = http::Request::builder()
        .method(http::Method::POST)
        .uri(target)
        .body(Full::new(body))
        .map_err(|e| PushError::Protocol(format!("push URL path {target:?}: {e}")))?;
    *req.headers_mut() = headers;
    let host_value = HeaderValue::from_str(&authority)
        .map_err(|e| PushError::Protocol(format!("push URL host {authority:?}: {e}")))?;
    req.headers_mut().insert(header::HOST, host_value);
    req.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    Ok(req)
}

/// A TCP connection to the first of `addrs` that accepts one.
async fn connect(addrs: &[std::net::SocketAddr]) -> Result<TcpStream, PushError> {
    let mut errors = Vec::new();
    for a in addrs {
        match TcpStream::connect(a).await {
            Ok(s) => {
                // Small requests; don't wait to coalesce.
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => errors.push(format!("{a}: {e}")),
        }
    }
    Err(PushError::Connect(format!(
        "cannot connect: {}",
        errors.join("; ")
    )))
}

/// The request over one HTTP/1.1 connection: the response head and the start of its body.
async fn send<S>(io: S, req: http::Request<Full<Bytes>>) -> Result<Response, PushError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let protocol =
        |what: &str, e: &hyper::Error| PushError::Protocol(format!("{what}: {}", chain(e)));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| protocol("HTTP handshake", &e))?;
    let exchange = async move {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| protocol("HTTP request", &e))?;
        let (parts, mut body) = resp.into_parts();
        let mut prefix = Vec::new();
        while prefix.len() < MAX_BODY_PREFIX {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        prefix.extend_from_slice(data);
                    }
                }
                // The head came; a body that ends early or breaks off changes nothing about
                // what the receiver said.
                Some(Err(_)) | None => break,
            }
        }
        prefix.truncate(MAX_BODY_PREFIX);
        Ok(Response {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body_prefix: prefix,
        })
    };
    tokio::pin!(conn);
    tokio::pin!(exchange);
    // The connection is driven here, not spawned: when this returns, it is dropped (closed),
    // whatever is left of the body unread.
    tokio::select! {
        biased;
        r = &mut exchange => r,
        ended = &mut conn => {
            // The connection finished first: the exchange has all it will get.
            match (exchange.await, ended) {
                (Err(_), Err(e)) => Err(protocol("HTTP connection", &e)),
                (r, _) => r,
            }
        }
    }
}

/// An error and its sources, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        let next = c.to_string();
        if !s.contains(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        source = c.source();
    }
    s.replace(['\r', '\n'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpListener,
        sync::oneshot,
    };

    const SHORT: Duration = Duration::from_millis(300);
    const LONG: Duration = Duration::from_secs(10);

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).expect(s)
    }

    fn loopback() -> guard::Allow {
        guard::Allow::parse("127.0.0.1").expect("allow")
    }

    /// Reads one request (head, then Content-Length bytes of body) and writes `reply`.
    async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, reply: &[u8]) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if got.len() >= end + 4 + length {
                    break;
                }
            }
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s.write_all(reply).await;
        let _ = s.shutdown().await;
        got
    }

    /// A server on 127.0.0.1 that answers one request with `reply`; the receiver gets the
    /// raw request.
    async fn server(reply: Vec<u8>) -> (u16, oneshot::Receiver<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let (s, _) = listener.accept().await.expect("accept");
            let _ = tx.send(answer(s, &reply).await);
        });
        (port, rx)
    }

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    #[tokio::test]
    async fn posts_body_and_headers_and_reads_the_response() {
        let (port, seen) =
            server(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Reply: yes\r\n\r\nhello".to_vec())
                .await;
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", HeaderValue::from_static("msg_1"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert("host", HeaderValue::from_static("ignored.example"));
        let client = Client::new(loopback()).expect("client");
        let r = client
            .post(
                &url(&format!("http://127.0.0.1:{port}/hook?x=1#frag")),
                headers,
                Bytes::from_static(br#"{"a":1}"#),
                LONG,
            )
            .await
            .expect("response");
        assert_eq!(r.status, 200);
        assert_eq!(
            r.headers.get("x-reply").map(|v| v.as_bytes()),
            Some(&b"yes"[..])
        );
        assert_eq!(r.body_prefix, b"hello");

        let raw = text(&seen.await.expect("request"));
        let lower = raw.to_ascii_lowercase();
        assert!(raw.starts_with("POST /hook?x=1 HTTP/1.1\r\n"), "{raw}");
        assert!(
            lower.contains(&format!("\r\nhost: 127.0.0.1:{port}\r\n")),
            "{raw}"
        );
        assert!(!lower.contains("ignored.example"), "{raw}");
        assert!(lower.contains("\r\nwebhook-id: msg_1\r\n"), "{raw}");
        assert!(
            lower.contains("\r\ncontent-type: application/json\r\n"),
            "{raw}"
        );
        assert!(lower.contains("\r\ncontent-length: 7\r\n"), "{raw}");
        assert!(raw.ends_with("\r\n\r\n{\"a\":1}"), "{raw}");
    }

    #[tokio::test]
    async fn redirects_are_returned_not_followed() {
        let (port, seen) = server(
            b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/elsewhere\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
        )
        .await;
        let client = Client::new(loopback()).expect("client");
        let r = client
            .post(
                &url(&format!("http://127.0.0.1:{port}/")),
                HeaderMap::new(),
                Bytes::new(),
                LONG,
            )
            .await
            .expect("response");
        assert_eq!(r.status, 302);
        assert_eq!(
            r.headers.get("location").map(|v| v.as_bytes()),
            Some(&b"http://127.0.0.1:1/elsewhere"[..])
        );
        assert!(text(&seen.await.expect("request")).starts_with("POST / HTTP/1.1\r\n"));
    }

    #[tokio::test]
    async fn only_the_first_kib_of_the_body_is_kept() {
        let mut reply = b"HTTP/1.1 500 Oops\r\nContent-Length: 100000\r\n\r\n".to_vec();
        reply.extend(std::iter::repeat_n(b'x', 100_000));
        let (port, _seen) = server(reply).await;
        let client = Client::new(loopback()).expect("client");
        let r = client
            .post(
                &url(&format!("http://127.0.0.1:{port}/")),
                HeaderMap::new(),
                Bytes::new(),
                LONG,
            )
            .await
            .expect("response");
        assert_eq!(r.status, 500);
        assert_eq!(r.body_prefix, vec![b'x'; MAX_BODY_PREFIX]);
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (done_tx, done_rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            // Accept, read, never answer; hold the connection until the test ends.
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = done_rx.await;
        });
        let client = Client::new(loopback()).expect("client");
        let start = std::time::Instant::now();
        let r = client
            .post(
                &url(&format!("http://127.0.0.1:{port}/")),
                HeaderMap::new(),
                Bytes::new(),
                SHORT,
            )
            .await;
        let took = start.elapsed();
        assert_eq!(r, Err(PushError::Timeout));
        assert!(
            took >= SHORT && took < SHORT + Duration::from_secs(2),
            "{took:?}"
        );
        let _ = done_tx.send(());
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let client = Client::new(loopback()).expect("client");
        let r = client
            .post(
                &url(&format!("http://127.0.0.1:{port}/")),
                HeaderMap::new(),
                Bytes::new(),
                LONG,
            )
            .await;
        match r {
            Err(PushError::Connect(m)) => assert!(m.contains(&format!("127.0.0.1:{port}")), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn the_guard_refuses_before_connecting() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let client = Client::new(guard::Allow::default()).expect("client");
        for target in [
            format!("http://127.0.0.1:{port}/"),
            format!("http://localhost:{port}/"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
        ] {
            let r = client
                .post(&url(&target), HeaderMap::new(), Bytes::new(), LONG)
                .await;
            match r {
                Err(PushError::Refused(m)) => {
                    assert!(
                        m.contains("REBOUND_PUSH_ALLOW") && m.contains("loopback"),
                        "{m}"
                    )
                }
                other => panic!("{target}: {other:?}"),
            }
        }
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "a connection was made");
    }

    #[tokio::test]
    async fn other_schemes_are_refused() {
        let client = Client::new(loopback()).expect("client");
        for target in [
            "ftp://127.0.0.1/x",
            "file:///etc/passwd",
            "unix:/run/x.sock",
        ] {
            let r = client
                .post(&url(target), HeaderMap::new(), Bytes::new(), LONG)
                .await;
            assert!(matches!(r, Err(PushError::Refused(_))), "{target}: {r:?}");
        }
    }

    #[tokio::test]
    async fn a_non_http_answer_is_a_protocol_error() {
        let (port, _seen) = server(b"SSH-2.0-OpenSSH_9.6\r\n".to_vec()).await;
        let client = Client::new(loopback()).expect("client");
        let r = client
            .post(
                &url(&format!("http://127.0.0.1:{port}/")),
                HeaderMap::new(),
                Bytes::new(),
                LONG,
            )
            .await;
        match r {
            Err(PushError::Protocol(m)) => assert!(!m.contains('\n'), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    /// An HTTPS server on 127.0.0.1 for `localhost`, with a fresh self-signed certificate
    /// (returned as PEM); counts the handshakes it finished.
    async fn tls_server(
        reply: Vec<u8>,
    ) -> (u16, String, oneshot::Receiver<Vec<u8>>, Arc<AtomicUsize>) {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.signing_key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![ck.cert.der().clone()], key)
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (tx, rx) = oneshot::channel();
        let handshakes = Arc::new(AtomicUsize::new(0));
        let count = handshakes.clone();
        tokio::spawn(async move {
            let (s, _) = listener.accept().await.expect("accept");
            if let Ok(tls) = acceptor.accept(s).await {
                count.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(answer(tls, &reply).await);
            }
        });
        (port, ck.cert.pem(), rx, handshakes)
    }

    #[tokio::test]
    async fn https_to_a_trusted_local_server() {
        let (port, pem, seen, handshakes) =
            tls_server(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()).await;
        let client = Client::new(guard::Allow::parse("localhost").expect("allow"))
            .expect("client")
            .with_extra_roots(pem.as_bytes())
            .expect("roots");
        let r = client
            .post(
                &url(&format!("https://localhost:{port}/tls")),
                HeaderMap::new(),
                Bytes::from_static(b"secret"),
                LONG,
            )
            .await
            .expect("response");
        assert_eq!(r.status, 204);
        assert_eq!(handshakes.load(Ordering::SeqCst), 1);
        let raw = text(&seen.await.expect("request"));
        assert!(raw.starts_with("POST /tls HTTP/1.1\r\n"), "{raw}");
        assert!(
            raw.to_ascii_lowercase()
                .contains(&format!("\r\nhost: localhost:{port}\r\n")),
            "{raw}"
        );
        assert!(raw.ends_with("secret"), "{raw}");
    }

    #[tokio::test]
    async fn https_to_an_untrusted_server_is_a_tls_error() {
        let (port, _pem, _seen, handshakes) =
            tls_server(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()).await;
        let client = Client::new(guard::Allow::parse("localhost").expect("allow")).expect("client");
        let r = client
            .post(
                &url(&format!("https://localhost:{port}/")),
                HeaderMap::new(),
                Bytes::new(),
                LONG,
            )
            .await;
        match r {
            Err(PushError::Tls(m)) => assert!(m.contains("localhost") && !m.contains('\n'), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(handshakes.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn bad_extra_roots_are_errors() {
        let client = || Client::new(guard::Allow::default()).expect("client");
        assert!(client().with_extra_roots(b"").is_err());
        assert!(client().with_extra_roots(b"not pem").is_err());
        assert!(client()
            .with_extra_roots(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
            .is_err());
    }
}
