//! The memory path of dispatch (docs/architecture.md, "Dispatch": the timer): the loop that
//! fires the timer's due entries, claims and reads them, and offers the live ones to the hub
//! through `Dispatcher::offer`, as the scan does; what it cannot deliver it leaves to the scan.

use std::{
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use futures::{stream, StreamExt};
use tokio::sync::oneshot;

use super::{
    claims::{By, ClaimGuard},
    Dispatcher, Offered,
};
use crate::{
    metric_definitions as metrics,
    ownership::Lease,
    timer::{self, Timer},
};
use rebound_store::TxState;

/// Most timer entries delivered as one chunk (their state rows read in `IN` queries of the
/// store's size, in parallel), and most payload bytes in one.
const TIMER_CHUNK: usize = 512;
const TIMER_CHUNK_PAYLOAD_BYTES: usize = 2 << 20;

/// How soon (real time) the timer tries again an entry whose lease was too short to deliver it.
const TIMER_LEASE_RECHECK: Duration = Duration::from_millis(100);

/// Longest the timer's loop sleeps without looking (a clock moved by a sync step).
const TIMER_MAX_SLEEP: Duration = Duration::from_millis(500);

impl Dispatcher {
    /// Fires the timer's loop until the node stops: every service with a due entry gets a
    /// task that delivers its due entries (`fire`).
    pub async fn run_timer(self: Arc<Self>) {
        let mut stop = self.stopping.clone();
        loop {
            self.fire_due();
            let parked = self.timer.has_parked();
            let now = self.timer_now();
            let wake = self
                .timer
                .next_due()
                .map_or(now + TIMER_MAX_SLEEP.as_millis() as i64, |d| {
                    d.min(now + TIMER_MAX_SLEEP.as_millis() as i64)
                });
            self.timer.sleeping_until(wake);
            let mut wait = Duration::from_millis((wake - now).max(1) as u64);
            if parked {
                wait = wait.min(TIMER_LEASE_RECHECK);
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.timer.changed.notified() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if parked {
                self.timer.unpark();
            }
        }
    }

    /// Starts a task per service with entries due now (tests call it by hand, the clock being
    /// theirs).
    pub fn fire_due(self: &Arc<Self>) {
        if self.stopping() {
            return;
        }
        for service in self.timer.start_firing(self.timer_now()) {
            let this = self.clone();
            let svc = service.clone();
            if self
                .tasks
                .spawn(async move { this.fire(&svc).await })
                .is_err()
            {
                return;
            }
        }
    }

    /// Delivers the due entries of `service`, earliest first, a chunk at a time.
    ///
    /// A chunk is as large as what is due allows (`TIMER_CHUNK`, `TIMER_CHUNK_PAYLOAD_BYTES`):
    /// the hub hands it to the streams as one burst, so executors acknowledge it in few
    /// calls. Chunks of 64 came in bursts so small that the bench's executors acknowledged 13
    /// to 19 retries per AckBatch call, against 63 to 76 from the scan, and every call costs
    /// the executor, the node and Cassandra.
    async fn fire(self: &Arc<Self>, service: &str) {
        let this = self.clone();
        let svc = service.to_string();
        // No read ahead: the take that comes back empty ends this service's firing, so it
        // must follow the offers of the last chunk (a second firing task would otherwise
        // offer the same service's retries alongside, through the holds' gates too).
        let mut chunks = stream::unfold((), move |()| {
            let (this, svc) = (this.clone(), svc.clone());
            async move {
                let due = this.timer.take_due(
                    &svc,
                    this.timer_now(),
                    TIMER_CHUNK,
                    TIMER_CHUNK_PAYLOAD_BYTES,
                );
                if due.is_empty() {
                    return None;
                }
                Some((this.claim_and_read(&svc, due).await, ()))
            }
        })
        .boxed();
        while let Some(items) = chunks.next().await {
            // Counted once a chunk (a metric's labels are looked up at each count).
            let (mut delivered, mut resolved, mut left) = (0, 0, 0);
            for (entry, lease, state, (claim, done)) in items {
                let give_up = self.timer_gives_up_at(&entry);
                let keep = || {
                    self.fenced(&lease)
                        && !self.services.is_paused(service)
                        && self.hub.has_subscriber(service)
                        && self.timer_now() < give_up
                };
                match self.offer(service, state, &keep, claim, done).await {
                    Offered::Delivered => {
                        self.touched_by_timer(service, &entry.location);
                        delivered += 1;
                    }
                    Offered::Resolved => {
                        self.touched_by_timer(service, &entry.location);
                        resolved += 1;
                    }
                    // Left to the scan of its window.
                    Offered::Kept | Offered::Abandoned => left += 1,
                }
            }
            if delivered > 0 {
                self.timer_fired.fetch_add(delivered, Ordering::Relaxed);
                metrics::metrics().timer("delivered", delivered);
            }
            if resolved > 0 {
                metrics::metrics().timer("resolved", resolved);
            }
            if left > 0 {
                self.left_to_scan(left);
            }
        }
    }

    /// The time the timer goes by: this node's clock, less how far it runs ahead of
    /// Cassandra's (as measured by its heartbeats, `Ownership::own_lead_ms`, and at least the
    /// scan's read lag of its own writer), so that nothing is delivered before the due time it
    /// answered, on Cassandra's clock. The scan has the skew margin for that; the timer, which
    /// fires at the due time itself, goes by the measure: a clock within the margin's deadband
    /// of Cassandra's, which the scan counts as on time, still delays it.
    fn timer_now(&self) -> i64 {
        let (node, epoch) = self.writer.identity();
        let lead = self
            .ownership
            .writer_read_lag_ms(node, epoch)
            .max(self.ownership.own_lead_ms());
        self.clock.now_ms() - lead
    }

    /// When the timer stops trying to deliver an entry and leaves it to the scan: when the
    /// scan may read its window (its end plus the margin, in this node's clock, which wrote
    /// it), so that one of the two paths may deliver it at every moment. Should they overlap
    /// (the clock stepped back), the claims keep it to one delivery.
    fn timer_gives_up_at(&self, entry: &timer::Entry) -> i64 {
        self.grid.end_ms(entry.location.window) + self.opts.skew_margin_ms
    }

    /// Claims the entries the timer may still deliver and reads their state rows; the live
    /// ones come back with their lease and claim. An entry left out goes to the scan: its
    /// lease is gone or short, its window is about to be read, an older day of its service
    /// is being fed, or the scan has claimed it. A failed read leaves them all to the scan.
    async fn claim_and_read(
        self: &Arc<Self>,
        service: &str,
        due: Vec<timer::Entry>,
    ) -> Vec<(
        timer::Entry,
        Lease,
        Box<TxState>,
        (ClaimGuard, oneshot::Sender<()>),
    )> {
        let now = self.timer_now();
        // No stream to take them: the scan delivers them once one subscribes (a state read now
        // would be stale by then).
        if !self.hub.has_subscriber(service) {
            self.left_to_scan(due.len() as u64);
            return Vec::new();
        }
        let leases = self.ownership.held();
        let oldest_day = self.oldest_day_at_work(service);
        let mut claimed = Vec::with_capacity(due.len());
        for entry in due {
            // Its range is no longer this node's: the new holder's scan delivers it.
            let Some(lease) = leases.iter().find(|l| l.range.contains(entry.token)) else {
                self.left_to_scan(1);
                continue;
            };
            let give_up = self.timer_gives_up_at(&entry);
            if now >= give_up || oldest_day.is_some_and(|d| d < entry.location.window.day) {
                self.left_to_scan(1);
                continue;
            }
            // Held, but for less than the fence margin: tried again once the ring has renewed
            // it (or given up, above).
            if !self.fenced(lease) {
                if self.timer.park(entry).is_err() {
                    self.left_to_scan(1);
                }
                continue;
            }
            let key = (
                entry.service.clone(),
                entry.transaction_id.clone(),
                entry.generation,
            );
            match self.claims.claim(key, By::Timer) {
                Ok(claim) => claimed.push((entry, *lease, claim)),
                // The scan has it.
                Err(_) => self.left_to_scan(1),
            }
        }
        if claimed.is_empty() {
            return Vec::new();
        }
        let ids: Vec<String> = claimed
            .iter()
            .map(|(e, _, _)| e.transaction_id.clone())
            .collect();
        let states = match self.store.get_states(service, &ids).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(service, error = %e, items = ids.len(), "the timer cannot read the retries due; the scan of their windows delivers them");
                self.left_to_scan(ids.len() as u64);
                return Vec::new();
            }
        };
        let mut live = Vec::with_capacity(claimed.len());
        for ((entry, lease, (mut claim, done)), state) in claimed.into_iter().zip(states) {
            match state {
                Some(s) if s.is_live(entry.generation) => {
                    live.push((entry, lease, Box::new(s), (claim, done)))
                }
                // Acknowledged, cancelled or scheduled again since: its pointer is stale.
                Some(s) if s.generation >= entry.generation => {
                    claim.resolved();
                    let _ = done.send(());
                    self.touched_by_timer(service, &entry.location);
                    metrics::metrics().timer("resolved", 1);
                }
                // No row (purged): the scan judges it.
                _ => {}
            }
        }
        live
    }

    /// The oldest day on which a scan of `service` is feeding, or last held due work back:
    /// the timer leaves newer days to the scan meanwhile (oldest day first).
    fn oldest_day_at_work(&self, service: &str) -> Option<i32> {
        let feeding = self
            .feeding
            .lock()
            .expect("feeding lock")
            .iter()
            .filter(|k| k.1 == service)
            .map(|k| k.0.day)
            .min();
        let held = self
            .held_days
            .lock()
            .expect("held days lock")
            .get(service)
            .copied();
        feeding.into_iter().chain(held).min()
    }

    fn left_to_scan(&self, n: u64) {
        self.timer_left.fetch_add(n, Ordering::Relaxed);
        metrics::metrics().timer("left", n);
    }

    /// Retries delivered from memory, and timer entries left to the scan, so far.
    pub fn timer_counts(&self) -> (u64, u64) {
        (
            self.timer_fired.load(Ordering::Relaxed),
            self.timer_left.load(Ordering::Relaxed),
        )
    }

    /// The timer (its size and counts, for tests and metrics).
    pub fn timer(&self) -> &Arc<Timer> {
        &self.timer
    }
}
