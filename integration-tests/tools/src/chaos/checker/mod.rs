//! Checks a chaos history against the contract (docs/architecture.md "Dispatch" and
//! "Guarantees across nodes"; docs/push.md "Guarantees" for a pushed service).
//!
//! The history is a set of intervals on Cassandra's clock: a call may have taken effect at
//! any point between its start and its end, and a call whose outcome is unknown (deadline,
//! connection, unavailable) may have taken effect at any point after its start, even a while
//! after its end (a SIGSTOPped node resumes and finishes it). A rule fires only when no such
//! placement of the calls explains what was seen. A delivery is received some time after it
//! was sent; it may have been sent before a node was SIGSTOPped (or before Cassandra was) and
//! reach the executor only after the resume, so its send time is bounded from below by the
//! start of such a pause.
//!
//! # Pushed services
//!
//! A service with a push target has no executor: its node POSTs each delivery to the
//! harness's receiver (`chaos::push`) and records the outcome the answer means itself. A
//! request is a delivery ([`Kind::Push`]: rules 1, 3, 4 and 6 below hold for it as for a
//! streamed one), and the receiver's answer ([`Kind::PushAnswer`]) is the executor's work
//! and outcome, but *not* an acknowledged ack: when, and whether, the node stored the outcome
//! is not observable. A node may be killed or stopped after the 2xx reached it, its write may
//! time out, the answer may come after the delivery's deadline: then the delivery goes out
//! again, and that is the guarantee docs/push.md gives (at least once; nothing pushed again
//! after a 2xx *was recorded*; duplicates bounded by the pushes in flight at a fault). Which
//! node sent a request is not known either, so a SIGSTOP of any node may have held it back.
//! So, for a pushed service:
//!
//! - A request of the same attempt as an earlier one, with no enqueue between (rule 6), is a
//!   duplicate. It must be explained: the earlier one was never answered, or a fault (any
//!   node, or Cassandra) overlaps the time from its arrival to [`RECORD_SLACK_MS`] after its
//!   answer was settled (sent; for a stall, the node's timeout), or a node logged that the
//!   outcome of that delivery was not stored (`Push::unstored`), or the answer came after the
//!   delivery's deadline. Otherwise: "pushed again after a 2xx without a fault" (its answer
//!   was a 2xx) or "duplicate push without a fault".
//! - After a 2xx to attempt `a`, a request for another attempt of the same retry (no enqueue
//!   between) means the 2xx was not what the node recorded. A later attempt is explained by a
//!   non-2xx answer to some push of attempt `a` (the receiver answers every push of one
//!   attempt alike, but 200 once the drain starts; a 503 stored late by a stopped node
//!   supersedes the 2xx), or by one of attempt `a`'s pushes being explained as above (not
//!   recorded: after enough lost deliveries the attempt counts as failed); an earlier attempt
//!   only by a fault between the first push of `a` and it. Otherwise: "pushed again after a
//!   2xx without a fault". Every request after a 2xx counts in `pushes_after_2xx`.
//! - An acknowledged schedule is delivered until an outcome ends it (rule 4): a push's answer
//!   counts as an outcome that may land up to [`UNKNOWN_TAIL_MS`] after its node had it.
//! - Nothing is lost, and nothing settles without the receiver's say: at the end (after the
//!   drain, in which the receiver answers 200) a pushed retry is never SCHEDULED (rule 4's
//!   final check); a SUCCEEDED one was answered a 2xx at its final attempt (or before); a DEAD one is in
//!   the dead letters, and its last error is one the receiver gave to that retry (the
//!   receiver's error body names status, transaction and attempt), a timeout after a stall of
//!   it (or a fault), or deliveries lost to faults (`not acknowledged after N deliveries`).
//! - Every request is well-formed and signed (the Standard Webhooks signature verifies with
//!   the target's secret, `webhook-id` is the delivery id, the body is the payload), and no
//!   delivery id is pushed twice (a delivery pushed again gets a new id).
//! - A Subscribe stream of the service gets nothing while the target is set, but for a node
//!   that was just (re)started and has not read its settings yet.
//!
//! What is not checked for a pushed service, for want of an observable ack: "SUCCEEDED undone"
//! (an enqueue after a 2xx may be accepted: the 2xx may not be stored yet) and "cancel undone
//! by an ack" (the final status after a cancel is still checked).
//!
//! # Actions and listings
//!
//! The workload acts on single retries of the streamed services (ActOnRetries with one
//! transaction id, docs/architecture.md "Acting on retries") and lists them (ListRetries).
//! An action that changed the retry is a schedule (run now, reschedule: a new generation with
//! the same attempt, which may then be delivered again without a duplicate) or an end
//! (cancel, dead letter); one that skipped it changed nothing. Actions never excuse a delivery
//! after a SUCCEEDED ack or a cancel (only enqueues do), and one that changed the retry after
//! either answered (no enqueue between) undid it (rules 2 and 3). Rule 10 judges only the
//! schedules of enqueues and acks. A listing the node answered with an error (not unknown,
//! unavailable or a timeout) is a violation, "listing refused".
//!
//! The rules, one module per guarantee: `delivered` (1. never early, 4. every acknowledged
//! schedule is delivered until an outcome ends it, 6. duplicates and their bound, 10. on
//! time, for streamed services), `settled`
//! (2. nothing after SUCCEEDED, 3. nothing after a cancel, 5. every DEAD retry is in the dead
//! letters) and `pushed` (7-9, the pushed services); `view` reads the history for them.

mod delivered;
mod pushed;
mod settled;
mod view;

use std::collections::{BTreeMap, HashMap, HashSet};

use rebound_proto::v1 as pb;

use super::history::{Answer, Event, Kind};
pub use super::violation::{Violation, SLACK_MS};
use view::{Tx, View};

/// How long after its end a call of unknown outcome may still take effect.
pub const UNKNOWN_TAIL_MS: i64 = 5_000;
/// How long after the receiver's answer a node may still be storing the outcome: a fault
/// starting within it may keep the outcome from being stored.
pub const RECORD_SLACK_MS: i64 = 2_000;
/// What a pushed delivery's ack deadline adds to the target's timeout (the hub's
/// `PUSH_DEADLINE_MARGIN`).
pub const PUSH_DEADLINE_MARGIN_MS: i64 = 5_000;

/// What the checker needs to know of the pushed services of a run.
pub struct Push<'a> {
    pub services: &'a [&'a str],
    /// The target's request timeout.
    pub timeout_ms: i64,
    /// Delivery ids whose outcome a node logged as not stored (`push outcome not stored`).
    pub unstored: &'a HashSet<String>,
}

pub struct Input<'a> {
    pub events: &'a [Event],
    pub finals: &'a BTreeMap<(String, String), Answer<pb::Retry>>,
    pub letters: &'a HashMap<(String, String), Vec<String>>,
    pub clock_err_ms: i64,
    pub t0: i64,
    /// Rule 10, on time (None: lateness is not judged).
    pub on_time: Option<OnTime>,
}

/// How late a delivery may be, away from faults (rule 10).
#[derive(Clone, Copy, Debug)]
pub struct OnTime {
    /// After `max(due, answered)`, plus the clock error.
    pub limit_ms: i64,
    /// How long after a fault ends its effects may still make a delivery late (a lease to
    /// expire and be taken, a restarted node to serve).
    pub after_fault_ms: i64,
}

#[derive(Debug, Default)]
pub struct CheckResult {
    pub violations: Vec<Violation>,
    pub deliveries: usize,
    pub duplicates: usize,
    pub explained_duplicates: usize,
    pub duplicate_bound: usize,
    /// Push requests received.
    pub pushes: usize,
    /// Push requests of an attempt pushed before (no enqueue between), all explained when
    /// there is no violation: counted in `duplicates` too.
    pub push_duplicates: usize,
    /// Push requests for a retry after a 2xx to it, and how many of those were explained.
    pub pushes_after_2xx: usize,
    pub explained_pushes_after_2xx: usize,
    /// Rule 10: the schedules judged, and the lateness (received − due, ms) of each one's
    /// first delivery: from the due time the node answered (a window's start today), and,
    /// for enqueues, from the due time the workload asked for.
    pub on_time_judged: usize,
    pub lateness_ms: Vec<i64>,
    pub lateness_requested_ms: Vec<i64>,
}

pub fn check(input: &Input) -> CheckResult {
    check_with(input, None)
}

/// [`check`], with the rules of the pushed services (see "Pushed services" above).
pub fn check_with(input: &Input, push: Option<&Push>) -> CheckResult {
    let mut out = CheckResult::default();
    let no_unstored = HashSet::new();
    let (pushed_services, push_timeout_ms, unstored): (&[&str], i64, &HashSet<String>) = match push
    {
        Some(p) => (p.services, p.timeout_ms, p.unstored),
        None => (&[], 0, &no_unstored),
    };
    let view = View::new(input.events, push_timeout_ms, unstored, &mut out);
    out.duplicate_bound += delivered::duplicate_bound(&view);
    // A listing writes nothing and any node answers it: it may fail with its node or its
    // storage (unknown), but an answer of the node's own refusing it is a violation.
    for (i, e) in input.events.iter().enumerate() {
        if let Kind::List {
            node,
            service,
            answer: Answer::Refused(m),
        } = &e.kind
        {
            out.violations.push(Violation {
                kind: "listing refused",
                subject: format!("n{} {service}: #{i}: {m}", node + 1),
                lines: vec![i],
            });
        }
    }

    for (key, idx) in &view.by_tx {
        // Compensations are enqueued by the nodes, not the workload: no enqueue in the history
        // explains them; `saga::check` holds them to their own rule. A held retry's holds use
        // no attempt, which these rules count; `hold::check` holds it to the rules of holds.
        if key.0 == super::saga::UNDO || key.0 == super::hold::SERVICE {
            continue;
        }
        let tx = Tx::new(view.ev, key, idx);
        delivered::never_early(input, &view, &tx, &mut out);
        settled::outcomes(input, &view, &tx, &mut out);
        delivered::until_ended(input, &view, &tx, &mut out);
        delivered::duplicates(&view, &tx, &mut out);
        if !pushed_services.contains(&key.0.as_str()) {
            delivered::on_time(input, &view, &tx, &mut out);
            continue;
        }
        // Pushed services (see the module's documentation).
        pushed::check(input, &view, &tx, &mut out);
    }
    out
}

#[cfg(test)]
mod tests;
