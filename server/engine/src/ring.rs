//! The lease ring (docs/architecture.md, "The ring"): nodes share the token space through leases in
//! Cassandra, taken and renewed with lightweight transactions, so there is no coordinator to deploy
//! and no single point of failure.
//!
//! The token space is cut into `slots` equal ranges, each with a lease row; slot -1 is the
//! compactor (Node-0) lease. Every `lease_ttl / 3` a node heartbeats into `ring_members`,
//! renews what it holds (`IF epoch = ours`), hands back what exceeds its share
//! `ceil(slots / live nodes)` and takes expired or never-held slots up to its share (`IF epoch
//! = the expired one`, or `IF NOT EXISTS`). Every take bumps the epoch, the fencing token.
//!
//! Invariants kept here:
//! - a node stops using a slot before it releases it, and treats a slot as held only until
//!   the expiry it wrote itself; dispatch checks `still_holds` with a margin before each step;
//! - a lease LWT that times out has an unknown outcome: the slot is re-read with SERIAL
//!   consistency and counted as held only if the row shows this node and the new epoch.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::watch;

use crate::{
    ownership::{Lease, Ownership},
    peers::PeerClocks,
};
use rebound_store::{
    clock::SharedClock, Cas, LeaseChange, LeaseRow, LeaseStore, Member, StoreError, TokenRange,
};

/// The compactor lease's slot number.
pub const COMPACTOR_SLOT: i32 = -1;

#[derive(Debug, Clone)]
pub struct RingOptions {
    pub node_id: String,
    pub address: String,
    pub boot_epoch: i64,
    pub slots: u32,
    pub lease_ttl_ms: i64,
    /// Clock differences within this count as none (half the skew margin).
    pub clock_deadband_ms: i64,
}

/// The token range of `slot` out of `slots` equal ranges covering `[i64::MIN, i64::MAX]`.
pub fn slot_range(slot: u32, slots: u32) -> TokenRange {
    let span: i128 = 1i128 << 64;
    let lo = i128::from(i64::MIN) + span * i128::from(slot) / i128::from(slots);
    let hi = i128::from(i64::MIN) + span * i128::from(slot + 1) / i128::from(slots) - 1;
    TokenRange {
        start: lo as i64,
        end: hi as i64,
    }
}

#[derive(Debug, Default)]
struct Held {
    /// slot -> (epoch, expires_at_ms as written by this node)
    slots: BTreeMap<i32, (i64, i64)>,
}

#[derive(Debug)]
pub struct LeaseRing {
    store: Arc<dyn LeaseStore>,
    clock: SharedClock,
    opts: RingOptions,
    held: Mutex<Held>,
    peers: PeerClocks,
    /// Slots validly held by other nodes as last seen: slot -> expiry in this node's clock.
    others: Mutex<BTreeMap<i32, i64>>,
    /// When this node's heartbeat was last written (this node's clock; 0: never).
    heartbeat_at_ms: std::sync::atomic::AtomicI64,
}

impl LeaseRing {
    pub fn new(store: Arc<dyn LeaseStore>, clock: SharedClock, opts: RingOptions) -> Self {
        Self {
            store,
            clock,
            // A node's lag outlives its heartbeat row (two lifetimes) by eight more.
            peers: PeerClocks::new(
                opts.node_id.clone(),
                opts.boot_epoch,
                opts.clock_deadband_ms,
                8 * opts.lease_ttl_ms,
            ),
            opts,
            held: Mutex::new(Held::default()),
            others: Mutex::new(BTreeMap::new()),
            heartbeat_at_ms: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// How long ago this node's heartbeat was last written; None before the first.
    pub fn heartbeat_age_ms(&self, now_ms: i64) -> Option<i64> {
        match self
            .heartbeat_at_ms
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => None,
            at => Some((now_ms - at).max(0)),
        }
    }

    pub fn lease_ttl_ms(&self) -> i64 {
        self.opts.lease_ttl_ms
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().expect("ring lock")
    }

    /// Runs the lease loop until `stop` turns true, then hands every lease back.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let period = Duration::from_millis((self.opts.lease_ttl_ms / 3).max(100) as u64);
        loop {
            let before = self.held_slots();
            if let Err(e) = self.cycle().await {
                tracing::warn!(error = %e, "lease ring cycle failed, will retry");
            }
            self.log_changes(&before);
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        self.release_all().await;
    }

    /// The slots held now (the compactor's included).
    fn held_slots(&self) -> BTreeSet<i32> {
        self.lock().slots.keys().copied().collect()
    }

    /// One info line per round that changed what this node holds (each slot's change is at
    /// debug level): a node that starts alone takes 65 leases in its first round.
    fn log_changes(&self, before: &BTreeSet<i32>) {
        let after = self.held_slots();
        if after == *before {
            return;
        }
        let ranges = |set: BTreeSet<i32>| slot_ranges(set.into_iter().filter(|s| *s >= 0));
        let taken: BTreeSet<i32> = after.difference(before).copied().collect();
        let gone: BTreeSet<i32> = before.difference(&after).copied().collect();
        let compactor = match (
            before.contains(&COMPACTOR_SLOT),
            after.contains(&COMPACTOR_SLOT),
        ) {
            (false, true) => "taken",
            (true, false) => "given up",
            (true, true) => "held",
            (false, false) => "not held",
        };
        let held = after.iter().filter(|s| **s >= 0).count();
        tracing::info!(
            held = %format!("{held}/{}", self.opts.slots),
            taken = %ranges(taken),
            given_up = %ranges(gone),
            compactor,
            "lease ring changed"
        );
    }

    /// Writes this node's heartbeat (membership, and its clock for `peers`).
    pub async fn announce(&self) -> Result<(), StoreError> {
        let ttl = self.opts.lease_ttl_ms;
        let at = self.clock.now_ms();
        self.store
            .heartbeat(
                &Member {
                    node_id: self.opts.node_id.clone(),
                    address: self.opts.address.clone(),
                    boot_epoch: self.opts.boot_epoch,
                    heartbeat_at_ms: self.clock.now_ms(),
                    written_at_ms: 0,
                },
                // A dead node's membership lapses after two lease lifetimes.
                ((2 * ttl) / 1000).max(2) as u32,
            )
            .await?;
        self.heartbeat_at_ms
            .store(at, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// One round: heartbeat, renew, hand back surplus, take up to the share.
    pub async fn cycle(&self) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let ttl = self.opts.lease_ttl_ms;
        self.announce().await?;
        let members = self.store.list_members().await?;
        self.peers.update(&members);
        // Live: heartbeats Cassandra received within a lease lifetime of ours. A killed
        // node's row lingers for two lifetimes (its TTL); counting it that long would make
        // this node hand back slots nobody else will take.
        let newest = members
            .iter()
            .find(|m| m.node_id == self.opts.node_id && m.boot_epoch == self.opts.boot_epoch)
            .map(|m| m.written_at_ms)
            .unwrap_or(0);
        let live = members
            .iter()
            .filter(|m| m.written_at_ms == 0 || newest == 0 || m.written_at_ms >= newest - ttl)
            .count()
            .max(1) as u32;
        let share = self.opts.slots.div_ceil(live) as usize;

        // Renew everything held (and the compactor lease).
        let held: Vec<(i32, (i64, i64))> =
            self.lock().slots.iter().map(|(s, v)| (*s, *v)).collect();
        for (slot, (epoch, _)) in held {
            let row = self.row(slot, epoch, now + ttl);
            match self.cas(&row, Some(epoch), LeaseChange::Renew).await {
                Ok(true) => {
                    self.lock().slots.insert(slot, (epoch, now + ttl));
                }
                Ok(false) => {
                    tracing::debug!(slot, "lease lost");
                    self.lock().slots.remove(&slot);
                }
                Err(e) => {
                    tracing::warn!(slot, error = %e, "cannot renew a lease; keeping its old expiry")
                }
            }
        }

        // Hand back the surplus: stop using a slot first, then release it.
        let mut mine: Vec<(i32, i64)> = self
            .lock()
            .slots
            .iter()
            .filter(|(s, _)| **s >= 0)
            .map(|(s, (e, _))| (*s, *e))
            .collect();
        while mine.len() > share {
            let (slot, epoch) = mine.pop().expect("non-empty");
            self.lock().slots.remove(&slot);
            let row = self.release_row(slot, epoch);
            if let Err(e) = self.cas(&row, Some(epoch), LeaseChange::Release).await {
                tracing::warn!(slot, error = %e, "cannot hand a lease back; it will expire");
            } else {
                tracing::debug!(slot, "lease handed back");
            }
        }

        // Take expired or never-held slots up to the share, starting at a node-specific slot so
        // that nodes starting together do not all race for slot 0.
        let offset = (rebound_store::token::token_of(self.opts.node_id.as_bytes()) as u64
            % u64::from(self.opts.slots)) as u32;
        let mut count = mine.len();
        if count < share {
            // A cheap overview first; only slots that look free get a SERIAL read and an LWT.
            let unheld: Vec<i32> = {
                let h = self.lock();
                (0..self.opts.slots as i32)
                    .filter(|s| !h.slots.contains_key(s))
                    .collect()
            };
            let seen: BTreeMap<i32, i64> = self
                .store
                .peek_leases(&unheld)
                .await?
                .into_iter()
                .map(|r| (r.slot, self.expiry_here(&r)))
                .collect();
            for k in 0..self.opts.slots {
                if count >= share {
                    break;
                }
                let slot = ((k + offset) % self.opts.slots) as i32;
                let looks_free = seen.get(&slot).is_none_or(|exp| *exp < now);
                if !unheld.contains(&slot) || !looks_free {
                    continue;
                }
                if self.try_take(slot, now).await? {
                    count += 1;
                }
            }
        }
        // A slot abandoned by a dead node (expired for a whole renewal period, not handed back)
        // is better held over the share than by nobody until the dead node's membership
        // lapses; the surplus is handed back on a later round.
        let period = ttl / 3;
        let unheld: Vec<i32> = {
            let h = self.lock();
            (0..self.opts.slots as i32)
                .filter(|s| !h.slots.contains_key(s))
                .collect()
        };
        let mut others = BTreeMap::new();
        if !unheld.is_empty() {
            for r in self.store.peek_leases(&unheld).await? {
                let expires = self.expiry_here(&r);
                if r.expires_at_ms > 0
                    && expires < now - period
                    && self.try_take(r.slot, now).await?
                {
                    continue;
                }
                if r.owner != self.opts.node_id && expires >= now {
                    others.insert(r.slot, expires);
                }
            }
        }
        *self.others.lock().expect("others lock") = others;
        // The compactor lease: whoever finds it free takes it.
        if !self.lock().slots.contains_key(&COMPACTOR_SLOT) {
            self.try_take(COMPACTOR_SLOT, now).await?;
        }
        Ok(())
    }

    /// A lease's expiry in this node's clock: its holder wrote it in its own. Differences
    /// within the fencing margin (a fifth of the TTL, by which a holder stops before its
    /// expiry) are left alone, so that measurement noise never takes a lease early.
    fn expiry_here(&self, r: &LeaseRow) -> i64 {
        if r.expires_at_ms <= 0 {
            return r.expires_at_ms;
        }
        let lag = self.peers.node_lag_ms(&r.owner);
        let lag = if lag.abs() <= self.opts.lease_ttl_ms / 5 {
            0
        } else {
            lag
        };
        r.expires_at_ms.saturating_add(lag)
    }

    fn row(&self, slot: i32, epoch: i64, expires_at_ms: i64) -> LeaseRow {
        LeaseRow {
            slot,
            owner: self.opts.node_id.clone(),
            epoch,
            expires_at_ms,
            address: self.opts.address.clone(),
            taken_at_ms: self.clock.now_ms(),
            released_at_ms: 0,
            released_epoch: 0,
        }
    }

    /// The row that hands `epoch` back: expired, with the release recorded.
    fn release_row(&self, slot: i32, epoch: i64) -> LeaseRow {
        LeaseRow {
            released_at_ms: self.clock.now_ms(),
            released_epoch: epoch,
            ..self.row(slot, epoch, 0)
        }
    }

    /// Takes `slot` if it was never held or its lease has expired.
    async fn try_take(&self, slot: i32, now: i64) -> Result<bool, StoreError> {
        let current = self.store.read_lease(slot).await?;
        let (epoch, expected) = match &current {
            None => (1, None),
            Some(r) if self.expiry_here(r) < now => (r.epoch + 1, Some(r.epoch)),
            Some(_) => return Ok(false),
        };
        let row = self.row(slot, epoch, now + self.opts.lease_ttl_ms);
        match self.cas(&row, expected, LeaseChange::Take).await {
            Ok(true) => {
                tracing::debug!(slot, epoch, "lease taken");
                self.lock().slots.insert(slot, (epoch, row.expires_at_ms));
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => {
                tracing::warn!(slot, error = %e, "taking a lease failed");
                Ok(false)
            }
        }
    }

    /// A lease LWT; a timeout is resolved by a SERIAL read: applied only if the row now shows
    /// exactly what this node wrote.
    async fn cas(
        &self,
        row: &LeaseRow,
        expected_epoch: Option<i64>,
        change: LeaseChange,
    ) -> Result<bool, StoreError> {
        let res = match expected_epoch {
            None => self.store.create_lease(row).await,
            Some(e) => self.store.replace_lease(row, e, change).await,
        };
        match res {
            Ok(Cas::Applied) => Ok(true),
            Ok(Cas::Rejected(_)) => Ok(false),
            Err(StoreError::Timeout(m)) => {
                tracing::warn!(slot = row.slot, error = %m, "lease LWT outcome unknown, re-reading");
                let now = self.store.read_lease(row.slot).await?;
                Ok(now.is_some_and(|r| {
                    r.owner == row.owner
                        && r.epoch == row.epoch
                        && r.expires_at_ms == row.expires_at_ms
                }))
            }
            Err(e) => Err(e),
        }
    }

    async fn release_all(&self) {
        let held: Vec<(i32, i64)> = {
            let mut h = self.lock();
            let v = h.slots.iter().map(|(s, (e, _))| (*s, *e)).collect();
            h.slots.clear();
            v
        };
        for (slot, epoch) in held {
            let row = self.release_row(slot, epoch);
            let _ = self.cas(&row, Some(epoch), LeaseChange::Release).await;
        }
    }

    /// The ring as Cassandra sees it: live members and the unexpired leases they hold.
    pub async fn view(&self) -> Result<Vec<(Member, bool, Vec<TokenRange>)>, StoreError> {
        let now = self.clock.now_ms();
        let members = self.store.list_members().await?;
        let mut by_owner: BTreeMap<String, (bool, Vec<u32>)> = BTreeMap::new();
        let slots: Vec<i32> = std::iter::once(COMPACTOR_SLOT)
            .chain(0..self.opts.slots as i32)
            .collect();
        let mut rows = self.store.peek_leases(&slots).await?;
        rows.sort_by_key(|r| r.slot);
        for r in rows {
            if self.expiry_here(&r) > now {
                let e = by_owner.entry(r.owner).or_default();
                if r.slot == COMPACTOR_SLOT {
                    e.0 = true;
                } else {
                    e.1.push(r.slot as u32);
                }
            }
        }
        Ok(members
            .into_iter()
            .map(|m| {
                let (compactor, slots) = by_owner.remove(&m.node_id).unwrap_or_default();
                let ranges = merge(slots.into_iter().map(|s| slot_range(s, self.opts.slots)));
                (m, compactor, ranges)
            })
            .collect())
    }
}

/// Joins adjacent ranges.
pub fn merge(ranges: impl Iterator<Item = TokenRange>) -> Vec<TokenRange> {
    let mut out: Vec<TokenRange> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            Some(last) if last.end.checked_add(1) == Some(r.start) => last.end = r.end,
            _ => out.push(r),
        }
    }
    out
}

impl Ownership for LeaseRing {
    fn held(&self) -> Vec<Lease> {
        let now = self.clock.now_ms();
        self.lock()
            .slots
            .iter()
            .filter(|(s, (_, exp))| **s >= 0 && *exp > now)
            .map(|(s, (_, exp))| Lease {
                range: slot_range(*s as u32, self.opts.slots),
                valid_until_ms: *exp,
            })
            .collect()
    }

    fn still_holds(&self, range: TokenRange, until_ms: i64) -> bool {
        self.lock().slots.iter().any(|(s, (_, exp))| {
            *s >= 0 && slot_range(*s as u32, self.opts.slots) == range && *exp >= until_ms
        })
    }

    fn is_compactor(&self, until_ms: i64) -> bool {
        self.lock()
            .slots
            .get(&COMPACTOR_SLOT)
            .is_some_and(|(_, exp)| *exp >= until_ms)
    }

    fn writer_lag_ms(&self, node_id: &str, boot_epoch: i64) -> i64 {
        self.peers.writer_lag_ms(node_id, boot_epoch)
    }

    fn writer_read_lag_ms(&self, node_id: &str, boot_epoch: i64) -> i64 {
        self.peers.read_lag_ms(node_id, boot_epoch)
    }

    fn own_lead_ms(&self) -> i64 {
        self.peers.own_lead_ms()
    }

    fn max_writer_lag_ms(&self) -> i64 {
        self.peers.max_lag_ms()
    }

    fn unowned(&self, now_ms: i64) -> Vec<TokenRange> {
        let mine: std::collections::BTreeSet<i32> = self
            .lock()
            .slots
            .iter()
            .filter(|(s, (_, exp))| **s >= 0 && *exp > now_ms)
            .map(|(s, _)| *s)
            .collect();
        let others = self.others.lock().expect("others lock");
        merge(
            (0..self.opts.slots as i32)
                .filter(|s| !mine.contains(s) && others.get(s).is_none_or(|exp| *exp < now_ms))
                .map(|s| slot_range(s as u32, self.opts.slots)),
        )
    }
}

/// Slots as ranges, `0-14,16-63`; `-` when there are none.
fn slot_ranges(slots: impl Iterator<Item = i32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut run: Option<(i32, i32)> = None;
    for s in slots {
        run = match run {
            Some((first, last)) if s == last + 1 => Some((first, s)),
            Some(done) => {
                out.push(range_text(done));
                Some((s, s))
            }
            None => Some((s, s)),
        };
    }
    out.extend(run.map(range_text));
    if out.is_empty() {
        "-".into()
    } else {
        out.join(",")
    }
}

fn range_text((first, last): (i32, i32)) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_logged_as_ranges() {
        assert_eq!(slot_ranges([].into_iter()), "-");
        assert_eq!(slot_ranges([5].into_iter()), "5");
        assert_eq!(slot_ranges(0..64), "0-63");
        assert_eq!(slot_ranges([0, 1, 2, 4, 7, 8].into_iter()), "0-2,4,7-8");
    }

    #[test]
    fn slots_cover_the_token_space_without_gaps() {
        for slots in [1u32, 2, 3, 7, 64, 1000] {
            let mut next = i64::MIN;
            for s in 0..slots {
                let r = slot_range(s, slots);
                assert_eq!(r.start, next, "slots={slots} slot={s}");
                assert!(r.end >= r.start);
                next = r.end.wrapping_add(1);
            }
            assert_eq!(slot_range(slots - 1, slots).end, i64::MAX);
        }
    }

    #[test]
    fn adjacent_ranges_merge() {
        let m = merge((0..4).map(|s| slot_range(s, 4)));
        assert_eq!(m, vec![TokenRange::FULL]);
        let m = merge([0, 2].into_iter().map(|s| slot_range(s, 4)));
        assert_eq!(m.len(), 2);
    }
}
