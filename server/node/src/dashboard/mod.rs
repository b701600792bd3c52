//! The web dashboard on the HTTP listener (`docs/dashboard.md` is its contract): the page's
//! embedded files (`assets`) and small JSON endpoints under `/api/v1/` (`api`) that call the
//! same `Admin` functions and the same `Auth` checks as the gRPC services, in the shapes of
//! `rebound --json` (`rebound_proto::json`).
//!
//! The two mappings live here, once each: a gRPC code to an HTTP status ([`http_status`]),
//! and an error (an `AuthError` goes through `Error` into a `tonic::Status` like on gRPC) to
//! the JSON answer `{"code", "message"}` ([`ApiError`]).
//!
//! Before anything of a `POST` is read, [`request_guard`] refuses one without
//! `Content-Type: application/json` (415) or whose `Origin` names another origin than its
//! `Host` (403): with authentication off, another web site must not be able to drive the
//! node from a visitor's browser (a cross-origin form can send neither that content type
//! nor a matching Origin). With authentication off it also refuses every API call to a host
//! name other than `localhost` (DNS rebinding).

mod api;
mod assets;
pub mod live;
pub mod parse;

use std::sync::Arc;

use axum::{
    extract::{connect_info::ConnectInfo, Request},
    http::{header, request::Parts, HeaderValue, Method, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{any, get, post},
    Router,
};
use serde_json::{json, Value};
use tonic::Code;

use crate::{
    auth::{Auth, Credential},
    tls::ConnInfo,
};
use rebound_engine::{error::Error, handle::Handle};

/// What the endpoints need from the node.
#[derive(Debug)]
pub struct Dashboard {
    pub handle: Handle,
    pub auth: Arc<Auth>,
    pub window_seconds: u32,
    /// `REBOUND_TRACE_URL_TEMPLATE`.
    pub trace_url_template: Option<String>,
}

/// The one mapping of gRPC codes to HTTP statuses.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An error answer: `{"code": "INVALID_ARGUMENT", "message": "policy.multiplier: ..."}`,
/// with the message gRPC would send.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: Code,
    message: String,
}

impl From<tonic::Status> for ApiError {
    fn from(s: tonic::Status) -> Self {
        ApiError {
            status: http_status(s.code()),
            code: s.code(),
            message: s.message().to_string(),
        }
    }
}

/// Through `tonic::Status`, as on gRPC (internal and storage errors are logged there).
impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        tonic::Status::from(e).into()
    }
}

impl From<crate::auth::AuthError> for ApiError {
    fn from(e: crate::auth::AuthError) -> Self {
        Error::from(e).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"code": rebound_common::trace::code_name(self.code as i32), "message": self.message});
        json_response(self.status, &body)
    }
}

/// A JSON answer, never cached.
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    assets::security_headers(h);
    r
}

/// Whether a `Content-Type` is `application/json` (parameters such as a charset allowed).
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// Whether an `Origin` is `http(s)://` plus the request's `Host`.
fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else {
        return false;
    };
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|o| o.eq_ignore_ascii_case(host))
}

/// Whether `host` (a `Host` header: name or address, optional port) is an IP address or
/// `localhost`, which DNS cannot point elsewhere.
fn is_address_or_localhost(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        rest.split_once(']').map_or("", |(name, _)| name)
    } else if host.matches(':').count() == 1 {
        host.split(':').next().unwrap_or("")
    } else {
        host
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

/// Refuses, before anything of the request is read:
/// - with authentication off, an API call whose `Host` is a DNS name other than `localhost`
///   (403): a page of another site whose name was made to resolve to this node (DNS
///   rebinding) is then same-origin with it, and nothing else would stop it;
/// - a request a browser marks `Sec-Fetch-Site: cross-site` (403);
/// - a `POST` without a JSON content type (415) or from another origin (403).
async fn request_guard(
    axum::extract::State(d): axum::extract::State<Arc<Dashboard>>,
    request: Request,
    next: Next,
) -> Response {
    if !d.auth.is_on() {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| request.uri().authority().map(|a| a.as_str()));
        if let Some(host) = host.filter(|h| !is_address_or_localhost(h)) {
            return ApiError::from(Error::PermissionDenied(format!(
                "this node has no credentials (REBOUND_CREDENTIALS_FILE), so its API answers \
                 only requests to an IP address or localhost, not {host:?} (a host name could \
                 be another site's, rebound to this node)"
            )))
            .into_response();
        }
    }
    // Browsers say where a request comes from: a read by another site (a no-cors fetch of
    // /api/v1/stats walks the whole directory) is refused too.
    let cross_site = request
        .headers()
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
    if cross_site {
        return ApiError::from(Error::PermissionDenied(
            "Sec-Fetch-Site: cross-site: the API answers the dashboard's own page only".into(),
        ))
        .into_response();
    }
    if request.method() == Method::POST {
        let h = request.headers();
        if let Some(origin) = h.get(header::ORIGIN) {
            let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
            let ok = origin.to_str().is_ok_and(|o| same_origin(o, host));
            if !ok {
                return ApiError::from(Error::PermissionDenied(
                    "the Origin header names another origin than this node's (Host): \
                     cross-origin writes are refused"
                        .into(),
                ))
                .into_response();
            }
        }
        if !is_json(h.get(header::CONTENT_TYPE)) {
            return ApiError {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                code: Code::InvalidArgument,
                message: "a POST must have Content-Type: application/json (a JSON object \
                          body, {} when there is nothing to send)"
                    .into(),
            }
            .into_response();
        }
    }
    next.run(request).await
}

/// What a request presents to `Auth`: its headers as gRPC metadata, and its connection's
/// TLS client certificate.
pub struct Presented {
    pub headers: http::HeaderMap,
    pub extensions: http::Extensions,
}

impl Presented {
    /// The connection's `ConnInfo` comes from `ConnectInfo`, which the node's HTTP listener
    /// sets (`tls::ConnInfo` for `axum::serve`); a router served without it (a test calling
    /// it directly) presents no client certificate.
    pub fn of(parts: &Parts) -> Presented {
        let mut extensions = http::Extensions::new();
        if let Some(ConnectInfo(info)) = parts.extensions.get::<ConnectInfo<ConnInfo>>() {
            extensions.insert(info.clone());
        }
        Presented {
            headers: parts.headers.clone(),
            extensions,
        }
    }

    /// The `authorization` to pass on to peers (GetStats asks them with it).
    pub fn authorization(&self) -> Option<String> {
        self.headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

impl Dashboard {
    /// Any known credential (None: authentication is off).
    fn caller(&self, p: &Presented) -> Result<Option<Arc<Credential>>, Error> {
        Ok(self.auth.caller(&p.headers, &p.extensions)?)
    }

    /// An admin credential, as AdminService's gate asks.
    fn admin_call(&self, p: &Presented) -> Result<(), Error> {
        Ok(self.auth.admin(&p.headers, &p.extensions)?)
    }
}

async fn not_found() -> Response {
    ApiError::from(Error::NotFound(
        "no such endpoint (docs/dashboard.md lists them)".into(),
    ))
    .into_response()
}

/// The dashboard's routes: the assets and `/api/v1/`.
pub fn router(d: Arc<Dashboard>) -> Router {
    let s = "/api/v1/services/{service}";
    Router::new()
        .route("/api/v1/session", get(api::session))
        .route("/api/v1/live", get(api::live))
        .route("/api/v1/services", get(api::services))
        .route("/api/v1/stats", get(api::stats))
        .route("/api/v1/ring", get(api::ring))
        .route(s, get(api::service))
        .route(&format!("{s}/pause"), post(api::pause))
        .route(&format!("{s}/resume"), post(api::resume))
        .route(&format!("{s}/policy"), post(api::policy))
        .route(&format!("{s}/limits"), post(api::limits))
        .route(&format!("{s}/purge"), post(api::purge))
        .route(
            &format!("{s}/push-target"),
            get(api::push_target).post(api::set_push_target),
        )
        .route(
            &format!("{s}/push-target/clear"),
            post(api::clear_push_target),
        )
        .route(&format!("{s}/dead-letters"), get(api::dead_letters))
        .route(&format!("{s}/dead-letters/redrive"), post(api::redrive))
        .route(
            &format!("{s}/dead-letters/purge"),
            post(api::purge_dead_letters),
        )
        .route(&format!("{s}/retries"), get(api::retries))
        .route(&format!("{s}/retry-actions"), post(api::act_on_retries))
        .route(&format!("{s}/retries/{{transaction_id}}"), get(api::retry))
        .route("/api/v1/windows/{day}/{window}", get(api::window))
        .route("/api/v1", any(not_found))
        .route("/api/v1/{*rest}", any(not_found))
        .layer(middleware::from_fn_with_state(d.clone(), request_guard))
        .with_state(d)
        .merge(assets::router())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_statuses_as_documented() {
        for (code, status) in [
            (Code::InvalidArgument, 400),
            (Code::Unauthenticated, 401),
            (Code::PermissionDenied, 403),
            (Code::NotFound, 404),
            (Code::AlreadyExists, 409),
            (Code::FailedPrecondition, 409),
            (Code::Aborted, 409),
            (Code::ResourceExhausted, 429),
            (Code::Unavailable, 503),
            (Code::DeadlineExceeded, 504),
            (Code::Internal, 500),
            (Code::Unknown, 500),
        ] {
            assert_eq!(http_status(code).as_u16(), status, "{code:?}");
        }
    }

    #[test]
    fn origins_and_content_types() {
        assert!(same_origin("http://127.0.0.1:9464", Some("127.0.0.1:9464")));
        assert!(same_origin("https://Node:1", Some("node:1")));
        assert!(!same_origin("http://evil.example", Some("127.0.0.1:9464")));
        assert!(!same_origin("null", Some("127.0.0.1:9464")));
        assert!(!same_origin("http://127.0.0.1:9464", None));
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert!(is_json(Some(&v("application/json"))));
        assert!(is_json(Some(&v("Application/JSON; charset=utf-8"))));
        assert!(!is_json(Some(&v("text/plain"))));
        assert!(!is_json(Some(&v("application/jsonx"))));
        assert!(!is_json(None));
    }

    #[test]
    fn hosts_that_dns_cannot_rebind() {
        for ok in [
            "127.0.0.1:9464",
            "127.0.0.1",
            "localhost:9464",
            "LOCALHOST",
            "[::1]:9464",
            "::1",
            "10.1.2.3:80",
        ] {
            assert!(is_address_or_localhost(ok), "{ok}");
        }
        for bad in [
            "evil.example:9464",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io:9464",
            "",
            "[::1",
        ] {
            assert!(!is_address_or_localhost(bad), "{bad}");
        }
    }
}
