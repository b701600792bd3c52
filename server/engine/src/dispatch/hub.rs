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
//!
//! A delivery waits in its stream's channel until the stream takes it to send it. When it
//! leaves flight first (its ack deadline passed, its stream closed) the hub empties its place
//! in the channel, so a stream whose client does not read (HTTP/2 flow control stops the
//! stream from taking more) holds no copy of work that is no longer in flight: every copy the
//! channels hold counts against `max_in_flight_bytes`. Such a stream is stalled: it gets no
//! new delivery until it takes one again, so its work goes to the executors that read.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};

use super::claims::ClaimGuard;
use crate::error::Error;
use rebound_store::{clock::SharedClock, context::TextContext, TxState};

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
    pub dependency: String,
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
            dependency: s.dependency.clone(),
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
    /// The path's claim on the pointer (`claims`): held until the work is resolved or dropped,
    /// across redeliveries, so that the other path of this node does not deliver it too.
    pub claim: Option<Box<ClaimGuard>>,
    /// Its last delivery: when, and to which executor (for the attempt history).
    pub delivered: Option<(i64, Arc<str>)>,
}

impl Work {
    pub fn resolve(mut self) {
        if let Some(claim) = self.claim.as_mut() {
            claim.resolved();
        }
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }
}

#[derive(Debug)]
struct Subscriber {
    id: u64,
    tx: mpsc::Sender<Handed>,
    slots: Arc<Semaphore>,
    /// A delivery of this stream passed its deadline before the stream took it out of its
    /// channel: the client does not read. Cleared when the stream takes one again.
    stalled: Arc<AtomicBool>,
    /// Set for the node's pusher of the service (`Hub::subscribe_push`): the request timeout
    /// its deliveries' ack deadlines cover.
    push: Option<Duration>,
    /// `SubscribeRequest.executor_id` (`push` for the pusher), named in the attempt history.
    executor: Arc<str>,
}

/// A delivery's place in its stream's channel: the stream takes the delivery out to send it,
/// or the hub does when the delivery leaves flight before that (`InFlight::withdraw`).
type Handed = Arc<Mutex<Option<Box<Delivery>>>>;

/// A delivery waiting for its ack.
#[derive(Debug)]
pub struct InFlight {
    pub work: Work,
    pub subscriber: u64,
    pub deadline_ms: i64,
    _permit: OwnedSemaphorePermit,
    handed: Handed,
    stalled: Arc<AtomicBool>,
}

impl InFlight {
    /// Empties the delivery's place in its stream's channel; true when the stream had not
    /// taken it yet.
    fn withdraw(&self) -> bool {
        self.handed.lock().expect("handed lock").take().is_some()
    }
}

/// The id of one delivery: the node's boot epoch, a sequence number and a random nonce. At
/// most 52 bytes, so `validate::delivery_id` accepts every id the node issues.
pub fn delivery_id_text(boot_epoch: i64, seq: u64, nonce: u32) -> String {
    // Not `format!`: one is made per delivery, and it cost as much as the rest of
    // `try_deliver`'s own work.
    let mut digits = itoa::Buffer::new();
    let mut id = String::with_capacity(52);
    id.push_str(digits.format(boot_epoch));
    id.push('-');
    id.push_str(digits.format(seq));
    id.push('-');
    id.push_str(digits.format(nonce));
    id
}

/// What a pushed delivery's ack deadline adds to its request timeout: time to settle the
/// outcome after the response.
pub const PUSH_DEADLINE_MARGIN: Duration = Duration::from_secs(5);

/// The executor a push target's deliveries are recorded as going to (`Subscriber::executor`).
pub const PUSH_EXECUTOR: &str = "push";

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
        + s.saga.compensations.iter().map(Vec::len).sum::<usize>()
        + s.saga.chain.as_ref().map_or(0, |c| {
            c.members
                .iter()
                .map(|(service, tx)| service.len() + tx.len())
                .sum::<usize>()
        })
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
    /// Removes subscriber `id` from its service's rotation, if it is still there.
    fn leave(&mut self, id: u64) {
        let mut service = None;
        for (name, subs) in self.services.iter_mut() {
            if let Some(pos) = subs.iter().position(|s| s.id == id) {
                let sub = subs.remove(pos);
                service = Some((name.clone(), sub.push.is_some()));
                break;
            }
        }
        if let Some((name, pusher)) = service {
            if !pusher {
                self.streams -= 1;
            }
            if self.services.get(&name).is_some_and(|s| s.is_empty()) {
                self.services.remove(&name);
                self.next.remove(&name);
            }
        }
    }

    fn add_inflight(&mut self, delivery_id: String, f: InFlight) {
        self.inflight_bytes += held_bytes(&f.work.state);
        self.inflight.insert(delivery_id, f);
    }

    /// Takes a delivery out of flight, and its copy out of its stream's channel if the
    /// stream has not taken it (then the flag is true): its bytes are no longer held.
    fn remove_inflight(&mut self, delivery_id: &str) -> Option<(InFlight, bool)> {
        let f = self.inflight.remove(delivery_id)?;
        self.inflight_bytes -= held_bytes(&f.work.state);
        let untaken = f.withdraw();
        Some((f, untaken))
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
#[derive(Debug)]
pub struct Deliveries {
    rx: mpsc::Receiver<Handed>,
    stalled: Arc<AtomicBool>,
}

impl Deliveries {
    /// The next delivery still in flight; None once the stream is closed.
    pub fn poll_recv(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Delivery>> {
        loop {
            let Some(handed) = std::task::ready!(self.rx.poll_recv(cx)) else {
                return std::task::Poll::Ready(None);
            };
            self.stalled.store(false, Ordering::Relaxed);
            // Empty: withdrawn by the hub (expired, or acknowledged) before the stream got to it.
            let taken = handed.lock().expect("handed lock").take();
            if let Some(d) = taken {
                return std::task::Poll::Ready(Some(*d));
            }
        }
    }
}

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
    pub fn subscribe(
        &self,
        service: &str,
        executor_id: &str,
        max_in_flight: u32,
    ) -> Result<(u64, Deliveries), Error> {
        self.register(service, executor_id, max_in_flight, None)
    }

    /// Registers the node's pusher of `service` (docs/architecture.md, "Push delivery"):
    /// while it is registered the service's deliveries go to it alone, never to a Subscribe
    /// stream, and each gets an ack deadline of at least `timeout` plus a margin. Not counted
    /// against `max_subscribers` (one per service with a push target).
    pub fn subscribe_push(
        &self,
        service: &str,
        max_in_flight: u32,
        timeout: Duration,
    ) -> (u64, Deliveries) {
        match self.register(service, PUSH_EXECUTOR, max_in_flight, Some(timeout)) {
            Ok(r) => r,
            Err(_) => unreachable!("a pusher is not refused"),
        }
    }

    fn register(
        &self,
        service: &str,
        executor_id: &str,
        max_in_flight: u32,
        push: Option<Duration>,
    ) -> Result<(u64, Deliveries), Error> {
        let mut inner = self.lock();
        if push.is_none() && inner.streams >= self.limits.max_subscribers {
            return Err(Error::ResourceExhausted(format!(
                "this node has {} Subscribe streams open, its limit (REBOUND_MAX_SUBSCRIBERS); \
                 subscribe on another node or close idle streams",
                inner.streams
            )));
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(max_in_flight as usize + 1);
        let stalled = Arc::new(AtomicBool::new(false));
        let sub = Arc::new(Subscriber {
            id,
            tx,
            slots: Arc::new(Semaphore::new(max_in_flight as usize)),
            stalled: stalled.clone(),
            push,
            executor: executor_id.into(),
        });
        inner
            .services
            .entry(service.to_string())
            .or_default()
            .push(sub);
        if push.is_none() {
            inner.streams += 1;
        }
        drop(inner);
        self.changed.notify_waiters();
        Ok((id, Deliveries { rx, stalled }))
    }

    /// Takes subscriber `id` out of the rotation: it gets no new work, while what it has in
    /// flight stays there and can still be acknowledged until `unsubscribe`. A pusher that
    /// stops retires first, so that the answers of its requests still running are settled.
    pub fn retire(&self, id: u64) {
        let mut inner = self.lock();
        inner.leave(id);
        drop(inner);
        self.changed.notify_waiters();
    }

    /// Removes a closed stream and returns its unacknowledged work for redelivery.
    pub fn unsubscribe(&self, id: u64) -> Vec<Work> {
        let mut inner = self.lock();
        inner.leave(id);
        let ids: Vec<String> = inner
            .inflight
            .iter()
            .filter(|(_, f)| f.subscriber == id)
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for k in ids {
            if let Some((f, _)) = inner.remove_inflight(&k) {
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

    /// Calls `f` with each of `service`'s deliveries in flight (at most `max`): the retry as
    /// delivered, when and to which executor, and its ack deadline. Under the hub's lock: `f`
    /// only copies what it needs.
    pub fn each_in_flight(
        &self,
        service: &str,
        max: usize,
        mut f: impl FnMut(&TxState, Option<&(i64, Arc<str>)>, i64),
    ) {
        let inner = self.lock();
        for d in inner
            .inflight
            .values()
            .filter(|d| d.work.state.service == service)
            .take(max)
        {
            f(&d.work.state, d.work.delivered.as_ref(), d.deadline_ms);
        }
    }

    pub fn has_subscriber(&self, service: &str) -> bool {
        self.lock()
            .services
            .get(service)
            .is_some_and(|s| !s.is_empty())
    }

    /// Tries to hand `work` to a subscriber of its service with a free slot, preferring one
    /// other than `avoid`. Gives the work back when none has room.
    pub fn try_deliver(&self, mut work: Work, avoid: Option<u64>) -> Result<(), Work> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let service = work.state.service.as_str();
        let Some(subs) = inner.services.get(service) else {
            return Err(work);
        };
        if inner.inflight_bytes > 0
            && inner.inflight_bytes + held_bytes(&work.state) > self.limits.max_in_flight_bytes
        {
            return Err(work);
        }
        // A pusher, when the service has one, takes every delivery.
        let pushed = subs.iter().any(|s| s.push.is_some());
        let start = inner.next.get(service).copied().unwrap_or(0);
        let n = subs.len();
        // Round-robin from `start`; the stream to avoid, if any, last.
        let order = (0..n)
            .map(|k| (start + k) % n)
            .filter(|i| Some(subs[*i].id) != avoid)
            .chain((0..n).filter(|i| Some(subs[*i].id) == avoid));
        for i in order {
            let sub = &subs[i];
            if sub.stalled.load(Ordering::Relaxed) || (pushed && sub.push.is_none()) {
                continue;
            }
            let Ok(permit) = sub.slots.clone().try_acquire_owned() else {
                continue;
            };
            let now = self.clock.now_ms();
            let ack_timeout = match sub.push {
                Some(t) => work.state.policy.ack_timeout.max(t + PUSH_DEADLINE_MARGIN),
                None => work.state.policy.ack_timeout,
            };
            let deadline_ms = now.saturating_add(millis(ack_timeout));
            let delivery_id = delivery_id_text(
                self.boot_epoch,
                self.ids.fetch_add(1, Ordering::Relaxed),
                rand::random::<u32>(),
            );
            let handed: Handed = Arc::new(Mutex::new(Some(Box::new(Delivery::of(
                &delivery_id,
                &work.state,
                deadline_ms,
            )))));
            if let Err(e) = sub.tx.try_send(handed.clone()) {
                tracing::debug!(subscriber = sub.id, error = %e, "subscriber channel refused a delivery");
                continue;
            }
            tracing::trace!(subscriber = sub.id, transaction_id = %work.state.transaction_id, "delivered");
            let m = crate::metric_definitions::metrics();
            m.delivery(service, work.deliveries > 0);
            m.delivery_lateness
                .observe((now - work.state.due_at_ms).max(0) as f64 / 1000.0);
            let (subscriber, stalled) = (sub.id, sub.stalled.clone());
            match inner.next.get_mut(service) {
                Some(next) => *next = i + 1,
                None => {
                    inner.next.insert(service.to_string(), i + 1);
                }
            }
            work.delivered = Some((now, sub.executor.clone()));
            inner.add_inflight(
                delivery_id,
                InFlight {
                    work,
                    subscriber,
                    deadline_ms,
                    _permit: permit,
                    handed,
                    stalled,
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

    /// The dependency the retry of a delivery in flight names (empty: none).
    pub fn dependency_of(&self, delivery_id: &str) -> Option<String> {
        self.lock()
            .inflight
            .get(delivery_id)
            .map(|f| f.work.state.dependency.clone())
    }

    /// Takes a delivery out of flight (for an ack). Its slot is freed.
    pub fn take(&self, delivery_id: &str) -> Option<InFlight> {
        let f = self.lock().remove_inflight(delivery_id).map(|(f, _)| f);
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
            .map(|(f, untaken)| {
                if untaken {
                    // Its stream never took it out of the channel: the client does not read.
                    f.stalled.store(true, Ordering::Relaxed);
                }
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

    fn work(txid: &str, payload_bytes: usize) -> Work {
        let mut state = TxState::cancelled_ghost("svc", txid, 1);
        state.payload = vec![7; payload_bytes];
        Work {
            state: Box::new(state),
            deliveries: 0,
            done: None,
            slot: None,
            claim: None,
            delivered: None,
        }
    }

    fn poll(d: &mut Deliveries) -> std::task::Poll<Option<Delivery>> {
        d.poll_recv(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    }

    /// A stream whose client does not read keeps no copy of work that left flight, and gets
    /// no more work until it reads again; a reading stream gets the redelivery.
    #[test]
    fn a_stream_that_does_not_read_holds_no_expired_copy_and_is_skipped() {
        let clock = rebound_store::clock::ManualClock::new(1_000_000);
        let hub = Hub::new(
            Arc::new(clock.clone()),
            1,
            HubLimits {
                max_subscribers: 10,
                max_in_flight_bytes: 1 << 20,
            },
        );
        let (deaf_id, mut deaf) = hub.subscribe("svc", "w", 4).unwrap();
        for t in ["a", "b"] {
            hub.try_deliver(work(t, 100_000), None).unwrap();
        }
        assert_eq!(hub.lock().inflight_bytes, 200_000);
        // The copies wait in the channel, counted as in flight.
        let queued: Vec<Handed> = std::iter::from_fn(|| deaf.rx.try_recv().ok()).collect();
        assert_eq!(queued.len(), 2);
        assert!(queued.iter().all(|h| h.lock().unwrap().is_some()));

        clock.advance(31_000);
        let expired = hub.expired();
        assert_eq!(expired.len(), 2);
        assert!(expired.iter().all(|(sub, _)| *sub == deaf_id));
        // Out of flight: no copy left anywhere in the hub.
        assert_eq!(hub.lock().inflight_bytes, 0);
        assert!(queued.iter().all(|h| h.lock().unwrap().is_none()));

        // The stalled stream has free slots but gets nothing; a reading one does.
        let mut works = expired.into_iter().map(|(_, w)| w);
        let w = hub.try_deliver(works.next().unwrap(), None).unwrap_err();
        let (_, mut reader) = hub.subscribe("svc", "w", 4).unwrap();
        hub.try_deliver(w, Some(deaf_id)).unwrap();
        hub.try_deliver(works.next().unwrap(), None).unwrap();
        for t in ["a", "b"] {
            let std::task::Poll::Ready(Some(d)) = poll(&mut reader) else {
                panic!("the reader gets {t}");
            };
            assert_eq!(d.payload.len(), 100_000);
        }

        // Once it takes from its channel again (here: a withdrawn copy), it is served again.
        let (tx_back, rx_back) = mpsc::channel(4);
        for h in queued {
            tx_back.try_send(h).unwrap();
        }
        deaf.rx = rx_back;
        assert!(poll(&mut deaf).is_pending(), "withdrawn copies are skipped");
        assert!(!deaf.stalled.load(Ordering::Relaxed));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every id the node issues is one that Ack and ExtendDeadline accept.
        #[test]
        fn issued_delivery_ids_are_valid(boot_epoch in any::<i64>(), seq in any::<u64>(), nonce in any::<u32>()) {
            let id = delivery_id_text(boot_epoch, seq, nonce);
            prop_assert!(crate::validate::delivery_id("delivery_id", &id).is_ok(), "{id}");
            prop_assert_eq!(id, format!("{boot_epoch}-{seq}-{nonce}"));
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
