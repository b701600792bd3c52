//! Subscribers and in-flight deliveries of one node (docs/architecture.md, "Dispatch": flow control
//! and ack deadlines).
//!
//! Each `Subscribe` stream is a `Subscriber` with `max_in_flight` permits; a delivery holds a
//! permit until it is acknowledged, expires or its stream closes, so a stream never has more
//! unacknowledged deliveries than it asked for. Deliveries go round-robin over the service's
//! streams. A delivery whose deadline passes, or whose stream closes, is handed to another
//! subscriber; the bucket worker that produced it waits on `Work::done` until the retry is
//! resolved (acknowledged, rescheduled or dead-lettered), which is what lets it delete the
//! bucket afterwards.
//!
//! Memory is bounded whatever executors ask for (docs/operations.md, "Memory per node"): at most
//! `max_subscribers` streams, and at most `max_in_flight_bytes` of payload, attributes and errors
//! held by unacknowledged deliveries. At that budget a delivery waits for acks (its retry stays in
//! Cassandra); one delivery always fits when nothing is in flight, so a payload larger than the
//! budget still goes out.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};

use crate::{clock::SharedClock, error::Error, store::TxState, telemetry::context::TextContext};

/// One delivery as a subscriber receives it; the API encodes it (`wire::delivery_pb`).
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub delivery_id: String,
    pub service: String,
    pub transaction_id: String,
    /// The attempt this delivery is (1 for the first).
    pub attempt: u32,
    pub payload: Vec<u8>,
    pub attributes: BTreeMap<String, String>,
    pub due_at_ms: i64,
    pub first_enqueued_at_ms: i64,
    pub ack_deadline_ms: i64,
    pub last_error: String,
    pub trace: TextContext,
}

impl Delivery {
    fn of(id: &str, s: &TxState, deadline_ms: i64) -> Self {
        Delivery {
            delivery_id: id.to_string(),
            service: s.service.clone(),
            transaction_id: s.transaction_id.clone(),
            attempt: s.attempt + 1,
            payload: s.payload.clone(),
            attributes: s.attributes.clone(),
            due_at_ms: s.due_at_ms,
            first_enqueued_at_ms: s.first_enqueued_at_ms,
            ack_deadline_ms: deadline_ms,
            last_error: s.last_error.clone(),
            trace: s.trace.clone(),
        }
    }
}

/// A due retry on its way to an executor.
#[derive(Debug)]
pub struct Work {
    pub state: Box<TxState>,
    /// Deliveries of the current attempt so far (ack-deadline expiries and closed streams).
    pub deliveries: u32,
    /// Fired once the retry is resolved; dropped unresolved when the node stops.
    pub done: Option<oneshot::Sender<()>>,
    /// The service's concurrency slot, when it has a limit: held until the work is resolved
    /// or dropped, across redeliveries.
    pub slot: Option<OwnedSemaphorePermit>,
}

impl Work {
    pub fn resolve(mut self) {
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

#[derive(Debug)]
struct Subscriber {
    id: u64,
    tx: mpsc::Sender<Delivery>,
    slots: Arc<Semaphore>,
}

/// A delivery waiting for its ack.
#[derive(Debug)]
pub struct InFlight {
    pub work: Work,
    pub subscriber: u64,
    pub deadline_ms: i64,
    _permit: OwnedSemaphorePermit,
}

/// The id of one delivery: the node's boot epoch, a sequence number and a random nonce. At
/// most 52 bytes, so `validate::delivery_id` accepts every id the node issues.
pub fn delivery_id_text(boot_epoch: i64, seq: u64, nonce: u32) -> String {
    format!("{boot_epoch}-{seq}-{nonce}")
}

/// A duration in whole milliseconds, saturating at `i64::MAX`.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// What one delivery holds in memory beyond its fixed fields.
fn held_bytes(s: &TxState) -> usize {
    s.payload.len()
        + s.last_error.len()
        + s.attributes
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
}

#[derive(Debug, Default)]
struct Inner {
    services: HashMap<String, Vec<Arc<Subscriber>>>,
    next: HashMap<String, usize>,
    inflight: HashMap<String, InFlight>,
    /// `held_bytes` summed over `inflight`.
    inflight_bytes: usize,
    streams: usize,
}

impl Inner {
    fn add_inflight(&mut self, delivery_id: String, f: InFlight) {
        self.inflight_bytes += held_bytes(&f.work.state);
        self.inflight.insert(delivery_id, f);
    }

    fn remove_inflight(&mut self, delivery_id: &str) -> Option<InFlight> {
        let f = self.inflight.remove(delivery_id)?;
        self.inflight_bytes -= held_bytes(&f.work.state);
        Some(f)
    }
}

/// Node-wide bounds of the hub (`REBOUND_MAX_SUBSCRIBERS`, `REBOUND_MAX_IN_FLIGHT_BYTES`).
#[derive(Debug, Clone, Copy)]
pub struct HubLimits {
    pub max_subscribers: usize,
    pub max_in_flight_bytes: usize,
}

#[derive(Debug)]
pub struct Hub {
    inner: Mutex<Inner>,
    changed: Notify,
    clock: SharedClock,
    ids: AtomicU64,
    boot_epoch: i64,
    limits: HubLimits,
}

/// The receiving end of one stream's deliveries.
pub type Deliveries = mpsc::Receiver<Delivery>;

impl Hub {
    pub fn new(clock: SharedClock, boot_epoch: i64, limits: HubLimits) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            changed: Notify::new(),
            clock,
            ids: AtomicU64::new(1),
            boot_epoch,
            limits,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("hub lock")
    }

    /// Registers a stream; returns its id and the receiving end. Refused with
    /// RESOURCE_EXHAUSTED when the node has `max_subscribers` streams open.
    pub fn subscribe(&self, service: &str, max_in_flight: u32) -> Result<(u64, Deliveries), Error> {
        let mut inner = self.lock();
        if inner.streams >= self.limits.max_subscribers {
            return Err(Error::ResourceExhausted(format!(
                "this node has {} Subscribe streams open, its limit (REBOUND_MAX_SUBSCRIBERS); \
                 subscribe on another node or close idle streams",
                inner.streams
            )));
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(max_in_flight as usize + 1);
        let sub = Arc::new(Subscriber {
            id,
            tx,
            slots: Arc::new(Semaphore::new(max_in_flight as usize)),
        });
        inner
            .services
            .entry(service.to_string())
            .or_default()
            .push(sub);
        inner.streams += 1;
        drop(inner);
        self.changed.notify_waiters();
        Ok((id, rx))
    }

    /// Removes a closed stream and returns its unacknowledged work for redelivery.
    pub fn unsubscribe(&self, id: u64) -> Vec<Work> {
        let mut inner = self.lock();
        let mut service = None;
        for (name, subs) in inner.services.iter_mut() {
            if let Some(pos) = subs.iter().position(|s| s.id == id) {
                subs.remove(pos);
                service = Some(name.clone());
                break;
            }
        }
        if let Some(name) = service {
            inner.streams -= 1;
            if inner.services.get(&name).is_some_and(|s| s.is_empty()) {
                inner.services.remove(&name);
                inner.next.remove(&name);
            }
        }
        let ids: Vec<String> = inner
            .inflight
            .iter()
            .filter(|(_, f)| f.subscriber == id)
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for k in ids {
            if let Some(f) = inner.remove_inflight(&k) {
                let mut w = f.work;
                w.deliveries += 1;
                out.push(w);
            }
        }
        drop(inner);
        self.changed.notify_waiters();
        out
    }

    /// Per service: (deliveries in flight on this node, open streams).
    pub fn stats(&self) -> HashMap<String, (u64, u32)> {
        let inner = self.lock();
        let mut out: HashMap<String, (u64, u32)> = HashMap::new();
        for (service, subs) in &inner.services {
            out.entry(service.clone()).or_default().1 = subs.len() as u32;
        }
        for f in inner.inflight.values() {
            out.entry(f.work.state.service.clone()).or_default().0 += 1;
        }
        out
    }

    pub fn has_subscriber(&self, service: &str) -> bool {
        self.lock()
            .services
            .get(service)
            .is_some_and(|s| !s.is_empty())
    }

    /// Tries to hand `work` to a subscriber of its service with a free slot, preferring one
    /// other than `avoid`. Gives the work back when none has room.
    pub fn try_deliver(&self, work: Work, avoid: Option<u64>) -> Result<(), Work> {
        let mut inner = self.lock();
        let service = work.state.service.clone();
        let Some(subs) = inner.services.get(&service).cloned() else {
            return Err(work);
        };
        if inner.inflight_bytes > 0
            && inner.inflight_bytes + held_bytes(&work.state) > self.limits.max_in_flight_bytes
        {
            return Err(work);
        }
        let start = inner.next.get(&service).copied().unwrap_or(0);
        let n = subs.len();
        let mut order: Vec<usize> = (0..n).map(|k| (start + k) % n).collect();
        if let Some(avoid) = avoid {
            order.sort_by_key(|i| subs[*i].id == avoid);
        }
        for i in order {
            let sub = &subs[i];
            let Ok(permit) = sub.slots.clone().try_acquire_owned() else {
                continue;
            };
            let now = self.clock.now_ms();
            let deadline_ms = now.saturating_add(millis(work.state.policy.ack_timeout));
            let delivery_id = delivery_id_text(
                self.boot_epoch,
                self.ids.fetch_add(1, Ordering::Relaxed),
                rand::random::<u32>(),
            );
            let delivery = Delivery::of(&delivery_id, &work.state, deadline_ms);
            if let Err(e) = sub.tx.try_send(delivery) {
                tracing::debug!(subscriber = sub.id, error = %e, "subscriber channel refused a delivery");
                continue;
            }
            tracing::trace!(subscriber = sub.id, transaction_id = %work.state.transaction_id, "delivered");
            let m = crate::metrics::global();
            m.delivery(&service, work.deliveries > 0);
            m.delivery_lateness
                .observe((now - work.state.due_at_ms).max(0) as f64 / 1000.0);
            inner.next.insert(service.clone(), i + 1);
            inner.add_inflight(
                delivery_id,
                InFlight {
                    work,
                    subscriber: sub.id,
                    deadline_ms,
                    _permit: permit,
                },
            );
            return Ok(());
        }
        Err(work)
    }

    /// Delivers `work`, waiting for a free slot; gives it back if `keep_going` turns false.
    pub async fn deliver(
        &self,
        mut work: Work,
        avoid: Option<u64>,
        keep_going: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<(), Work> {
        loop {
            let notified = self.changed.notified();
            match self.try_deliver(work, avoid) {
                Ok(()) => return Ok(()),
                Err(w) => work = w,
            }
            if !keep_going() {
                return Err(work);
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
        }
    }

    /// The service of a delivery in flight.
    pub fn service_of(&self, delivery_id: &str) -> Option<String> {
        self.lock()
            .inflight
            .get(delivery_id)
            .map(|f| f.work.state.service.clone())
    }

    /// Takes a delivery out of flight (for an ack). Its slot is freed.
    pub fn take(&self, delivery_id: &str) -> Option<InFlight> {
        let f = self.lock().remove_inflight(delivery_id);
        if f.is_some() {
            self.changed.notify_waiters();
        }
        f
    }

    /// Puts back a delivery whose ack could not be stored, so the executor can ack again. If
    /// its stream is gone the work is returned for redelivery instead.
    pub fn put_back(&self, delivery_id: String, f: InFlight) -> Option<Work> {
        let mut inner = self.lock();
        let alive = inner
            .services
            .values()
            .any(|subs| subs.iter().any(|s| s.id == f.subscriber));
        if alive {
            inner.add_inflight(delivery_id, f);
            None
        } else {
            Some(f.work)
        }
    }

    /// Pushes a delivery's deadline to `now + extension`; returns the new deadline.
    pub fn extend(&self, delivery_id: &str, extension: Duration) -> Option<i64> {
        let now = self.clock.now_ms();
        let mut inner = self.lock();
        let f = inner.inflight.get_mut(delivery_id)?;
        f.deadline_ms = f.deadline_ms.max(now.saturating_add(millis(extension)));
        Some(f.deadline_ms)
    }

    /// Removes every delivery whose deadline has passed.
    pub fn expired(&self) -> Vec<(u64, Work)> {
        let now = self.clock.now_ms();
        let mut inner = self.lock();
        let ids: Vec<String> = inner
            .inflight
            .iter()
            .filter(|(_, f)| f.deadline_ms <= now)
            .map(|(k, _)| k.clone())
            .collect();
        let out: Vec<(u64, Work)> = ids
            .into_iter()
            .filter_map(|k| inner.remove_inflight(&k))
            .map(|f| {
                let mut w = f.work;
                w.deliveries += 1;
                (f.subscriber, w)
            })
            .collect();
        drop(inner);
        if !out.is_empty() {
            self.changed.notify_waiters();
        }
        out
    }

    /// Wakes every waiter, e.g. on shutdown.
    pub fn wake(&self) {
        self.changed.notify_waiters();
    }

    /// Closes every stream (on shutdown) so that clients see the end of their subscription.
    pub fn close_all(&self) {
        let mut inner = self.lock();
        inner.services.clear();
        inner.next.clear();
        inner.streams = 0;
        drop(inner);
        self.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every id the node issues is one that Ack and ExtendDeadline accept.
        #[test]
        fn issued_delivery_ids_are_valid(boot_epoch in any::<i64>(), seq in any::<u64>(), nonce in any::<u32>()) {
            let id = delivery_id_text(boot_epoch, seq, nonce);
            prop_assert!(crate::validate::delivery_id("delivery_id", &id).is_ok(), "{id}");
        }

        #[test]
        fn millis_saturate(secs in any::<u64>(), nanos in 0u32..1_000_000_000) {
            let d = Duration::new(secs, nanos);
            let ms = millis(d);
            prop_assert!(ms >= 0);
            if let Ok(exact) = i64::try_from(d.as_millis()) {
                prop_assert_eq!(ms, exact);
            } else {
                prop_assert_eq!(ms, i64::MAX);
            }
        }
    }
}
