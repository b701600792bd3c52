//! Per-service credentials: a caller can enqueue to and subscribe on only its own services;
//! admin calls need admin credentials. Certificates as credentials under mutual TLS:
//! docs/operations.md, section 7 "TLS".
//!
//! Off unless `credentials_file` (`REBOUND_CREDENTIALS_FILE`) names a TOML file of
//! credentials:
//!
//! ```toml
//! [[credential]]
//! name = "payments"              # shown in logs, never secret
//! token_sha256 = "9f86d081…"     # SHA-256 of the bearer token, 64 hex digits
//! services = ["payments"]        # "*" for every service
//! admin = false                  # AdminService
//! ```
//!
//! Callers send `authorization: Bearer <token>`. Under mutual TLS
//! (`REBOUND_TLS_CLIENT_CA_FILE`) a call without that metadata is the credential whose `name`
//! is the Common Name (CN) of the client certificate's subject; such a credential may omit
//! `token_sha256`. A token, when sent, decides (it is never combined with the certificate).
//! A missing or unknown token (or certificate name) is UNAUTHENTICATED; a service outside the
//! credential's list, or an admin call without `admin = true`, is PERMISSION_DENIED. Either
//! is decided before anything is read or written. The file holds only hashes, so reading it
//! reveals no token. Health and reflection stay open. [`Auth::reload`] (SIGHUP) reads the file
//! again; a file that does not parse leaves the credentials as they were.
//!
//! On the gRPC port, [`AuthLayer`] authenticates every call of `rebound.v1` before its body is
//! read (and refuses AdminService calls without an admin credential), and leaves the
//! [`Caller`] in the request's extensions. Which service a call touches is in its body, so
//! the handlers check that part ([`Auth::may_use`]) once they have decoded it.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{Arc, RwLock},
    task::{Context, Poll},
};

use http::HeaderMap;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use rebound_engine::{error::Error, names};

/// Why a call was refused. Its own type, so that `auth` depends on nothing above it; the
/// domain error (`error.rs`) turns it into UNAUTHENTICATED or PERMISSION_DENIED.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum AuthError {
    /// No credential, or an unknown one, on a node that requires them.
    #[error("{0}")]
    Unauthenticated(String),
    /// A known credential that does not cover the service (or admin calls).
    #[error("{0}")]
    PermissionDenied(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    credential: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    token_sha256: Option<String>,
    #[serde(default)]
    services: Vec<String>,
    #[serde(default)]
    admin: bool,
}

/// What one token may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub name: String,
    all_services: bool,
    services: HashSet<String>,
    admin: bool,
}

impl Credential {
    /// Whether the credential may make admin calls (`admin = true`).
    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// The services the credential may use, sorted; None: every service (`"*"`).
    pub fn services(&self) -> Option<Vec<String>> {
        if self.all_services {
            return None;
        }
        let mut v: Vec<String> = self.services.iter().cloned().collect();
        v.sort();
        Some(v)
    }
}

/// The credentials of one reading of the file.
#[derive(Debug, Default)]
struct Table {
    by_hash: HashMap<[u8; 32], Arc<Credential>>,
    by_name: HashMap<String, Arc<Credential>>,
}

/// The node's credentials; `None` inside when authentication is off.
#[derive(Debug, Default)]
pub struct Auth {
    path: Option<PathBuf>,
    table: RwLock<Option<Arc<Table>>>,
}

/// 64 hex digits (surrounding whitespace allowed) as 32 bytes. Decodes byte pairs, so no
/// input can make it slice inside a character; anything but hex digits is refused.
fn hex32(s: &str) -> Option<[u8; 32]> {
    fn digit(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let s = s.trim().as_bytes();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (b, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
        *b = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

/// The token of an `authorization` value `Bearer <token>` (scheme in any case, token
/// trimmed, not empty).
pub fn bearer_token(value: &str) -> Option<&str> {
    value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
        .filter(|t| !t.is_empty())
}

impl Auth {
    /// Every call is allowed.
    pub fn off() -> Self {
        Self::default()
    }

    pub fn is_on(&self) -> bool {
        self.table().is_some()
    }

    fn table(&self) -> Option<Arc<Table>> {
        self.table.read().expect("credentials").clone()
    }

    /// Reads a credentials file; the error names the entry and the key at fault.
    pub fn load(path: &Path) -> Result<Self, String> {
        let mut auth = Self::read(path)?;
        auth.path = Some(path.to_path_buf());
        Ok(auth)
    }

    fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Reads the file `load` read again and, if it is good, uses it from the next call on;
    /// if not, keeps the credentials as they are and says why. Nothing to do when off.
    pub fn reload(&self) -> Result<(), String> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let fresh = Self::read(path)?;
        let table = fresh.table();
        *self.table.write().expect("credentials") = table;
        Ok(())
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| format!("bad TOML: {e}"))?;
        if file.credential.is_empty() {
            return Err("has no [[credential]] entry".into());
        }
        let mut by_hash = HashMap::new();
        let mut by_name = HashMap::new();
        for (i, e) in file.credential.into_iter().enumerate() {
            let at = |key: &str| format!("credential[{i}].{key}");
            if e.name.trim().is_empty() || e.name.len() > 128 {
                return Err(format!("{}: must be 1-128 bytes", at("name")));
            }
            if by_name.contains_key(&e.name) {
                return Err(format!("{}: {:?} is used twice", at("name"), e.name));
            }
            let hash = match &e.token_sha256 {
                None => None,
                Some(h) => Some(hex32(h).ok_or_else(|| {
                    format!(
                        "{}: must be 64 hex digits, the SHA-256 of the token \
                         (printf %s \"$TOKEN\" | sha256sum)",
                        at("token_sha256")
                    )
                })?),
            };
            let mut all_services = false;
            let mut services = HashSet::new();
            for (j, s) in e.services.iter().enumerate() {
                if s == "*" {
                    all_services = true;
                } else {
                    if let Some(problem) = names::service_problem(s) {
                        return Err(format!("{}[{j}]: {problem}", at("services")));
                    }
                    services.insert(s.clone());
                }
            }
            if !all_services && services.is_empty() && !e.admin {
                return Err(format!(
                    "{}: grants nothing: list services (or \"*\") or set admin = true",
                    at("services")
                ));
            }
            let cred = Arc::new(Credential {
                name: e.name.clone(),
                all_services,
                services,
                admin: e.admin,
            });
            if let Some(hash) = hash {
                if by_hash.insert(hash, cred.clone()).is_some() {
                    return Err(format!(
                        "{}: the same token is listed twice",
                        at("token_sha256")
                    ));
                }
            }
            by_name.insert(e.name, cred);
        }
        Ok(Auth {
            path: None,
            table: RwLock::new(Some(Arc::new(Table { by_hash, by_name }))),
        })
    }

    /// The credential a call presents: `Ok(None)` when authentication is off, UNAUTHENTICATED
    /// when it is on and the call has no known token (nor, without a token, a client
    /// certificate whose CN names a credential). `headers` are the request's (gRPC metadata),
    /// `extensions` too: the TLS connection's client certificate is found there.
    pub fn caller(
        &self,
        md: &HeaderMap,
        extensions: &http::Extensions,
    ) -> Result<Option<Arc<Credential>>, AuthError> {
        let Some(table) = self.table() else {
            return Ok(None);
        };
        let Some(value) = md.get("authorization") else {
            return match crate::tls::client_common_name(extensions) {
                Some(cn) => table.by_name.get(&cn).cloned().map(Some).ok_or_else(|| {
                    AuthError::Unauthenticated(format!(
                        "the client certificate's subject CN {cn:?} names no credential, \
                         and no `authorization: Bearer <token>` metadata was sent"
                    ))
                }),
                None => Err(AuthError::Unauthenticated(
                    "this node requires a credential: send the metadata \
                     `authorization: Bearer <token>`"
                        .into(),
                )),
            };
        };
        let token = value.to_str().ok().and_then(bearer_token).ok_or_else(|| {
            AuthError::Unauthenticated("the authorization metadata must be `Bearer <token>`".into())
        })?;
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        table
            .by_hash
            .get(&hash)
            .cloned()
            .map(Some)
            .ok_or_else(|| AuthError::Unauthenticated("unknown token".into()))
    }

    /// PERMISSION_DENIED unless the caller may use `service` (always allowed when off).
    pub fn may_use(
        caller: Option<&Credential>,
        field: &str,
        service: &str,
    ) -> Result<(), AuthError> {
        match caller {
            None => Ok(()),
            Some(c) if c.all_services || c.services.contains(service) => Ok(()),
            Some(c) => Err(AuthError::PermissionDenied(format!(
                "{field}: credential {:?} may not use service {service:?}",
                c.name
            ))),
        }
    }

    /// UNAUTHENTICATED or PERMISSION_DENIED unless the call presents an admin credential.
    pub fn admin(&self, md: &HeaderMap, extensions: &http::Extensions) -> Result<(), AuthError> {
        self.admin_caller(md, extensions).map(|_| ())
    }

    fn admin_caller(
        &self,
        md: &HeaderMap,
        extensions: &http::Extensions,
    ) -> Result<Option<Arc<Credential>>, AuthError> {
        let caller = self.caller(md, extensions)?;
        match caller.as_deref() {
            None => {}
            Some(c) if c.admin => {}
            Some(c) => {
                return Err(AuthError::PermissionDenied(format!(
                    "credential {:?} is not an admin credential (admin = true)",
                    c.name
                )))
            }
        }
        Ok(caller)
    }
}

/// Who made a gRPC call, as [`AuthLayer`] found it: `None` inside when authentication is off.
/// The layer puts one in the extensions of every `rebound.v1` call it lets through.
#[derive(Debug, Clone)]
pub struct Caller(Option<Arc<Credential>>);

impl Caller {
    /// The caller of a request that came through [`AuthLayer`]. A request that did not is
    /// refused, never taken for "authentication off".
    pub fn of(extensions: &http::Extensions) -> Result<Option<&Credential>, AuthError> {
        match extensions.get::<Caller>() {
            Some(c) => Ok(c.0.as_deref()),
            None => Err(AuthError::Unauthenticated(
                "the call was not authenticated (the node serves its API behind AuthLayer)".into(),
            )),
        }
    }
}

/// What a gRPC path asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// Health and reflection: open.
    Nothing,
    /// RetryService and ExecutorService: a known credential (or none, when off).
    Credential,
    /// AdminService: an admin credential.
    Admin,
}

fn needs(path: &str) -> Needs {
    match path.strip_prefix("/rebound.v1.") {
        None => Needs::Nothing,
        Some(rest) if rest.starts_with("AdminService/") => Needs::Admin,
        Some(_) => Needs::Credential,
    }
}

/// The tower layer of the gRPC port that authenticates: every call of `rebound.v1` presents a
/// known credential (AdminService calls an admin one) before its body is read, or is answered
/// UNAUTHENTICATED or PERMISSION_DENIED; what it presented is its [`Caller`].
#[derive(Debug, Clone)]
pub struct AuthLayer {
    auth: Arc<Auth>,
}

impl AuthLayer {
    pub fn new(auth: Arc<Auth>) -> Self {
        Self { auth }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = Authenticated<S>;
    fn layer(&self, inner: S) -> Authenticated<S> {
        Authenticated {
            inner,
            auth: self.auth.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Authenticated<S> {
    inner: S,
    auth: Arc<Auth>,
}

impl<S, B, RB> tower::Service<http::Request<B>> for Authenticated<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    RB: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let found = match needs(req.uri().path()) {
            Needs::Nothing => Ok(None),
            Needs::Credential => self
                .auth
                .caller(req.headers(), req.extensions())
                .map(|c| Some(Caller(c))),
            Needs::Admin => self
                .auth
                .admin_caller(req.headers(), req.extensions())
                .map(|c| Some(Caller(c))),
        };
        match found {
            Ok(caller) => {
                if let Some(caller) = caller {
                    req.extensions_mut().insert(caller);
                }
                // The clone that was made ready serves this call; the fresh clone waits.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                Box::pin(inner.call(req))
            }
            Err(e) => {
                let refused = tonic::Status::from(e).into_http();
                Box::pin(async move { Ok(refused) })
            }
        }
    }
}

/// A refused credential is the API's UNAUTHENTICATED or PERMISSION_DENIED.
impl From<AuthError> for Error {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unauthenticated(m) => Error::Unauthenticated(m),
            AuthError::PermissionDenied(m) => Error::PermissionDenied(m),
        }
    }
}

impl From<AuthError> for tonic::Status {
    fn from(e: AuthError) -> Self {
        Error::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_tls() -> http::Extensions {
        http::Extensions::new()
    }

    fn sha(t: &str) -> String {
        Sha256::digest(t.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn md(v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert("authorization", v.parse().unwrap());
        m
    }

    #[test]
    fn tokens_map_to_what_they_may_do() {
        let auth = Auth::parse(&format!(
            "[[credential]]\nname = \"pay\"\ntoken_sha256 = \"{}\"\nservices = [\"payments\"]\n\
             [[credential]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nadmin = true\n",
            sha("p-secret"),
            sha("o-secret").to_uppercase()
        ))
        .unwrap();
        let pay = auth.caller(&md("Bearer p-secret"), &no_tls()).unwrap();
        let pay = pay.as_deref();
        assert_eq!(pay.map(|c| c.name.as_str()), Some("pay"));
        Auth::may_use(pay, "service", "payments").unwrap();
        let e = Auth::may_use(pay, "service", "orders").unwrap_err();
        assert!(matches!(e, AuthError::PermissionDenied(ref m) if m.starts_with("service:")));
        assert!(matches!(
            auth.admin(&md("Bearer p-secret"), &no_tls()),
            Err(AuthError::PermissionDenied(_))
        ));
        auth.admin(&md("bearer o-secret"), &no_tls()).unwrap();
        for bad in ["Bearer nope", "Basic p-secret", "Bearer ", "p-secret"] {
            assert!(
                matches!(
                    auth.caller(&md(bad), &no_tls()),
                    Err(AuthError::Unauthenticated(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            auth.caller(&HeaderMap::new(), &no_tls()),
            Err(AuthError::Unauthenticated(_))
        ));
        // Off: everything passes.
        let off = Auth::off();
        assert_eq!(off.caller(&HeaderMap::new(), &no_tls()).unwrap(), None);
        off.admin(&HeaderMap::new(), &no_tls()).unwrap();
    }

    /// Calls the layer over a service that answers with the caller's name in a header
    /// (`-` when authentication is off, absent when no `Caller` was left).
    async fn through_layer(
        auth: &Arc<Auth>,
        path: &str,
        token: Option<&str>,
    ) -> http::Response<String> {
        use tower::{Layer, ServiceExt};
        let inner = tower::service_fn(|req: http::Request<()>| async move {
            let mut res = http::Response::new(String::new());
            if let Some(c) = req.extensions().get::<Caller>() {
                let name = c.0.as_ref().map_or("-".to_string(), |c| c.name.clone());
                res.headers_mut().insert("x-caller", name.parse().unwrap());
            }
            Ok::<_, std::convert::Infallible>(res)
        });
        let mut req = http::Request::builder().uri(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        AuthLayer::new(auth.clone())
            .layer(inner)
            .oneshot(req.body(()).unwrap())
            .await
            .unwrap()
    }

    fn code(res: &http::Response<String>) -> Option<&str> {
        res.headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
    }

    fn caller_of(res: &http::Response<String>) -> Option<&str> {
        res.headers().get("x-caller").and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn the_layer_authenticates_every_api_call_before_its_handler() {
        let auth = Arc::new(
            Auth::parse(&format!(
                "[[credential]]\nname = \"pay\"\ntoken_sha256 = \"{}\"\nservices = [\"payments\"]\n\
                 [[credential]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nadmin = true\n",
                sha("p-secret"),
                sha("o-secret")
            ))
            .unwrap(),
        );
        let enqueue = "/rebound.v1.RetryService/EnqueueRetry";
        let ack = "/rebound.v1.ExecutorService/Ack";
        let admin = "/rebound.v1.AdminService/ListServices";
        // No token, an unknown one: UNAUTHENTICATED (16), and the handler never runs.
        for (path, token) in [(enqueue, None), (ack, Some("nope")), (admin, None)] {
            let res = through_layer(&auth, path, token).await;
            assert_eq!(code(&res), Some("16"), "{path} {token:?}");
            assert_eq!(caller_of(&res), None);
        }
        // A service credential on AdminService: PERMISSION_DENIED (7).
        let res = through_layer(&auth, admin, Some("p-secret")).await;
        assert_eq!(code(&res), Some("7"));
        assert_eq!(caller_of(&res), None);
        // Known credentials reach the handler as its `Caller`.
        let res = through_layer(&auth, enqueue, Some("p-secret")).await;
        assert_eq!((code(&res), caller_of(&res)), (None, Some("pay")));
        let res = through_layer(&auth, admin, Some("o-secret")).await;
        assert_eq!((code(&res), caller_of(&res)), (None, Some("ops")));
        // Health and reflection stay open, with no caller.
        for path in [
            "/grpc.health.v1.Health/Check",
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        ] {
            let res = through_layer(&auth, path, None).await;
            assert_eq!((code(&res), caller_of(&res)), (None, None), "{path}");
        }
        // Off: every API call passes, as a caller of no credential.
        let off = Arc::new(Auth::off());
        for path in [enqueue, ack, admin] {
            let res = through_layer(&off, path, None).await;
            assert_eq!((code(&res), caller_of(&res)), (None, Some("-")), "{path}");
        }
        // A handler reached without the layer refuses rather than taking "off".
        assert!(matches!(
            Caller::of(&http::Extensions::new()),
            Err(AuthError::Unauthenticated(_))
        ));
    }

    #[test]
    fn a_bad_file_names_the_entry_and_key() {
        let ok = sha("x");
        for (text, want) in [
            (String::new(), "no [[credential]]".to_string()),
            (
                "[[credential]]\nname = \"a\"\nadmin = true\n[[credential]]\nname = \"a\"\nadmin = true\n".into(),
                "credential[1].name: \"a\" is used twice".into(),
            ),
            (
                "[[credential]]\nname = \"a\"\ntoken_sha256 = \"abc\"\nadmin = true\n".into(),
                "credential[0].token_sha256".into(),
            ),
            (
                format!("[[credential]]\nname = \"a\"\ntoken_sha256 = \"{ok}\"\n"),
                "credential[0].services: grants nothing".into(),
            ),
            (
                format!(
                    "[[credential]]\nname = \"a\"\ntoken_sha256 = \"{ok}\"\nservices = [\"bad name\"]\n"
                ),
                "credential[0].services[0]".into(),
            ),
            (
                format!(
                    "[[credential]]\nname = \"a\"\ntoken_sha256 = \"{ok}\"\nadmin = true\n\
                     [[credential]]\nname = \"b\"\ntoken_sha256 = \"{ok}\"\nadmin = true\n"
                ),
                "credential[1].token_sha256: the same token".into(),
            ),
            (
                format!("[[credential]]\nname = \"a\"\ntoken_sha256 = \"{ok}\"\nadmin = true\nextra = 1\n"),
                "bad TOML".into(),
            ),
        ] {
            let e = Auth::parse(&text).unwrap_err();
            assert!(e.contains(&want), "{text:?}: {e}");
        }
    }

    #[test]
    fn token_hashes_are_hex_digits_only() {
        let ok = sha("x");
        assert!(hex32(&ok).is_some());
        assert!(hex32(&format!("  {}\n", ok.to_uppercase())).is_some());
        // 64 bytes, but not 64 hex digits: a sign, a multi-byte character.
        assert!(hex32(&format!("+f{}", &ok[2..])).is_none());
        assert!(hex32(&format!("é{}", &ok[2..])).is_none());
        assert!(hex32(&format!("{}é", &ok[..62])).is_none());
    }

    mod props {
        use proptest::prelude::*;

        use super::*;

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<String>(),
                "[0-9a-fA-Fé+ ]{60,68}",
                prop::collection::vec(any::<u8>(), 0..80)
                    .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            ]
        }

        /// A credentials file with one entry whose values are arbitrary (quoted as TOML
        /// basic strings, so most of them reach the checks after the TOML parser).
        fn file_like() -> impl Strategy<Value = String> {
            let quoted = |s: String| {
                let mut q = String::from("\"");
                for c in s.chars() {
                    match c {
                        '"' | '\\' => {
                            q.push('\\');
                            q.push(c);
                        }
                        c if c.is_control() => q.push_str(&format!("\\u{:04X}", u32::from(c))),
                        c => q.push(c),
                    }
                }
                q.push('"');
                q
            };
            (text(), text(), prop::collection::vec(text(), 0..3), any::<bool>(), any::<u8>())
                .prop_map(move |(name, hash, services, admin, extra)| {
                    let services: Vec<String> = services.into_iter().map(quoted).collect();
                    let mut f = format!(
                        "[[credential]]\nname = {}\ntoken_sha256 = {}\nservices = [{}]\nadmin = {admin}\n",
                        quoted(name),
                        quoted(hash),
                        services.join(", ")
                    );
                    if extra % 4 == 0 {
                        f.push_str("[[credential]]\nname = \"b\"\n");
                    }
                    f
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn credentials_files_are_total(text in prop_oneof![any::<String>(), file_like()]) {
                let _ = Auth::parse(&text);
            }

            #[test]
            fn token_hashes_are_total_and_round_trip(s in text(), hash in any::<[u8; 32]>(), upper in any::<bool>()) {
                let _ = hex32(&s);
                let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
                let hex = if upper { hex.to_uppercase() } else { hex };
                prop_assert_eq!(hex32(&hex), Some(hash));
            }

            #[test]
            fn bearer_tokens_are_total(s in text(), token in "[!-~]{1,40}") {
                let _ = bearer_token(&s);
                let value = format!("Bearer {token}");
                prop_assert_eq!(bearer_token(&value), Some(token.as_str()));
            }
        }
    }
}
