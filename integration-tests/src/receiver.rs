//! An HTTP receiver for push tests: it records every request it gets and answers each from a
//! script the test gives (by the `rebound-transaction-id` and `rebound-attempt` headers), as a
//! user's endpoint would.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Router,
};

/// One request as the receiver got it.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Milliseconds since the epoch when it arrived.
    pub at_ms: i64,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn transaction_id(&self) -> &str {
        self.header("rebound-transaction-id")
    }

    pub fn attempt(&self) -> u32 {
        self.header("rebound-attempt").parse().unwrap_or(0)
    }
}

/// What the receiver answers one request with.
#[derive(Debug, Clone)]
pub enum Answer {
    Status(u16),
    /// A status with headers and a body.
    Full(u16, Vec<(&'static str, String)>, String),
    /// Waits this long, then answers 200 (longer than the target's timeout: a timeout).
    Stall(Duration),
}

type Script = dyn Fn(&Received) -> Answer + Send + Sync;

#[derive(Clone)]
struct Shared {
    got: Arc<Mutex<Vec<Received>>>,
    script: Arc<Script>,
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    got: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Listens on 127.0.0.1 (a free port) and answers with `script`.
    pub async fn start(script: impl Fn(&Received) -> Answer + Send + Sync + 'static) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        let shared = Shared {
            got: Arc::default(),
            script: Arc::new(script),
        };
        let got = shared.got.clone();
        let app = Router::new().fallback(handle).with_state(shared);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, got, task }
    }

    /// The URL of `path` on this receiver.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.got.lock().expect("receiver lock").clone()
    }

    /// The requests for one transaction, in arrival order.
    pub fn of(&self, transaction_id: &str) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.transaction_id() == transaction_id)
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(
    State(s): State<Shared>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let r = Received {
        path: uri.path().to_string(),
        headers,
        body,
        at_ms: chrono::Utc::now().timestamp_millis(),
    };
    let answer = (s.script)(&r);
    s.got.lock().expect("receiver lock").push(r);
    match answer {
        Answer::Status(code) => status(code).into_response(),
        Answer::Full(code, headers, body) => {
            let mut resp = (status(code), body).into_response();
            for (k, v) in headers {
                if let Ok(v) = v.parse() {
                    resp.headers_mut().insert(k, v);
                }
            }
            resp
        }
        Answer::Stall(d) => {
            tokio::time::sleep(d).await;
            StatusCode::OK.into_response()
        }
    }
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}
