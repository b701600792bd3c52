//! The history as the checker's rules read it: the faults, the ack (or push answer) of each
//! delivery, the events of each transaction, what each event means for its transaction
//! ([`Role`]), and the times the rules reason with (when a delivery may have been sent, when a
//! push's outcome may have been stored).

use std::collections::{BTreeMap, HashMap, HashSet};

use rebound_proto::v1 as pb;

use super::{
    CheckResult, Violation, PUSH_DEADLINE_MARGIN_MS, RECORD_SLACK_MS, SLACK_MS, UNKNOWN_TAIL_MS,
};
use crate::chaos::history::{Answer, Event, FaultKind, Kind, Outcome, Reply};

pub(super) struct Fault {
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) kind: FaultKind,
    pub(super) node: Option<usize>,
}

/// What one event means for its transaction.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Role {
    /// Acknowledged scheduling (enqueue OK, RETRY ack OK with a next due time, a redrive
    /// that started the retry again, a run-now or reschedule that changed it).
    Schedule,
    /// An outcome that ends the retry (SUCCEEDED / FAILED / dead-lettering ack OK, any
    /// cancel OK, a cancel or dead-letter action that changed it).
    End,
    /// A call of unknown outcome that could schedule or end it.
    Unknown,
    Delivery,
    /// Refused: changed nothing.
    None,
}

pub(super) fn role(e: &Event) -> Role {
    match &e.kind {
        Kind::Enqueue { answer, .. } => match answer {
            Answer::Ok(_) => Role::Schedule,
            Answer::Unknown(_) => Role::Unknown,
            Answer::Refused(_) => Role::None,
        },
        Kind::Cancel { answer, .. } => match answer {
            Answer::Ok(_) => Role::End,
            Answer::Unknown(_) => Role::Unknown,
            Answer::Refused(_) => Role::None,
        },
        Kind::Ack {
            answer, outcome, ..
        } => match answer {
            Answer::Ok(a) => {
                if a.dead_lettered
                    || matches!(outcome, Outcome::Succeeded | Outcome::Failed)
                    || a.next_due_ms.is_none()
                {
                    Role::End
                } else {
                    Role::Schedule
                }
            }
            Answer::Unknown(_) => Role::Unknown,
            Answer::Refused(_) => Role::None,
        },
        // A redrive starts only a DEAD retry again, under a new generation, with its attempts
        // reset: the same attempt may be delivered again after it.
        Kind::Redrive { answer, .. } => match answer {
            Answer::Ok(true) => Role::Schedule,
            Answer::Unknown(_) => Role::Unknown,
            Answer::Ok(false) | Answer::Refused(_) => Role::None,
        },
        // An action that changed the retry: a run-now or a reschedule writes a new generation
        // with the same attempt (no attempt used), so the same attempt may be delivered again
        // after it; a cancel or a dead letter ends it. One that skipped it changed nothing.
        Kind::Act { action, answer, .. } => match answer {
            Answer::Ok(true) => match action {
                pb::RetryAction::RunNow | pb::RetryAction::Reschedule => Role::Schedule,
                pb::RetryAction::Cancel | pb::RetryAction::DeadLetter => Role::End,
                pb::RetryAction::Unspecified => Role::None,
            },
            Answer::Unknown(_) => Role::Unknown,
            Answer::Ok(false) | Answer::Refused(_) => Role::None,
        },
        Kind::Delivery { .. } | Kind::Push { .. } => Role::Delivery,
        // The node stores what the answer means when, and if, it gets it: not observable.
        Kind::PushAnswer { .. } => Role::None,
        // A listing writes nothing (a refused one is a violation of its own: `check_with`).
        Kind::List { .. } | Kind::Fault { .. } => Role::None,
    }
}

/// The latest time an event may take effect.
pub(super) fn effect_end(e: &Event) -> i64 {
    if role(e) == Role::Unknown {
        e.end_ms + UNKNOWN_TAIL_MS
    } else {
        e.end_ms
    }
}

/// A delivery, streamed or pushed.
pub(super) struct Dl {
    /// None: pushed (which node sent it is not known).
    pub(super) node: Option<usize>,
    pub(super) attempt: u32,
    pub(super) due_ms: i64,
    pub(super) deadline_ms: i64,
}

pub(super) fn dl(e: &Event) -> Option<Dl> {
    match &e.kind {
        Kind::Delivery {
            node,
            attempt,
            due_ms,
            deadline_ms,
            ..
        } => Some(Dl {
            node: Some(*node),
            attempt: *attempt,
            due_ms: *due_ms,
            deadline_ms: *deadline_ms,
        }),
        Kind::Push {
            attempt, due_ms, ..
        } => Some(Dl {
            node: None,
            attempt: *attempt,
            due_ms: *due_ms,
            deadline_ms: i64::MAX,
        }),
        _ => None,
    }
}

pub(super) fn is_enqueue(e: &Event) -> bool {
    matches!(e.kind, Kind::Enqueue { .. })
}

pub(super) fn status_name(s: i32) -> String {
    pb::RetryStatus::try_from(s)
        .map(|s| format!("{s:?}"))
        .unwrap_or_else(|_| s.to_string())
}

/// The history, read once for every transaction's rules.
pub(super) struct View<'a> {
    pub(super) ev: &'a [Event],
    pub(super) faults: Vec<Fault>,
    /// Acks (and push answers) by delivery index.
    pub(super) ack_of: HashMap<usize, usize>,
    /// The events of each transaction, in order.
    pub(super) by_tx: BTreeMap<(String, String), Vec<usize>>,
    /// The push target's request timeout (0: no pushed service).
    push_timeout_ms: i64,
    /// Delivery ids whose outcome a node logged as not stored.
    pub(super) unstored: &'a HashSet<String>,
}

impl<'a> View<'a> {
    /// Reads `ev`, counting its deliveries and push requests in `out`, with the violations a
    /// push request shows by itself (malformed, a delivery id pushed twice).
    pub(super) fn new(
        ev: &'a [Event],
        push_timeout_ms: i64,
        unstored: &'a HashSet<String>,
        out: &mut CheckResult,
    ) -> View<'a> {
        let faults: Vec<Fault> = ev
            .iter()
            .filter_map(|e| match &e.kind {
                Kind::Fault { kind, node, .. } => Some(Fault {
                    start: e.start_ms,
                    end: e.end_ms,
                    kind: *kind,
                    node: *node,
                }),
                _ => None,
            })
            .collect();
        // Acks (and push answers) by delivery index.
        let mut ack_of: HashMap<usize, usize> = HashMap::new();
        let mut by_tx: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
        let mut pushed_ids: HashMap<&str, usize> = HashMap::new();
        for (i, e) in ev.iter().enumerate() {
            match &e.kind {
                Kind::Ack { delivery, .. } => {
                    ack_of.insert(*delivery, i);
                }
                Kind::PushAnswer { push, .. } => {
                    ack_of.insert(*push, i);
                }
                Kind::Delivery { .. } => out.deliveries += 1,
                Kind::Push {
                    delivery_id,
                    problem,
                    service,
                    tx,
                    ..
                } => {
                    out.pushes += 1;
                    if let Some(p) = problem {
                        out.violations.push(Violation {
                            kind: "malformed push request",
                            subject: format!("{service}/{tx}: #{i}: {p}"),
                            lines: vec![i],
                        });
                    }
                    if let Some(first) = pushed_ids.insert(delivery_id, i) {
                        out.violations.push(Violation {
                            kind: "delivery id pushed twice",
                            subject: format!(
                                "{service}/{tx}: #{i} repeats the delivery id of #{first}"
                            ),
                            lines: vec![first, i],
                        });
                    }
                }
                _ => {}
            }
            if let Some((s, t)) = e.tx() {
                by_tx
                    .entry((s.to_string(), t.to_string()))
                    .or_default()
                    .push(i);
            }
        }
        View {
            ev,
            faults,
            ack_of,
            by_tx,
            push_timeout_ms,
            unstored,
        }
    }

    /// A fault that may have had an effect within [lo, hi].
    pub(super) fn fault_in(&self, lo: i64, hi: i64) -> bool {
        self.faults
            .iter()
            .any(|f| f.start <= hi && f.end + 2_000 >= lo)
    }

    /// The earliest time a delivery may have been sent.
    pub(super) fn sent_lb(&self, i: usize) -> i64 {
        let (ev, faults) = (self.ev, &self.faults);
        let e = &ev[i];
        let node = dl(e).expect("a delivery").node;
        let recv = e.end_ms;
        let mut lb = recv - SLACK_MS;
        for f in faults {
            let relevant = match f.kind {
                // A push may come from any node.
                FaultKind::Stop => node.is_none() || f.node == node,
                FaultKind::CassandraPause => true,
                _ => false,
            };
            if relevant && f.start <= recv && f.end + 1_500 >= recv {
                lb = lb.min(f.start - SLACK_MS);
            }
        }
        lb
    }

    /// A push's answer, and when the node had it (a stall: when its request timed out).
    pub(super) fn push_answer(&self, d: usize) -> Option<(Reply, i64)> {
        let (ev, ack_of, push_timeout_ms) = (self.ev, &self.ack_of, self.push_timeout_ms);
        let a = *ack_of.get(&d)?;
        let Kind::PushAnswer { reply, .. } = &ev[a].kind else {
            return None;
        };
        let settled = match reply {
            Reply::Stall => ev[d].end_ms + push_timeout_ms,
            Reply::Status { .. } => ev[a].end_ms,
        };
        Some((*reply, settled))
    }

    /// Why the outcome of push `d` may not have been stored (None: it must have been).
    pub(super) fn unrecorded(&self, d: usize) -> Option<&'static str> {
        let (ev, unstored, push_timeout_ms) = (self.ev, self.unstored, self.push_timeout_ms);
        let Some((_, settled)) = self.push_answer(d) else {
            return Some("never answered");
        };
        let Kind::Push { delivery_id, .. } = &ev[d].kind else {
            return Some("not a push");
        };
        if unstored.contains(delivery_id) {
            return Some("its node logged the outcome as not stored");
        }
        if self.fault_in(ev[d].end_ms - SLACK_MS, settled + RECORD_SLACK_MS) {
            return Some("a fault");
        }
        // The deadline runs from the hand-out, before the request was sent.
        if settled + SLACK_MS + 1_000 > self.sent_lb(d) + push_timeout_ms + PUSH_DEADLINE_MARGIN_MS
        {
            return Some("answered after its deadline");
        }
        None
    }
}

/// One transaction's events, as its rules read them.
pub(super) struct Tx<'a> {
    pub(super) key: &'a (String, String),
    pub(super) idx: &'a [usize],
    /// Its deliveries, streamed or pushed.
    pub(super) deliveries: Vec<usize>,
    subject: String,
}

impl<'a> Tx<'a> {
    /// The transaction `key`, whose events are `idx`.
    pub(super) fn new(ev: &[Event], key: &'a (String, String), idx: &'a [usize]) -> Tx<'a> {
        let subject = format!("{}/{}", key.0, key.1);
        let deliveries: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|&i| role(&ev[i]) == Role::Delivery)
            .collect();
        Tx {
            key,
            idx,
            deliveries,
            subject,
        }
    }

    /// The transaction's events, at most 40, around the focus.
    fn lines(&self, focus: &[usize]) -> Vec<usize> {
        let idx = self.idx;
        if idx.len() <= 40 {
            return idx.to_vec();
        }
        let f = focus.first().copied().unwrap_or(0);
        let pos = idx.iter().position(|&i| i >= f).unwrap_or(0);
        let lo = pos.saturating_sub(25);
        idx[lo..(lo + 40).min(idx.len())].to_vec()
    }

    /// A violation of this transaction, shown by the events around `focus`.
    pub(super) fn violation(
        &self,
        kind: &'static str,
        detail: String,
        focus: &[usize],
    ) -> Violation {
        Violation {
            kind,
            subject: format!("{}: {detail}", self.subject),
            lines: self.lines(focus),
        }
    }

    /// An enqueue that may have scheduled the transaction anew in [from, to).
    pub(super) fn enqueue_between(&self, ev: &[Event], from: i64, to: i64) -> bool {
        self.idx.iter().any(|&j| {
            let e = &ev[j];
            is_enqueue(e)
                && matches!(role(e), Role::Schedule | Role::Unknown)
                && e.start_ms < to
                && effect_end(e) > from
        })
    }
}
