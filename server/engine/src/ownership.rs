//! Which token ranges this node may dispatch, and whether it is Node-0 (the compactor). The
//! lease ring feeds this interface; a single node holds the whole ring for ever.
//!
//! Fencing (docs/architecture.md, invariant 6): every dispatch step and every delete done for a
//! range calls `still_holds` first, with a safety margin, and stops at once when it says no.

use std::fmt::Debug;

use rebound_store::TokenRange;

/// A held token range and the time its lease is valid until.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub range: TokenRange,
    pub valid_until_ms: i64,
}

pub trait Ownership: Send + Sync + Debug {
    /// The ranges held now.
    fn held(&self) -> Vec<Lease>;
    /// True while this node holds `range` until at least `until_ms`.
    fn still_holds(&self, range: TokenRange, until_ms: i64) -> bool;
    /// True while this node holds the compactor lease until at least `until_ms`.
    fn is_compactor(&self, until_ms: i64) -> bool;
    /// How far the clock of the writer `(node_id, boot_epoch)` lags this node's, in ms, never
    /// below 0 (see `peers`): its windows close for it that much later. 0 for an unknown writer.
    fn writer_lag_ms(&self, _node_id: &str, _boot_epoch: i64) -> i64 {
        0
    }
    /// How much later than its end plus the margin, in this node's clock, a window of the
    /// writer `(node_id, boot_epoch)` may be read (see `peers::PeerClocks::read_lag_ms`):
    /// never before the due times that writer answered, on Cassandra's clock. 0 when unknown.
    fn writer_read_lag_ms(&self, _node_id: &str, _boot_epoch: i64) -> i64 {
        0
    }
    /// How far this node's clock runs ahead of Cassandra's, as measured (`peers`), never
    /// below 0. 0 when unknown.
    fn own_lead_ms(&self) -> i64 {
        0
    }
    /// The largest lag of any live writer: no window is closed to every writer before
    /// `now - max_writer_lag_ms` has passed its end.
    fn max_writer_lag_ms(&self) -> i64 {
        0
    }
    /// Token ranges that no live node holds a lease on at `now_ms` (a handover under way):
    /// their due work still counts for the oldest-day-first rule.
    fn unowned(&self, _now_ms: i64) -> Vec<TokenRange> {
        Vec::new()
    }
}

/// The whole token space and the compactor role, for a single-node deployment.
#[derive(Debug, Clone, Copy, Default)]
pub struct WholeRing;

impl Ownership for WholeRing {
    fn held(&self) -> Vec<Lease> {
        vec![Lease {
            range: TokenRange::FULL,
            valid_until_ms: i64::MAX,
        }]
    }

    fn still_holds(&self, range: TokenRange, _until_ms: i64) -> bool {
        range == TokenRange::FULL
    }

    fn is_compactor(&self, _until_ms: i64) -> bool {
        true
    }
}
