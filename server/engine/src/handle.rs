//! The engine's front door for callers: a cheap cloneable `Handle` (from `Engine::handle`)
//! that carries every operation the API offers. The node's handlers decode a request, check
//! the caller, call one method here and encode the answer; nothing else of the engine is
//! theirs to reach.
//!
//! The data path is here (enqueue, batch, cancel, get, subscribe, ack, extend); the operator
//! half (settings, push targets, holds, purge, dead letters and redrive, statistics, window
//! inspection, the ring) is in `admin`, on the same type.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tracing::Span;

use crate::metric_definitions as metrics;
use crate::{
    dispatch::{hub::Hub, Dispatcher, Resolution, Subscription},
    error::Error,
    guard::Allow,
    holds::Holds,
    names,
    outcome::AttemptOutcome,
    ownership::Ownership,
    ring::LeaseRing,
    services::Services,
    validate::{self, EnqueueInput},
    writer::{EnqueueOutcome, Writer},
};
use rebound_common::{metrics::ServiceLabel, trace::code_name};
use rebound_proto::v1 as pb;
use rebound_store::{clock::SharedClock, RetryStore};

/// How this node asks another for its part of the statistics (GetStats `local_only`) and of
/// an IN_FLIGHT listing (ListRetries `local_only`), with the caller's `authorization` header:
/// a transport, so the node's.
#[async_trait::async_trait]
pub trait AskPeer: Send + Sync + std::fmt::Debug {
    async fn local_stats(
        &self,
        address: &str,
        service: String,
        authorization: Option<String>,
    ) -> Result<pb::GetStatsResponse, String>;
    async fn local_in_flight(
        &self,
        address: &str,
        request: pb::ListRetriesRequest,
        authorization: Option<String>,
    ) -> Result<pb::ListRetriesResponse, String>;
}

/// Every operation of the engine, on the components `Engine::build` made. Cloning it is
/// cheap (a handful of `Arc`s).
#[derive(Debug, Clone)]
pub struct Handle {
    pub(crate) store: Arc<dyn RetryStore>,
    pub(crate) services: Arc<Services>,
    pub(crate) holds: Arc<Holds>,
    pub(crate) writer: Arc<Writer>,
    pub(crate) dispatcher: Arc<Dispatcher>,
    pub(crate) hub: Arc<Hub>,
    pub(crate) ownership: Arc<dyn Ownership>,
    pub(crate) ring: Option<Arc<LeaseRing>>,
    pub(crate) clock: SharedClock,
    pub(crate) node_id: Arc<str>,
    pub(crate) address: Arc<str>,
    pub(crate) slots: u32,
    pub(crate) skew_margin_ms: i64,
    pub(crate) orphan_grace_ms: i64,
    pub(crate) dead_letter_retention_seconds: u32,
    /// The longest `retry_after` an ack may ask for (`REBOUND_MAX_DELAY_SECONDS`).
    pub(crate) max_delay: Duration,
    /// How to ask the other nodes (None: this node answers for itself only).
    pub(crate) peers: Option<Arc<dyn AskPeer>>,
    /// `REBOUND_PUSH_ALLOW`: what SetPushTarget's address check permits, as each push does.
    pub(crate) push_allow: Allow,
    /// Services given gauges at the last `refresh_gauges` (to zero those gone since).
    pub(crate) gauged: Arc<Mutex<Vec<Arc<str>>>>,
}

/// Counts one enqueue item, and marks its span failed when it was refused.
fn count_enqueue(service: &str, span: &Span, r: &Result<EnqueueOutcome, Error>) {
    // A name that is not a valid service name never becomes a label.
    let label = match names::service_problem(service) {
        None => service,
        Some(_) => "_invalid",
    };
    let m = metrics::metrics();
    match r {
        Ok(o) if o.deduplicated => m.enqueue(label, "deduplicated", "OK"),
        Ok(_) => m.enqueue(label, "new", "OK"),
        Err(e) => {
            let code = code_name(e.code() as i32);
            m.enqueue(label, "refused", code);
            rebound_common::trace::failed(span, code);
        }
    }
}

impl Handle {
    /// EnqueueRetry: `checked` is the request as validated and authorized by the caller (an
    /// error there is counted as a refusal and returned unchanged); `service` the name the
    /// request gave, for the metric; `span` the item's `send` span.
    pub async fn enqueue(
        &self,
        service: &str,
        span: &Span,
        checked: Result<EnqueueInput, Error>,
    ) -> Result<EnqueueOutcome, Error> {
        let out = match checked {
            Ok(input) => self.writer.enqueue(input).await,
            Err(e) => Err(e),
        };
        count_enqueue(service, span, &out);
        out
    }

    /// EnqueueRetryBatch: each item as `enqueue` takes it, with its request's service name
    /// and span; the results in request order.
    pub async fn enqueue_batch(
        &self,
        items: Vec<(String, Span, Result<EnqueueInput, Error>)>,
    ) -> Vec<Result<EnqueueOutcome, Error>> {
        let mut labels = Vec::with_capacity(items.len());
        let mut checked = Vec::with_capacity(items.len());
        for (service, span, c) in items {
            labels.push((service, span));
            checked.push(c);
        }
        let results = self.writer.enqueue_many(checked).await;
        for ((service, span), r) in labels.iter().zip(&results) {
            count_enqueue(service, span, r);
        }
        results
    }

    /// CancelRetry: the retry's status after the call, and whether this call cancelled it.
    pub async fn cancel(
        &self,
        service: &str,
        transaction_id: &str,
    ) -> Result<(rebound_store::Status, bool), Error> {
        self.writer.cancel(service, transaction_id).await
    }

    /// Subscribe: a stream of `service`'s deliveries to this node, at most `max_in_flight`
    /// unacknowledged at once, for executor `executor_id` (named in each attempt's record).
    pub fn subscribe(
        &self,
        service: &str,
        executor_id: &str,
        max_in_flight: u32,
    ) -> Result<Subscription, Error> {
        self.dispatcher
            .subscribe(service, executor_id, max_in_flight)
    }

    /// The service of a delivery in flight on this node (None: not in flight here), for the
    /// caller's right to ack or extend it.
    pub fn service_of(&self, delivery_id: &str) -> Option<String> {
        self.dispatcher.service_of(delivery_id)
    }

    /// An Ack request as the executor sent it: its outcome and hold checked (`prefix` is the
    /// request's field path, `acks[3].` in a batch), then applied (`ack`, or `ack_holding`
    /// when it asks for a dependency hold). The caller's right to the delivery's service is
    /// the transport's to check (`service_of`).
    pub async fn ack_request(&self, r: &pb::AckRequest, prefix: &str) -> Result<Resolution, Error> {
        let outcome = validate::ack_outcome(r, self.max_delay, prefix)?;
        match validate::ack_hold(r, prefix)? {
            None => self.ack(&r.delivery_id, outcome).await,
            Some((duration, reason)) => {
                self.ack_holding(&r.delivery_id, outcome, duration, &reason, prefix)
                    .await
            }
        }
    }

    /// Ack: settles a delivery with its executor's outcome.
    pub async fn ack(
        &self,
        delivery_id: &str,
        outcome: AttemptOutcome,
    ) -> Result<Resolution, Error> {
        self.dispatcher.ack(delivery_id, outcome).await
    }

    /// An ack that also holds the retry's dependency for `duration` (`reason` names it;
    /// `prefix` the request's field path): the retry waits for the hold's end without using
    /// an attempt.
    pub async fn ack_holding(
        &self,
        delivery_id: &str,
        mut outcome: AttemptOutcome,
        duration: Duration,
        reason: &str,
        prefix: &str,
    ) -> Result<Resolution, Error> {
        if let AttemptOutcome::Retry { after, snooze, .. } = &mut outcome {
            *after = Some(duration);
            *snooze = true;
        }
        // Boxed: rare, and its future would otherwise size every ack's.
        Box::pin(
            self.dispatcher
                .ack_holding(delivery_id, outcome, duration, reason, prefix),
        )
        .await
    }

    /// Ends every Subscribe stream of this node (at shutdown, so that open streams do not
    /// hold the server's graceful stop).
    pub fn close_streams(&self) {
        self.hub.close_all();
    }

    /// ExtendDeadline: the delivery's new ack deadline, in ms since the epoch.
    pub fn extend(&self, delivery_id: &str, extension: Duration) -> Result<i64, Error> {
        self.dispatcher.extend(delivery_id, extension)
    }

    /// The readiness probe's ring check: this node's heartbeat is younger than a lease
    /// lifetime (always Ok with a fixed ownership, no ring).
    pub fn ring_health(&self) -> Result<(), String> {
        let Some(r) = &self.ring else {
            return Ok(());
        };
        match r.heartbeat_age_ms(self.clock.now_ms()) {
            None => Err("no heartbeat written yet".into()),
            Some(age) if age <= r.lease_ttl_ms() => Ok(()),
            Some(age) => Err(format!(
                "the last heartbeat was written {age} ms ago, over the lease lifetime of {} ms",
                r.lease_ttl_ms()
            )),
        }
    }

    /// Sets the gauges read from this node's own state (in flight and subscribers by
    /// service, slots held, the compactor role, the clock offset), before a scrape.
    pub fn refresh_gauges(&self) {
        let m = metrics::metrics();
        let now = self.clock.now_ms();
        let stats = self.hub.stats();
        let mut gauged = self.gauged.lock().expect("gauged lock");
        for s in gauged.drain(..) {
            let label = ServiceLabel { service: s };
            m.in_flight.get_or_create(&label).set(0);
            m.subscribers.get_or_create(&label).set(0);
        }
        let mut sums: HashMap<Arc<str>, (i64, i64)> = HashMap::new();
        for (service, (in_flight, subscribers)) in stats {
            let e = sums
                .entry(rebound_common::metrics::service(&service))
                .or_default();
            e.0 += in_flight as i64;
            e.1 += i64::from(subscribers);
        }
        for (service, (in_flight, subscribers)) in sums {
            let label = ServiceLabel {
                service: service.clone(),
            };
            m.in_flight.get_or_create(&label).set(in_flight);
            m.subscribers.get_or_create(&label).set(subscribers);
            gauged.push(service);
        }
        drop(gauged);
        m.ring_slots.set(self.ownership.held().len() as i64);
        m.compactor.set(i64::from(self.ownership.is_compactor(now)));
        m.clock_offset
            .set(self.clock.offset_ms().unwrap_or(0) as f64 / 1000.0);
    }
}
