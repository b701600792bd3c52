//! A small HTTP/1.1 client of a node's HTTP listener (the dashboard API's tests): one
//! request per connection, in clear or over TLS with an optional client certificate; no HTTP
//! client crate needed.

use std::{sync::Arc, time::Duration};

use rebound_server::node::Node;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::pki::{Ca, Issued};

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {self:#?}"))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Asserts the status and, for an error, the JSON error shape; returns the body.
    pub fn expect(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "{self:#?}");
        let v = self.json();
        if status >= 400 {
            assert!(v["code"].is_string() && v["message"].is_string(), "{v}");
        }
        v
    }
}

/// A chunked body (`Transfer-Encoding: chunked`) put back together.
pub fn unchunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// One request on `s`: the method, path, headers and body; the connection closes after.
pub async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Answer {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    if let Some(b) = body {
        s.write_all(b).await.unwrap();
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        unchunk(body)
    } else {
        body.to_string()
    };
    Answer {
        status,
        headers,
        body,
    }
}

/// A client of one node's HTTP listener, with a token or none.
#[derive(Clone)]
pub struct Http {
    pub addr: std::net::SocketAddr,
    pub token: Option<String>,
    /// The `Host` header to send (None: `addr`).
    pub host: Option<String>,
}

impl Http {
    pub fn of(node: &Node, token: Option<&str>) -> Http {
        Http {
            addr: node.http_addr().expect("the HTTP listener is on"),
            token: token.map(String::from),
            host: None,
        }
    }

    pub async fn send(
        &self,
        method: &str,
        path: &str,
        extra: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Answer {
        let auth = self.token.as_ref().map(|t| format!("Bearer {t}"));
        let mut headers: Vec<(&str, &str)> = extra.to_vec();
        if let Some(a) = &auth {
            headers.push(("Authorization", a));
        }
        let s = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let host = self.host.clone().unwrap_or_else(|| self.addr.to_string());
        tokio::time::timeout(
            Duration::from_secs(30),
            exchange(s, &host, method, path, &headers, body),
        )
        .await
        .expect("answered within 30 s")
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, &[], None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        let b = body.to_string();
        self.send(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(b.as_bytes()),
        )
        .await
    }
}

/// A GET over TLS trusting `ca`, with `identity` as the client certificate.
pub async fn https(
    addr: std::net::SocketAddr,
    ca: &Ca,
    identity: Option<&Issued>,
    path: &str,
) -> Answer {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&ca.cert_pem()) {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        Some(i) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&i.cert)
                .unwrap()
                .map(|c| c.unwrap())
                .collect();
            let key = PrivateKeyDer::from_pem_file(&i.key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let s = connector
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await
        .unwrap();
    exchange(s, &addr.to_string(), "GET", path, &[], None).await
}
