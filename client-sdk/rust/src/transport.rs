//! The connection settings every call shares: the credentials sent with each call, the
//! transport the generated clients run over, and the endpoint for a user-supplied address.
//! Below both the producer client (`client`) and the executor, which share these.

use std::time::Duration;

use tonic::{
    metadata::AsciiMetadataValue,
    service::{interceptor::InterceptedService, Interceptor},
    transport::{Channel, ClientTlsConfig, Endpoint},
};

use crate::error::Error;

/// How long [`Client::connect`](crate::Client::connect) waits for the TCP and HTTP/2 handshake. Producers usually call
/// Rebound while handling a failure, so an unreachable node should surface quickly rather than
/// stall the caller on the OS's multi-minute TCP timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The `authorization` metadata sent with every call: none by default, `Bearer <token>` after
/// [`Client::with_token`](crate::Client::with_token) (for nodes started with `REBOUND_CREDENTIALS_FILE`). Its `Debug`
/// output never shows the token.
#[derive(Clone, Default)]
pub struct Credentials(Option<AsciiMetadataValue>);

impl Credentials {
    /// `authorization: Bearer <token>`; the token must be printable ASCII.
    pub fn bearer(token: &str) -> Result<Self, Error> {
        let mut value: AsciiMetadataValue = format!("Bearer {token}")
            .parse()
            .map_err(|_| Error::InvalidArgument("token: must be printable ASCII".into()))?;
        // Kept out of HTTP/2 header compression tables and debug output.
        value.set_sensitive(true);
        Ok(Credentials(Some(value)))
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "Credentials(Bearer <redacted>)",
            None => "Credentials(none)",
        })
    }
}

/// Adds the credentials, and the current span's W3C trace context (`traceparent`,
/// `tracestate`) when it has one, to every call.
impl Interceptor for Credentials {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        if let Some((parent, state)) = crate::trace::current() {
            if let Ok(v) = parent.parse() {
                req.metadata_mut().insert("traceparent", v);
            }
            if !state.is_empty() {
                if let Ok(v) = state.parse() {
                    req.metadata_mut().insert("tracestate", v);
                }
            }
        }
        Ok(req)
    }
}

/// What the generated clients of a [`Client`](crate::Client) run over: its channel, with its credentials.
pub type Transport = InterceptedService<Channel, Credentials>;

/// The endpoint for a user-supplied address. A bare `host:port` is what people type (and what
/// the server logs), so it is accepted as plain-text HTTP/2.
pub(crate) fn endpoint(addr: &str) -> Result<Endpoint, Error> {
    endpoint_tls(addr, None)
}

/// [`endpoint`], with TLS when `tls` is given (a bare `host:port` is then `https://`).
pub(crate) fn endpoint_tls(addr: &str, tls: Option<&ClientTlsConfig>) -> Result<Endpoint, Error> {
    let uri = if addr.contains("://") {
        addr.to_owned()
    } else if tls.is_some() {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    };
    let mut endpoint = Endpoint::from_shared(uri)
        .map_err(|e| Error::InvalidArgument(format!("invalid server address {addr:?}: {e}")))?;
    if let Some(tls) = tls {
        endpoint = endpoint
            .tls_config(tls.clone())
            .map_err(|e| Error::InvalidArgument(format!("tls for {addr:?}: {e}")))?;
    }
    Ok(endpoint.connect_timeout(CONNECT_TIMEOUT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_show_the_token() {
        let c = Credentials::bearer("s3cret").unwrap();
        assert_eq!(format!("{c:?}"), "Credentials(Bearer <redacted>)");
        assert_eq!(format!("{:?}", Credentials::default()), "Credentials(none)");
        assert!(Credentials::bearer("line\nbreak").is_err());
    }

    #[test]
    fn adds_a_missing_scheme() {
        assert_eq!(
            endpoint("127.0.0.1:50051").unwrap().uri().to_string(),
            "http://127.0.0.1:50051/"
        );
        assert_eq!(
            endpoint("http://localhost:50051")
                .unwrap()
                .uri()
                .to_string(),
            "http://localhost:50051/"
        );
    }

    #[test]
    fn rejects_a_bad_address() {
        let e = endpoint("not a uri").unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    }
}
