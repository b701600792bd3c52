//! Test certificates: a CA and the node and client certificates it signs, written as PEM
//! files, and TLS clients of a node (gRPC channels, HTTPS GETs).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A certificate authority that issues certificates into `dir`.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
    pub dir: PathBuf,
    name: String,
}

/// PEM files of one certificate and its key.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Ca {
    /// A new CA named `name`; its certificate is `<dir>/<name>.pem`.
    pub fn new(dir: &Path, name: &str) -> Ca {
        std::fs::create_dir_all(dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let ca = Ca {
            issuer,
            dir: dir.to_path_buf(),
            name: name.to_string(),
        };
        std::fs::write(ca.cert(), ca.issuer.pem()).unwrap();
        ca
    }

    /// The CA certificate's file.
    pub fn cert(&self) -> PathBuf {
        self.dir.join(format!("{}.pem", self.name))
    }

    pub fn cert_pem(&self) -> Vec<u8> {
        std::fs::read(self.cert()).unwrap()
    }

    /// A node certificate for 127.0.0.1 and localhost (server and client use), as
    /// `<dir>/<file>.pem` and `.key`.
    pub fn node(&self, file: &str) -> Issued {
        self.issue(
            file,
            "rebound-node",
            &["127.0.0.1", "localhost"],
            &[
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )
    }

    /// A client certificate whose subject CN is `cn`.
    pub fn client(&self, file: &str, cn: &str) -> Issued {
        self.issue(file, cn, &[], &[ExtendedKeyUsagePurpose::ClientAuth])
    }

    fn issue(
        &self,
        file: &str,
        cn: &str,
        sans: &[&str],
        usages: &[ExtendedKeyUsagePurpose],
    ) -> Issued {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = usages.to_vec();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let out = Issued {
            cert: self.dir.join(format!("{file}.pem")),
            key: self.dir.join(format!("{file}.key")),
        };
        std::fs::write(&out.cert, cert.pem()).unwrap();
        std::fs::write(&out.key, key.serialize_pem()).unwrap();
        out
    }
}

/// A TLS client configuration trusting `ca_pem`, with `identity` as its client certificate.
pub fn client_tls(ca_pem: &[u8], identity: Option<&Issued>) -> ClientTlsConfig {
    let mut c = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem));
    if let Some(i) = identity {
        c = c.identity(Identity::from_pem(
            std::fs::read(&i.cert).unwrap(),
            std::fs::read(&i.key).unwrap(),
        ));
    }
    c
}

/// A TLS channel to `https://<addr>` (the connection is made by the first call).
pub fn tls_channel(addr: std::net::SocketAddr, tls: ClientTlsConfig) -> Channel {
    Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect_timeout(std::time::Duration::from_secs(5))
        .connect_lazy()
}

/// `GET path` over HTTPS, trusting `ca_pem`; the status code, or the TLS or I/O error.
pub async fn https_get(
    addr: std::net::SocketAddr,
    path: &str,
    ca_pem: &[u8],
) -> std::io::Result<u16> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut s = connector
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    // A peer that closes without close_notify is fine here: the response is in.
    let _ = s.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw);
    Ok(text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0))
}
