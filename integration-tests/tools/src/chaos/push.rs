//! The pushed service of the chaos workload (docs/push.md): an HTTP receiver in the harness
//! process that every node POSTs the service's due retries to, and the target that points
//! them at it.
//!
//! Each request is recorded when it arrives ([`Kind::Push`]: its attempt, delivery id and due
//! time, with anything wrong with its signature, headers or body), then answered after a
//! short think with a reply chosen from the seed and (transaction, attempt) alone, so that
//! every push of one attempt gets the same kind of answer: mostly a 2xx, sometimes 503, 429
//! with `Retry-After: 1` or 422 (FAILED), and now and then no answer at all until well past
//! the target's timeout (a stall). The answer is recorded when it is sent
//! ([`Kind::PushAnswer`]). While the run drains, every answer is 200.
//!
//! A 2xx is the executor's "work done, SUCCEEDED"; what the checker may conclude from it, and
//! from every other answer, is in `checker` ("Pushed services").

use std::{
    collections::hash_map::DefaultHasher,
    hash::{Hash, Hasher},
    net::SocketAddr,
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Router,
};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rebound_engine::{push::sign, services::push_target::secret_key};
use rebound_proto::v1::{self as pb, admin_service_client::AdminServiceClient};

use super::{
    call, dur,
    history::{now_ms, Event, Kind, Reply},
    Shared,
};

/// The service the workload enqueues into beside the streamed ones.
pub const SERVICE: &str = "pushed";
/// The target's request timeout. A pushed delivery's ack deadline is this plus 5 s
/// (`PUSH_DEADLINE_MARGIN` of the hub), past the policy's 3 s ack timeout.
pub const TIMEOUT_MS: i64 = 2_000;
/// How long a stall holds the request: well past the timeout, so that the node has given up
/// on it (and recorded a RETRY) before anything could come back; even a node SIGSTOPped
/// meanwhile (at most 3.5 s) resumes before it.
const STALL_MS: i64 = TIMEOUT_MS + 3_000;
/// Requests in flight at once from one node.
pub const MAX_CONCURRENT: u32 = 16;
const SECRET: &str = "whsec_cmVib3VuZCBjaGFvcyBwdXNoIHJlY2VpdmVyIGtleSE=";
/// How far a request's `webhook-timestamp` may be from our clock (Standard Webhooks' replay
/// window).
const TIMESTAMP_TOLERANCE_S: i64 = 300;

struct Rx {
    shared: Arc<Shared>,
    keys: Vec<Vec<u8>>,
}

/// The running receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Listens on 127.0.0.1 (a free port); records into `shared.history`.
    pub async fn start(shared: Arc<Shared>) -> anyhow::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let rx = Arc::new(Rx {
            shared,
            keys: vec![secret_key(SECRET).map_err(anyhow::Error::msg)?],
        });
        let app = Router::new().fallback(handle).with_state(rx);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Receiver { addr, task })
    }

    pub fn target(&self) -> pb::PushTarget {
        pb::PushTarget {
            url: format!("http://{}/rebound/chaos", self.addr),
            timeout: Some(dur(TIMEOUT_MS)),
            headers: [("x-chaos".to_string(), "push".to_string())].into(),
            signing_secrets: vec![SECRET.into()],
            max_concurrent: Some(MAX_CONCURRENT),
            ..Default::default()
        }
    }

    /// Sets the target of [`SERVICE`] on `node` (tried again for up to 30 s), then waits until
    /// every node should have its pusher: the settings refresh (1 s in the chaos cluster) and
    /// the pusher's look at the settings (0.5 s), twice over.
    pub async fn set_target(&self, shared: &Shared, node: usize) -> anyhow::Result<()> {
        let mut admin = AdminServiceClient::new(shared.channels[node].clone());
        let started = std::time::Instant::now();
        loop {
            let r = call(admin.set_push_target(pb::SetPushTargetRequest {
                service: SERVICE.into(),
                target: Some(self.target()),
            }))
            .await;
            match r {
                Ok(_) => break,
                Err(e) if started.elapsed() < Duration::from_secs(30) => {
                    eprintln!("chaos: SetPushTarget failed ({e}); trying again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => anyhow::bail!("SetPushTarget({SERVICE}): {e}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(3_000)).await;
        Ok(())
    }
}

/// The reply to every push of (tx, attempt), and how long to think first (up to 0.8 s, so
/// that faults find pushes in flight). 2xx 70 %, 503 14 %, 429 with `Retry-After: 1` 6 %,
/// 422 4 %, a stall 6 %; 200 while draining.
pub fn choose(seed: u64, tx: &str, attempt: u32, draining: bool) -> (Reply, u64) {
    let mut h = DefaultHasher::new();
    (seed, "push", tx, attempt).hash(&mut h);
    let mut rng = StdRng::seed_from_u64(h.finish());
    let think = rng.random_range(0..=800);
    if draining {
        return (
            Reply::Status {
                code: 200,
                retry_after_s: None,
            },
            think,
        );
    }
    let r: f64 = rng.random();
    let status = |code| Reply::Status {
        code,
        retry_after_s: None,
    };
    let reply = if r < 0.70 {
        status([200, 201, 202, 204][rng.random_range(0..4)])
    } else if r < 0.84 {
        status(503)
    } else if r < 0.90 {
        Reply::Status {
            code: 429,
            retry_after_s: Some(1),
        }
    } else if r < 0.94 {
        status(422)
    } else {
        Reply::Stall
    };
    (reply, think)
}

/// The body of a non-2xx answer; the node keeps it as the attempt's error (`HTTP 503: ...`),
/// and the checker finds the answer again from it.
pub fn error_body(code: u16, tx: &str, attempt: u32) -> String {
    format!("chaos-push {code} {tx} attempt {attempt}")
}

/// The (status, tx, attempt) of an error text that holds an [`error_body`].
pub fn parse_error_body(text: &str) -> Option<(u16, String, u32)> {
    let rest = &text[text.find("chaos-push ")? + "chaos-push ".len()..];
    let mut w = rest.split_whitespace();
    let code = w.next()?.parse().ok()?;
    let tx = w.next()?.to_string();
    if w.next()? != "attempt" {
        return None;
    }
    let attempt = w.next()?.parse().ok()?;
    Some((code, tx, attempt))
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// What is wrong with a request, if anything (docs/push.md, "What the endpoint receives").
fn problems(rx: &Rx, h: &HeaderMap, body: &[u8], now_s: i64) -> Vec<String> {
    let mut p = Vec::new();
    let tx = header(h, "rebound-transaction-id");
    let id = header(h, "rebound-delivery-id");
    if header(h, "rebound-service") != SERVICE {
        p.push(format!(
            "rebound-service {:?}",
            header(h, "rebound-service")
        ));
    }
    if tx.is_empty() {
        p.push("no rebound-transaction-id".into());
    }
    if header(h, "rebound-attempt")
        .parse::<u32>()
        .map_or(true, |a| a == 0)
    {
        p.push(format!(
            "rebound-attempt {:?}",
            header(h, "rebound-attempt")
        ));
    }
    if id.is_empty() || header(h, sign::ID_HEADER) != id {
        p.push(format!(
            "webhook-id {:?} is not rebound-delivery-id {id:?}",
            header(h, sign::ID_HEADER)
        ));
    }
    if chrono::DateTime::parse_from_rfc3339(header(h, "rebound-due-time")).is_err() {
        p.push(format!(
            "rebound-due-time {:?}",
            header(h, "rebound-due-time")
        ));
    }
    if body != tx.as_bytes() {
        p.push(format!(
            "body {:?} is not the payload",
            String::from_utf8_lossy(body)
        ));
    }
    if header(h, "content-type") != "application/octet-stream" {
        p.push(format!("content-type {:?}", header(h, "content-type")));
    }
    if header(h, "x-chaos") != "push" {
        p.push("the target's header x-chaos is missing".into());
    }
    match header(h, sign::TIMESTAMP_HEADER).parse::<i64>() {
        Ok(ts) => {
            if (ts - now_s).abs() > TIMESTAMP_TOLERANCE_S {
                p.push(format!("webhook-timestamp {ts} is {} s off", ts - now_s));
            }
            let want = sign::signature(&rx.keys, header(h, sign::ID_HEADER), ts, body);
            if header(h, sign::SIGNATURE_HEADER) != want {
                p.push(format!(
                    "webhook-signature {:?} does not verify",
                    header(h, sign::SIGNATURE_HEADER)
                ));
            }
        }
        Err(_) => p.push(format!(
            "webhook-timestamp {:?}",
            header(h, sign::TIMESTAMP_HEADER)
        )),
    }
    p
}

async fn handle(State(rx): State<Arc<Rx>>, headers: HeaderMap, body: Bytes) -> Response {
    let arrival = now_ms();
    let tx = header(&headers, "rebound-transaction-id").to_string();
    let attempt: u32 = header(&headers, "rebound-attempt").parse().unwrap_or(0);
    let delivery_id = header(&headers, "rebound-delivery-id").to_string();
    let due_ms = chrono::DateTime::parse_from_rfc3339(header(&headers, "rebound-due-time"))
        .map_or(0, |t| t.timestamp_millis());
    let service = header(&headers, "rebound-service").to_string();
    let problems = problems(&rx, &headers, &body, chrono::Utc::now().timestamp());
    let history = &rx.shared.history;
    let push = history.push(Event {
        start_ms: arrival,
        end_ms: arrival,
        kind: Kind::Push {
            service: service.clone(),
            tx: tx.clone(),
            delivery_id: delivery_id.clone(),
            attempt,
            due_ms,
            problem: (!problems.is_empty()).then(|| problems.join("; ")),
        },
    });
    let (reply, think) = choose(
        rx.shared.seed,
        &tx,
        attempt,
        rx.shared.draining.load(Ordering::SeqCst),
    );
    tokio::time::sleep(Duration::from_millis(think)).await;
    history.push(Event {
        start_ms: arrival,
        end_ms: now_ms(),
        kind: Kind::PushAnswer {
            service,
            tx: tx.clone(),
            push,
            attempt,
            delivery_id,
            reply,
        },
    });
    match reply {
        Reply::Status {
            code,
            retry_after_s,
        } => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            if status.is_success() {
                return status.into_response();
            }
            let mut resp = (status, error_body(code, &tx, attempt)).into_response();
            if let Some(s) = retry_after_s {
                if let Ok(v) = s.to_string().parse() {
                    resp.headers_mut().insert("retry-after", v);
                }
            }
            resp
        }
        Reply::Stall => {
            tokio::time::sleep(Duration::from_millis(STALL_MS as u64)).await;
            (
                StatusCode::SERVICE_UNAVAILABLE,
                error_body(503, &tx, attempt),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_is_found_again_in_the_node_s_error_text() {
        let text = format!("HTTP 503: {}", error_body(503, "tx-00042", 3));
        assert_eq!(
            parse_error_body(&text),
            Some((503, "tx-00042".to_string(), 3))
        );
        assert_eq!(
            parse_error_body("no response within the push timeout"),
            None
        );
    }

    #[test]
    fn the_reply_depends_on_the_seed_and_the_attempt_alone() {
        assert_eq!(choose(7, "tx-1", 2, false), choose(7, "tx-1", 2, false));
        let mut kinds = std::collections::BTreeSet::new();
        for i in 0..400 {
            kinds.insert(match choose(7, &format!("tx-{i}"), 2, false).0 {
                Reply::Status { code, .. } if (200..300).contains(&code) => 200,
                Reply::Status { code, .. } => code,
                Reply::Stall => 0,
            });
        }
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            vec![0, 200, 422, 429, 503]
        );
        assert!(choose(7, "tx-1", 2, true).0.is_2xx());
    }
}
