//! TLS with rustls (docs/operations.md, section 7 "TLS").
//!
//! - `REBOUND_TLS_CERT_FILE` and `REBOUND_TLS_KEY_FILE` (PEM: the chain, leaf first; a PKCS#8,
//!   PKCS#1 or SEC1 key) turn on TLS on the gRPC port and on the HTTP listener.
//! - `REBOUND_TLS_CLIENT_CA_FILE` makes the gRPC port require a client certificate issued by
//!   one of its CAs (mutual TLS). The HTTP listener asks for one and verifies it when sent,
//!   but does not require it, so that Prometheus and probes need only the CA.
//! - Node-to-node calls (GetStats asks its peers) use TLS too when it is on: peers are verified
//!   against `REBOUND_TLS_PEER_CA_FILE` (default: the client CA file, else the system's roots),
//!   and the node presents its own certificate as its client certificate.
//! - `REBOUND_CASSANDRA_TLS_CA_FILE` (and `REBOUND_CASSANDRA_TLS_CERT_FILE` /
//!   `REBOUND_CASSANDRA_TLS_KEY_FILE` for Cassandra's `require_client_auth`): TLS to Cassandra,
//!   whose node certificates are checked against the contact IP addresses.
//!
//! [`ServerTls::reload`] (SIGHUP) reads the files again and, if they are all good, serves the
//! new certificate to new connections; open connections, and their Subscribe streams, keep
//! the session they have. A reload that fails changes nothing.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{Arc, RwLock},
    time::Duration,
};

use rustls::{
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
    RootCertStore, ServerConfig,
};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpStream,
    sync::{mpsc, watch},
    task::JoinSet,
};
use tokio_rustls::{server::TlsStream, TlsAcceptor};

/// Handshakes in progress at once per listener; more connections wait in the accept queue.
const MAX_HANDSHAKES: usize = 256;
/// A client of the HTTP listener that has not finished its handshake by then is dropped (the
/// gRPC port's is `REBOUND_REQUEST_HEADER_TIMEOUT_MS`).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The files of the listeners' TLS (paths as configured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
    pub peer_ca: Option<PathBuf>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn read(key: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{key}: cannot read {}: {e}", path.display()))
}

/// Every certificate of a PEM file; at least one.
fn certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{key}: {} is not PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{key}: {} holds no certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

fn private_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read(key, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        format!(
            "{key}: {} holds no PEM private key (PKCS#8, PKCS#1 or SEC1): {e}",
            path.display()
        )
    })
}

fn roots(key: &str, path: &Path) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for c in certs(key, path)? {
        store.add(c).map_err(|e| {
            format!(
                "{key}: {}: a certificate is not usable as a CA: {e}",
                path.display()
            )
        })?;
    }
    Ok(store)
}

/// What one load of the files produced.
struct Loaded {
    grpc: Arc<ServerConfig>,
    http: Arc<ServerConfig>,
    peer: tonic::transport::ClientTlsConfig,
}

/// The listeners' TLS, reloadable.
pub struct ServerTls {
    files: TlsFiles,
    loaded: RwLock<Arc<Loaded>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads and checks every file; the error names the configuration key at fault.
    pub fn load(files: TlsFiles) -> Result<Self, String> {
        let loaded = Self::build(&files)?;
        Ok(Self {
            files,
            loaded: RwLock::new(Arc::new(loaded)),
        })
    }

    fn build(files: &TlsFiles) -> Result<Loaded, String> {
        let chain = certs("REBOUND_TLS_CERT_FILE", &files.cert)?;
        let key = private_key("REBOUND_TLS_KEY_FILE", &files.key)?;
        let provider = provider();
        let config = |client_auth: Option<(&RootCertStore, bool)>| -> Result<ServerConfig, String> {
            let builder = ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS: {e}"))?;
            let builder =
                match client_auth {
                    None => builder.with_no_client_auth(),
                    Some((roots, required)) => {
                        let v = WebPkiClientVerifier::builder_with_provider(
                            Arc::new(roots.clone()),
                            provider.clone(),
                        );
                        let v = if required {
                            v
                        } else {
                            v.allow_unauthenticated()
                        };
                        builder.with_client_cert_verifier(v.build().map_err(|e| {
                            format!("REBOUND_TLS_CLIENT_CA_FILE: no usable CA: {e}")
                        })?)
                    }
                };
            builder
                .with_single_cert(chain.clone(), key.clone_key())
                .map_err(|e| {
                    format!(
                        "REBOUND_TLS_KEY_FILE: {} does not fit the certificate of \
                         REBOUND_TLS_CERT_FILE ({}): {e}",
                        files.key.display(),
                        files.cert.display()
                    )
                })
        };
        let client_roots = match &files.client_ca {
            Some(p) => Some(roots("REBOUND_TLS_CLIENT_CA_FILE", p)?),
            None => None,
        };
        let mut grpc = config(client_roots.as_ref().map(|r| (r, true)))?;
        grpc.alpn_protocols = vec![b"h2".to_vec()];
        let mut http = config(client_roots.as_ref().map(|r| (r, false)))?;
        http.alpn_protocols = vec![b"http/1.1".to_vec()];

        // Peers: verified against the peer CA, else the client CA, else the system's roots;
        // this node's certificate is its client certificate.
        let identity = tonic::transport::Identity::from_pem(
            read("REBOUND_TLS_CERT_FILE", &files.cert)?,
            read("REBOUND_TLS_KEY_FILE", &files.key)?,
        );
        let mut peer = tonic::transport::ClientTlsConfig::new().identity(identity);
        let peer_ca = match (&files.peer_ca, &files.client_ca) {
            (Some(p), _) => Some(("REBOUND_TLS_PEER_CA_FILE", p)),
            (None, Some(p)) => Some(("REBOUND_TLS_CLIENT_CA_FILE", p)),
            (None, None) => None,
        };
        match peer_ca {
            Some((key, p)) => {
                roots(key, p)?;
                peer = peer.ca_certificate(tonic::transport::Certificate::from_pem(read(key, p)?));
            }
            None => peer = peer.with_native_roots(),
        }
        Ok(Loaded {
            grpc: Arc::new(grpc),
            http: Arc::new(http),
            peer,
        })
    }

    fn current(&self) -> Arc<Loaded> {
        self.loaded.read().expect("tls").clone()
    }

    /// Reads the files again; on success new connections get the new certificate, key and
    /// client CAs. On failure nothing changes.
    pub fn reload(&self) -> Result<(), String> {
        let loaded = Self::build(&self.files)?;
        *self.loaded.write().expect("tls") = Arc::new(loaded);
        Ok(())
    }

    pub fn grpc_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current().grpc.clone())
    }

    pub fn http_acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current().http.clone())
    }

    /// The client side of node-to-node calls.
    pub fn peer(&self) -> tonic::transport::ClientTlsConfig {
        self.current().peer.clone()
    }
}

/// The rustls client configuration for Cassandra: its CAs, and a client certificate if both
/// files are given.
pub fn cassandra_client_config(
    ca: &Path,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let roots = roots("REBOUND_CASSANDRA_TLS_CA_FILE", ca)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots);
    let config = match (cert, key) {
        (Some(c), Some(k)) => builder
            .with_client_auth_cert(
                certs("REBOUND_CASSANDRA_TLS_CERT_FILE", c)?,
                private_key("REBOUND_CASSANDRA_TLS_KEY_FILE", k)?,
            )
            .map_err(|e| {
                format!(
                    "REBOUND_CASSANDRA_TLS_KEY_FILE: {} does not fit the certificate of \
                     REBOUND_CASSANDRA_TLS_CERT_FILE: {e}",
                    k.display()
                )
            })?,
        _ => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The Common Name of a DER certificate's subject (None if it has none, or is not X.509).
pub fn subject_common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// The Common Name of the verified client certificate of the connection a request came on
/// (None: no TLS, or no client certificate).
pub fn client_common_name(extensions: &http::Extensions) -> Option<String> {
    let certs = extensions.get::<ConnInfo>()?.peer_certs.as_ref()?;
    subject_common_name(certs.first()?.as_ref())
}

/// What the gRPC server knows of a connection (in every request's extensions).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client's certificate chain, verified in the handshake (TLS with client auth only).
    pub peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
}

/// The HTTP listener's connections (in clear) give their `ConnInfo` to the dashboard, which
/// reads it from `ConnectInfo` (`axum::serve` with `into_make_service_with_connect_info`).
impl
    axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, tokio::net::TcpListener>>
    for ConnInfo
{
    fn connect_info(_: axum::serve::IncomingStream<'_, tokio::net::TcpListener>) -> Self {
        ConnInfo { peer_certs: None }
    }
}

/// The HTTP listener's TLS connections: with the client certificate verified in the
/// handshake, when one was sent (the dashboard then knows the caller by its CN).
impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>>
    for ConnInfo
{
    fn connect_info(s: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        let (_, session) = s.io().get_ref();
        ConnInfo {
            peer_certs: session
                .peer_certificates()
                .map(|c| Arc::new(c.iter().map(|c| c.clone().into_owned()).collect())),
        }
    }
}

/// A gRPC connection, in clear or TLS.
pub enum MaybeTls<T> {
    Plain(T),
    Tls(Box<TlsStream<T>>),
}

impl<T> tonic::transport::server::Connected for MaybeTls<T>
where
    T: tonic::transport::server::Connected<ConnectInfo = tonic::transport::server::TcpConnectInfo>,
{
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match self {
            MaybeTls::Plain(_) => ConnInfo { peer_certs: None },
            MaybeTls::Tls(s) => {
                let (_, session) = s.get_ref();
                ConnInfo {
                    peer_certs: session
                        .peer_certificates()
                        .map(|c| Arc::new(c.iter().map(|c| c.clone().into_owned()).collect())),
                }
            }
        }
    }
}

/// Both directions of a stream as one trait object: what `MaybeTls` forwards its I/O to.
trait Io: AsyncRead + AsyncWrite + Unpin {}

impl<S: AsyncRead + AsyncWrite + Unpin> Io for S {}

impl<T: AsyncRead + AsyncWrite + Unpin> MaybeTls<T> {
    /// The stream of either variant.
    fn inner(&self) -> &dyn Io {
        match self {
            MaybeTls::Plain(t) => t,
            MaybeTls::Tls(t) => t.as_ref(),
        }
    }

    /// The stream of either variant, pinned (both are `Unpin`).
    fn inner_pin(self: Pin<&mut Self>) -> Pin<&mut dyn Io> {
        match self.get_mut() {
            MaybeTls::Plain(t) => Pin::new(t),
            MaybeTls::Tls(t) => Pin::new(t.as_mut()),
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for MaybeTls<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.inner_pin().poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for MaybeTls<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.inner_pin().poll_write(cx, buf)
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.inner_pin().poll_flush(cx)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.inner_pin().poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.inner_pin().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner().is_write_vectored()
    }
}

/// Takes the TCP connections of `incoming` (a listener's, with its socket options set) and
/// sends on those whose TLS handshake completes, at most `MAX_HANDSHAKES` at a time, each
/// within `handshake_timeout`; a failed handshake is logged and dropped. `wrap` is applied to
/// each TCP connection first; when it gives None the connection is closed at once. Returns
/// when `stop` turns true or the receiver is gone; the handshakes in progress end with it.
pub async fn accept<S, IO, W, A>(
    mut incoming: S,
    handshake_timeout: Duration,
    mut wrap: W,
    acceptor: A,
    tx: mpsc::Sender<(TlsStream<IO>, SocketAddr)>,
    mut stop: watch::Receiver<bool>,
) where
    S: futures::Stream<Item = std::io::Result<TcpStream>> + Unpin,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    W: FnMut(TcpStream) -> Option<IO>,
    A: Fn() -> TlsAcceptor,
{
    use futures::StreamExt;
    async fn stopped(stop: &mut watch::Receiver<bool>) {
        let _ = stop.wait_for(|s| *s).await;
    }
    let mut handshakes = JoinSet::new();
    let refusals = Arc::new(Refusals::default());
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => break,
            _ = tx.closed() => break,
            Some(done) = handshakes.join_next(), if !handshakes.is_empty() => {
                if let Ok(Some(conn)) = done {
                    if tx.send(conn).await.is_err() {
                        break;
                    }
                }
            }
            accepted = incoming.next(), if handshakes.len() < MAX_HANDSHAKES => match accepted {
                // A peer already gone has no address; one over the limit is closed.
                Some(Ok(tcp)) => match tcp.peer_addr().ok().and_then(|peer| Some((wrap(tcp)?, peer))) {
                    None => {}
                    Some((io, peer)) => {
                        let acceptor = acceptor();
                        let refusals = refusals.clone();
                        handshakes.spawn(async move {
                            let reason = match tokio::time::timeout(handshake_timeout, acceptor.accept(io)).await {
                                Ok(Ok(s)) => return Some((s, peer)),
                                Ok(Err(e)) => refusal_reason(&e),
                                Err(_) => format!(
                                    "the client did not finish the handshake within {} ms",
                                    handshake_timeout.as_millis()
                                ),
                            };
                            refusals.refused(peer, reason, std::time::Instant::now());
                            None
                        });
                    }
                },
                Some(Err(e)) => {
                    // Out of file descriptors, typically: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                None => break,
            },
        }
    }
}

/// How often one peer's handshakes refused for one reason are logged.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);
/// Most (peer, reason) pairs remembered; past it the memory is cleared.
const REFUSALS_REMEMBERED: usize = 4096;

/// The log of refused handshakes: each one is logged once per peer address and reason per
/// `REFUSAL_LOG_EVERY`, with how many more were refused since, so an operator sees why a
/// client's handshake fails without a flood from a client that keeps retrying.
#[derive(Debug, Default)]
struct Refusals {
    seen: std::sync::Mutex<
        std::collections::HashMap<(std::net::IpAddr, String), (std::time::Instant, u64)>,
    >,
}

impl Refusals {
    /// Records a refusal; true when it was logged.
    fn refused(&self, peer: SocketAddr, reason: String, now: std::time::Instant) -> bool {
        let key = (peer.ip(), reason);
        let mut seen = self.seen.lock().expect("refusals lock");
        if seen.len() >= REFUSALS_REMEMBERED && !seen.contains_key(&key) {
            seen.clear();
        }
        let unlogged = match seen.get_mut(&key) {
            Some((logged_at, since)) if now.duration_since(*logged_at) < REFUSAL_LOG_EVERY => {
                *since += 1;
                return false;
            }
            Some((logged_at, since)) => {
                *logged_at = now;
                std::mem::take(since)
            }
            None => {
                seen.insert(key.clone(), (now, 0));
                0
            }
        };
        tracing::warn!(
            peer = %key.0,
            reason = %key.1,
            also_refused_since_last_logged = unlogged,
            "TLS handshake refused"
        );
        true
    }
}

/// Why a handshake was refused, in words an operator can act on.
fn refusal_reason(e: &std::io::Error) -> String {
    use rustls::{CertificateError as C, Error as E};
    let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return format!("the connection failed during the handshake: {e}");
    };
    match tls {
        E::NoCertificatesPresented => "the client sent no certificate, and mutual TLS \
            (REBOUND_TLS_CLIENT_CA_FILE) requires one"
            .into(),
        E::InvalidCertificate(C::UnknownIssuer) => "the client's certificate is not issued by \
            a CA of REBOUND_TLS_CLIENT_CA_FILE"
            .into(),
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            "the client's certificate has expired".into()
        }
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            "the client's certificate is not valid yet (check the clocks)".into()
        }
        E::InvalidCertificate(C::BadEncoding) => {
            "the client's certificate cannot be parsed (bad DER encoding)".into()
        }
        E::InvalidCertificate(other) if format!("{other:?}").contains("UnsupportedCertVersion") => {
            "the client's certificate is X.509 v1 (or v2); only X.509 v3 certificates are \
             accepted: issue it with v3 extensions (openssl x509 -req ... -extfile)"
                .into()
        }
        E::InvalidCertificate(other) => format!("the client's certificate was refused: {other}"),
        E::AlertReceived(alert) => format!(
            "the client ended the handshake with the alert {alert:?}: it most likely does not \
             trust this node's certificate (REBOUND_TLS_CERT_FILE)"
        ),
        E::InvalidMessage(_)
        | E::InappropriateHandshakeMessage { .. }
        | E::InappropriateMessage { .. } => {
            "the client does not speak TLS (plain text to a TLS port?)".into()
        }
        E::PeerIncompatible(p) => {
            format!("the client shares no TLS version or cipher suite with the node ({p:?})")
        }
        other => format!("the handshake failed: {other}"),
    }
}

/// The HTTP listener's side of [`accept`]: the connections whose handshake completed.
pub struct TlsListener {
    pub rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    pub local: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(conn) => conn,
            // The acceptor stopped (shutdown): no more connections; serving ends on the
            // shutdown signal.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_handshake_is_logged_once_per_peer_and_reason_a_minute() {
        let log = Refusals::default();
        let t0 = std::time::Instant::now();
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let a_again: SocketAddr = "10.0.0.1:5001".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        assert!(log.refused(a, "v1".into(), t0));
        // The same address (another port) and reason: counted, not logged.
        assert!(!log.refused(a_again, "v1".into(), t0 + Duration::from_secs(1)));
        assert!(!log.refused(a, "v1".into(), t0 + Duration::from_secs(59)));
        // Another reason or another peer: logged.
        assert!(log.refused(a, "expired".into(), t0 + Duration::from_secs(2)));
        assert!(log.refused(b, "v1".into(), t0 + Duration::from_secs(3)));
        // A minute later: logged again.
        assert!(log.refused(a, "v1".into(), t0 + REFUSAL_LOG_EVERY));
        // Memory stays bounded whatever the peers.
        for i in 0..(REFUSALS_REMEMBERED as u32 + 10) {
            let p = SocketAddr::from((std::net::Ipv4Addr::from(i), 1));
            log.refused(p, "x".into(), t0);
        }
        assert!(log.seen.lock().unwrap().len() <= REFUSALS_REMEMBERED);
    }

    #[test]
    fn refusal_reasons_are_in_words() {
        let io = |e: rustls::Error| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        assert!(refusal_reason(&io(rustls::Error::NoCertificatesPresented))
            .contains("sent no certificate"));
        assert!(refusal_reason(&io(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer
        )))
        .contains("REBOUND_TLS_CLIENT_CA_FILE"));
        let v1 = rustls::CertificateError::Other(rustls::OtherError(Arc::new(
            webpki::Error::UnsupportedCertVersion,
        )));
        assert!(refusal_reason(&io(rustls::Error::InvalidCertificate(v1))).contains("X.509 v1"));
        assert!(
            refusal_reason(&std::io::Error::from(std::io::ErrorKind::ConnectionReset))
                .contains("failed during the handshake")
        );
    }

    #[test]
    fn common_names_are_read_and_junk_is_none() {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "payments-worker");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject_common_name(cert.der()).as_deref(),
            Some("payments-worker")
        );
        assert_eq!(subject_common_name(b""), None);
        assert_eq!(subject_common_name(&cert.der()[..40]), None);
    }

    proptest::proptest! {
        #[test]
        fn subject_parsing_is_total(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let _ = subject_common_name(&bytes);
        }
    }
}
