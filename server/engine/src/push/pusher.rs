//! The node's pushers (docs/architecture.md, "Push delivery"): one per service with a push
//! target, each a subscriber of the dispatcher like an executor's stream, so that leases,
//! windows, ack deadlines, limits and fairness are those of streamed delivery. A pusher takes
//! a delivery, POSTs it (`client`, `sign`), and acknowledges it with the outcome the response
//! means (`outcome`) through the same path as an executor's Ack.
//!
//! - While a pusher is registered, the service's Subscribe streams on this node get nothing
//!   (`Hub::subscribe_push`); each pushed delivery's ack deadline covers the request timeout.
//! - A host whose requests keep failing (no response, 408, 429, 5xx) three times in a row is
//!   backed off as a whole: its deliveries are postponed without using an attempt (a snooze)
//!   until the backoff ends, 1 s doubling to 60 s; one answer that is not such a failure ends it.
//! - A stored target that cannot be used (a sealed secret whose key the node does not hold,
//!   `services::seal`) sends nothing: its service's deliveries are postponed without using an
//!   attempt (a snooze of `UNUSABLE_POSTPONE`, the reason as the retry's last error) until the
//!   target opens again (new keys, SIGHUP) or is set again; they go to no Subscribe stream.
//! - When the node stops or the target changes, a pusher takes no new deliveries and waits
//!   for its requests (on shutdown, within `REBOUND_SHUTDOWN_GRACE_MS`): an answer that
//!   arrives by then is settled. A push cut off after that is not acknowledged: its delivery
//!   passes its deadline and is pushed again, by this node or the range's next owner.
//!
//! Every worker and request is a task of the pusher's `Tasks`, stopped with the node.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue};
use rebound_proto::v1 as pb;
use tokio::{sync::watch, time::Instant};
use tracing::Instrument;

use super::{client, outcome, sign};
use crate::metric_definitions as metrics;
use crate::services::push_target as target;
use crate::{
    dispatch::{hub::Delivery, Dispatcher},
    error::Error,
    outcome::AttemptOutcome,
    services::Services,
    spans,
};
use rebound_common::tasks::Tasks;
use rebound_store::clock::SharedClock;

/// Failures in a row before a host is backed off.
const HOST_FAILURES: u32 = 3;
const HOST_BACKOFF_MIN: Duration = Duration::from_secs(1);
const HOST_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// How long a delivery of a service whose target cannot be used is postponed.
const UNUSABLE_POSTPONE: Duration = Duration::from_secs(30);
/// Deliveries of such a service held at once while they are postponed.
const UNUSABLE_IN_FLIGHT: u32 = 16;
/// The last error sent in `rebound-last-error` is cut to this many bytes.
const LAST_ERROR_HEADER_BYTES: usize = 1024;

/// A stored target, ready to send with.
#[derive(Debug)]
struct Prepared {
    url: url::Url,
    host: String,
    timeout: Duration,
    headers: HeaderMap,
    keys: Vec<Vec<u8>>,
    max_concurrent: u32,
}

impl Prepared {
    /// Checks a stored target again (it was validated when it was set; a row written by
    /// another version may not be).
    fn of(stored: &pb::PushTarget) -> Result<Prepared, String> {
        let t = target::validate(Some(stored)).map_err(|e| e.to_string())?;
        let url = url::Url::parse(&t.url).map_err(|e| format!("url: {e}"))?;
        let host = url.host_str().unwrap_or_default().to_string();
        let timeout = t
            .timeout
            .as_ref()
            .and_then(|d| Duration::try_from(*d).ok())
            .unwrap_or(target::DEFAULT_TIMEOUT);
        let mut headers = HeaderMap::new();
        for (k, v) in &t.headers {
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("{k}: {e}"))?;
            let value = HeaderValue::from_str(v).map_err(|e| format!("{k}: {e}"))?;
            headers.insert(name, value);
        }
        let keys = t
            .signing_secrets
            .iter()
            .map(|s| target::secret_key(s))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Prepared {
            max_concurrent: t.max_concurrent.unwrap_or(target::DEFAULT_MAX_CONCURRENT),
            url,
            host,
            timeout,
            headers,
            keys,
        })
    }
}

/// What a service's worker does: push with its target, or postpone its deliveries because its
/// stored target cannot be used (why).
#[derive(Debug, Clone, PartialEq)]
enum Want {
    Push(pb::PushTarget),
    Unusable(String),
}

/// Consecutive failures of one host, and until when it is backed off.
#[derive(Debug, Default)]
struct HostState {
    failures: u32,
    until: Option<Instant>,
}

/// What the pusher needs beyond the dispatcher and the settings.
#[derive(Debug)]
pub struct PushOptions {
    pub client: client::Client,
}

#[derive(Debug)]
pub struct Pusher {
    dispatcher: Arc<Dispatcher>,
    services: Arc<Services>,
    client: client::Client,
    clock: SharedClock,
    tasks: Arc<Tasks>,
    hosts: Mutex<HashMap<String, HostState>>,
}

impl Pusher {
    pub fn new(
        dispatcher: Arc<Dispatcher>,
        services: Arc<Services>,
        clock: SharedClock,
        opts: PushOptions,
    ) -> Self {
        Self {
            dispatcher,
            services,
            client: opts.client,
            clock,
            tasks: Arc::new(Tasks::new("push")),
            hosts: Mutex::default(),
        }
    }

    /// The owner of the workers and requests, for shutdown.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// Starts, restarts and stops one worker per service with a push target as targets are
    /// set, changed and cleared, until the node stops.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut workers: HashMap<String, (Want, watch::Sender<bool>)> = HashMap::new();
        let mut refused: HashMap<String, Want> = HashMap::new();
        let mut changes = self.services.push_changes();
        loop {
            changes.mark_unchanged();
            let mut want: HashMap<String, Want> = self
                .services
                .push_targets()
                .into_iter()
                .map(|(s, t)| (s, Want::Push(t)))
                .collect();
            want.extend(
                self.services
                    .unusable_push_targets()
                    .into_iter()
                    .map(|(s, why)| (s, Want::Unusable(why))),
            );
            workers.retain(|service, (t, halt)| {
                let keep = want.get(service) == Some(t);
                if !keep {
                    let _ = halt.send(true);
                    tracing::info!(service, "push target changed or cleared; its pusher stops");
                }
                keep
            });
            refused.retain(|service, t| want.get(service) == Some(t));
            for (service, wanted) in want {
                if workers.contains_key(&service) || refused.contains_key(&service) {
                    continue;
                }
                let stored = match &wanted {
                    Want::Push(t) => t,
                    Want::Unusable(why) => {
                        let (halt, halted) = watch::channel(false);
                        let me = self.clone();
                        let (name, why) = (service.clone(), why.clone());
                        if self
                            .tasks
                            .spawn(async move { me.postpone_all(name, why, halted).await })
                            .is_err()
                        {
                            return;
                        }
                        workers.insert(service, (wanted, halt));
                        continue;
                    }
                };
                match Prepared::of(stored) {
                    Ok(p) => {
                        let (halt, halted) = watch::channel(false);
                        let me = self.clone();
                        let name = service.clone();
                        let p = Arc::new(p);
                        if self
                            .tasks
                            .spawn(async move { me.serve(name, p, halted).await })
                            .is_err()
                        {
                            return;
                        }
                        tracing::info!(service, "push target set; pushing its deliveries");
                        workers.insert(service, (wanted, halt));
                    }
                    Err(e) => {
                        tracing::warn!(service, error = %e, "stored push target is invalid; not pushing");
                        refused.insert(service, wanted);
                    }
                }
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break },
                _ = stop.changed() => break,
            }
        }
        for (_, (_, halt)) in workers {
            let _ = halt.send(true);
        }
    }

    /// One service's pusher: takes its deliveries and starts a request for each, until it is
    /// halted or the node stops. Then it takes no more, waits for the requests it started
    /// (the node's shutdown grace bounds that wait), so that an answer that arrives in time is
    /// settled, and only then ends its subscription: deliveries not acknowledged by then are
    /// delivered again after their deadline.
    async fn serve(
        self: Arc<Self>,
        service: String,
        target: Arc<Prepared>,
        mut halted: watch::Receiver<bool>,
    ) {
        let mut deliveries =
            self.dispatcher
                .subscribe_push(&service, target.max_concurrent, target.timeout);
        // Each request holds a sender; the channel closes when the last one has finished.
        let (running, mut finished) = tokio::sync::mpsc::channel::<()>(1);
        loop {
            let d = tokio::select! {
                d = deliveries.next() => d,
                _ = halted.changed() => None,
            };
            let Some(d) = d else { break };
            let me = self.clone();
            let t = target.clone();
            let held = running.clone();
            if self
                .tasks
                .spawn(async move {
                    me.push_one(&t, d).await;
                    drop(held);
                })
                .is_err()
            {
                break;
            }
        }
        deliveries.retire();
        drop(running);
        let _ = finished.recv().await;
        drop(deliveries);
    }

    /// The worker of a service whose stored target cannot be used (`why` names the key and
    /// the key file): it holds the service's deliveries, as a pusher does, so that no stream
    /// takes them, and postpones each without using an attempt and without a request, until
    /// it is halted (the target opens again, is set again or cleared) or the node stops.
    async fn postpone_all(
        self: Arc<Self>,
        service: String,
        why: String,
        mut halted: watch::Receiver<bool>,
    ) {
        tracing::error!(service, error = %why, "push target cannot be used: its deliveries are postponed, none is pushed");
        let mut deliveries =
            self.dispatcher
                .subscribe_push(&service, UNUSABLE_IN_FLIGHT, target::DEFAULT_TIMEOUT);
        loop {
            let d = tokio::select! {
                d = deliveries.next() => d,
                _ = halted.changed() => None,
            };
            let Some(d) = d else { break };
            let outcome = unusable_outcome(&why);
            if let Err(e) = self.dispatcher.ack(&d.delivery_id, outcome).await {
                tracing::debug!(service, delivery_id = %d.delivery_id, error = %e, "postponing a delivery of an unusable push target failed; it is delivered again after its deadline");
            }
        }
        tracing::info!(
            service,
            "push target changed or cleared; its deliveries are no longer postponed"
        );
        deliveries.retire();
        drop(deliveries);
    }

    /// Pushes one delivery and acknowledges the outcome.
    async fn push_one(&self, target: &Prepared, d: Delivery) {
        let service = d.service.clone();
        let delivery_id = d.delivery_id.clone();
        let outcome = match self.backed_off(&target.host) {
            Some(left) => AttemptOutcome::Retry {
                after: Some(left),
                error: format!(
                    "push: host {} backed off after {HOST_FAILURES} failures in a row",
                    target.host
                ),
                error_class: String::new(),
                snooze: true,
            },
            None => {
                let span = spans::push(&service, &d.transaction_id, &target.url, &d.trace);
                self.request(target, d).instrument(span).await
            }
        };
        match self.dispatcher.ack(&delivery_id, outcome).await {
            Ok(_) => {}
            Err(Error::NotFound(_)) => tracing::debug!(
                service,
                delivery_id,
                "push answered after its delivery left flight (deadline passed or stream closed); it is pushed again"
            ),
            // The retry was rescheduled, cancelled or finished since it was delivered.
            Err(e @ Error::FailedPrecondition(_)) => {
                tracing::debug!(service, delivery_id, error = %e, "push outcome of a stale delivery not stored")
            }
            Err(e) => tracing::warn!(service, delivery_id, error = %e, "push outcome not stored; the delivery is pushed again after its deadline"),
        }
    }

    /// The POST of one delivery, and what its answer means.
    async fn request(&self, target: &Prepared, mut d: Delivery) -> AttemptOutcome {
        let now_ms = self.clock.now_ms();
        let body = Bytes::from(std::mem::take(&mut d.payload));
        let headers = request_headers(target, &d, now_ms, &body);
        let started = Instant::now();
        let r = self
            .client
            .post(&target.url, headers, body, target.timeout)
            .await;
        let result = match &r {
            Ok(resp) => match resp.status {
                200..=299 => "2xx",
                300..=399 => "3xx",
                400..=499 => "4xx",
                500..=599 => "5xx",
                _ => "error",
            },
            Err(client::PushError::Timeout) => "timeout",
            Err(client::PushError::Refused(_)) => "refused",
            Err(_) => "error",
        };
        metrics::metrics().push(&d.service, result, started.elapsed().as_secs_f64());
        let span = tracing::Span::current();
        if let Ok(resp) = &r {
            span.record("http.response.status_code", resp.status);
        }
        let failed = matches!(result, "timeout" | "error" | "5xx")
            || matches!(&r, Ok(resp) if resp.status == 408 || resp.status == 429);
        if result != "2xx" {
            rebound_common::trace::failed(&span, result);
        }
        self.host_answered(&target.host, failed);
        outcome::outcome(&r, self.clock.now_ms())
    }

    /// How long `host` stays backed off, when it is.
    fn backed_off(&self, host: &str) -> Option<Duration> {
        let hosts = self.hosts.lock().expect("hosts lock");
        let until = hosts.get(host)?.until?;
        let now = Instant::now();
        (until > now).then(|| until - now)
    }

    fn host_answered(&self, host: &str, failed: bool) {
        let mut hosts = self.hosts.lock().expect("hosts lock");
        if !failed {
            hosts.remove(host);
            return;
        }
        let h = hosts.entry(host.to_string()).or_default();
        h.failures = h.failures.saturating_add(1);
        if h.failures >= HOST_FAILURES {
            let doublings = (h.failures - HOST_FAILURES).min(6);
            let backoff = (HOST_BACKOFF_MIN * 2u32.pow(doublings)).min(HOST_BACKOFF_MAX);
            h.until = Some(Instant::now() + backoff);
            tracing::warn!(
                host,
                failures = h.failures,
                backoff_ms = backoff.as_millis() as u64,
                "push host keeps failing; its deliveries are postponed"
            );
        }
    }
}

/// The headers of one push: the target's own, the delivery's, the trace context and the
/// Standard Webhooks signature.
fn request_headers(target: &Prepared, d: &Delivery, now_ms: i64, body: &[u8]) -> HeaderMap {
    let mut h = target.headers.clone();
    let content_type = d
        .attributes
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .and_then(|(_, v)| HeaderValue::from_str(v).ok())
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    h.insert(http::header::CONTENT_TYPE, content_type);
    h.insert(
        http::header::USER_AGENT,
        HeaderValue::from_static(concat!("rebound/", env!("CARGO_PKG_VERSION"))),
    );
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(HeaderName::from_static(name), v);
        }
    };
    put("rebound-service", d.service.clone());
    put("rebound-transaction-id", d.transaction_id.clone());
    put("rebound-attempt", d.attempt.to_string());
    put("rebound-delivery-id", d.delivery_id.clone());
    put("rebound-due-time", rfc3339(d.due_at_ms));
    put("rebound-first-enqueued-at", rfc3339(d.first_enqueued_at_ms));
    if !d.last_error.is_empty() {
        put("rebound-last-error", header_text(&d.last_error));
    }
    // The request's own span when tracing is on, else the enqueuer's context as it came.
    let own = spans::context_of(&tracing::Span::current());
    let trace = if own.is_empty() { d.trace.clone() } else { own };
    if !trace.traceparent.is_empty() {
        put("traceparent", trace.traceparent.clone());
        if !trace.tracestate.is_empty() {
            put("tracestate", trace.tracestate.clone());
        }
    }
    let timestamp_s = now_ms.div_euclid(1000);
    put(sign::ID_HEADER, d.delivery_id.clone());
    put(sign::TIMESTAMP_HEADER, timestamp_s.to_string());
    put(
        sign::SIGNATURE_HEADER,
        sign::signature(&target.keys, &d.delivery_id, timestamp_s, body),
    );
    h
}

/// What a delivery of a service whose target cannot be used is answered: a snooze, the
/// reason as its last error.
fn unusable_outcome(why: &str) -> AttemptOutcome {
    AttemptOutcome::Retry {
        after: Some(UNUSABLE_POSTPONE),
        error: format!("push: not sent: {why}"),
        error_class: String::new(),
        snooze: true,
    }
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// `text` as a header value: visible ASCII and spaces, others as `?`, at most
/// `LAST_ERROR_HEADER_BYTES`.
fn header_text(text: &str) -> String {
    text.chars()
        .take(LAST_ERROR_HEADER_BYTES)
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_text_is_always_a_valid_header_value() {
        for s in ["plain", "tab\there", "line\r\nbreak", "ünïcode ✓", ""] {
            let t = header_text(s);
            assert!(HeaderValue::from_str(&t).is_ok(), "{s:?} -> {t:?}");
        }
        assert_eq!(
            header_text(&"x".repeat(5000)).len(),
            LAST_ERROR_HEADER_BYTES
        );
    }

    #[test]
    fn an_unusable_target_postpones_without_using_an_attempt() {
        match unusable_outcome("signing_secrets[0] is sealed with key \"k1\"") {
            AttemptOutcome::Retry {
                after,
                error,
                snooze,
                ..
            } => {
                assert!(snooze, "no attempt is used");
                assert_eq!(after, Some(UNUSABLE_POSTPONE));
                assert!(
                    error.contains("\"k1\"") && error.starts_with("push: not sent"),
                    "{error}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn due_times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_614_265_330_123), "2021-02-25T15:02:10.123Z");
    }
}
