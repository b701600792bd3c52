//! Dependency holds in the chaos workload (docs/architecture.md, "Dependency holds").
//!
//! The retries of [`SERVICE`] name the dependency [`DEPENDENCY`], which is down during the
//! outages the plan draws from the seed. Its executors answer a delivery that comes while the
//! dependency is down with RETRY and a hold of [`HOLD_MS`] (the `Retry-After` the gateway
//! gave), and SUCCEEDED otherwise (always during the drain). Such a retry never uses an
//! attempt, so the per-transaction rules of the checker, which count attempts, do not apply to
//! it; [`check`] holds the service to the rules of holds:
//!
//! - no attempt is used by a hold: a delivery is the retry's first attempt by Rebound (2), or
//!   the attempt after one whose deliveries went unacknowledged (the executors leave a few
//!   unanswered, and a node that delivers an attempt too often counts it as failed);
//! - nothing is delivered while a hold is known to be in force, on any node: from a second
//!   after the ack that wrote it came back (every node reads the holds every second) to its
//!   end, less the clock skew a node may have and the test's slack; a delivery a SIGSTOP of
//!   its node (or of Cassandra) may have held back is excused;
//! - nothing is lost: every retry ends SUCCEEDED, none DEAD.

use std::collections::BTreeMap;

use rand::{rngs::StdRng, Rng};
use rebound_proto::v1 as pb;

use super::{
    history::{Answer, Event, FaultKind, Kind, Outcome},
    ops::{Op, Sched},
    violation::{Violation, SLACK_MS},
    MAX_SKEW_MS,
};

/// The service whose retries name [`DEPENDENCY`].
pub const SERVICE: &str = "gw";
pub const DEPENDENCY: &str = "gateway";
/// The hold an executor asks for when the dependency is down.
pub const HOLD_MS: i64 = 5_000;
/// How long after a hold is written every node has read it (`holds::REFRESH_EVERY`).
const REFRESH_MS: i64 = 1_000;

/// The operations of a plan, at their times (ms from the start of the workload).
pub type Timed = Vec<(i64, Op)>;
/// When the dependency is down: [from, to) in ms from the start of the workload.
pub type Outages = Vec<(i64, i64)>;

/// The holds part of a chaos plan over `span_ms`: a retry of [`SERVICE`] every 1-2 s, and two
/// outages of 6-12 s of the dependency.
pub fn plan(rng: &mut StdRng, span_ms: i64, nodes: usize) -> (Timed, Outages) {
    let mut ops = Vec::new();
    let mut at = rng.random_range(0..1_000);
    let mut i = 0usize;
    while at < span_ms - 2_000 {
        ops.push((
            at,
            Op::Enqueue {
                node: i % nodes,
                items: vec![(SERVICE.to_string(), format!("g{i}"), Sched::Delay(0))],
                batch: false,
            },
        ));
        i += 1;
        at += rng.random_range(1_000..=2_000);
    }
    let mut outages = Vec::new();
    for half in 0..2 {
        let lo = half * span_ms / 2;
        let len = rng.random_range(6_000..=12_000).min(span_ms / 2 - 1_000);
        let start = lo + rng.random_range(0..=(span_ms / 2 - len).max(1));
        outages.push((start, start + len));
    }
    (ops, outages)
}

/// Whether the dependency is down at `t` (ms since the start of the workload).
pub fn down(outages: &[(i64, i64)], t: i64) -> bool {
    outages.iter().any(|&(a, b)| a <= t && t < b)
}

/// The ack of a delivery of [`SERVICE`]: a hold while the dependency is down, else
/// SUCCEEDED.
pub fn ack_request(d: &pb::Delivery, down: bool) -> (pb::AckRequest, Outcome) {
    if down {
        (
            pb::AckRequest {
                delivery_id: d.delivery_id.clone(),
                outcome: pb::AckOutcome::Retry as i32,
                error: "503 from the gateway".into(),
                hold: Some(pb::DependencyHold {
                    duration: Some(super::dur(HOLD_MS)),
                    reason: format!("Retry-After: {}", HOLD_MS / 1000),
                }),
                ..Default::default()
            },
            Outcome::Hold,
        )
    } else {
        (
            pb::AckRequest {
                delivery_id: d.delivery_id.clone(),
                outcome: pb::AckOutcome::Succeeded as i32,
                ..Default::default()
            },
            Outcome::Succeeded,
        )
    }
}

/// What [`check`] counted.
#[derive(Debug, Default)]
pub struct Counts {
    pub retries: usize,
    pub deliveries: usize,
    pub holds: usize,
    /// Deliveries excused from the rule by a SIGSTOP that may have held them back.
    pub excused: usize,
}

/// The hold rules over a run (see the module's documentation).
pub fn check(
    ev: &[Event],
    finals: &BTreeMap<(String, String), Answer<pb::Retry>>,
) -> (Vec<Violation>, Counts) {
    let mut out = Vec::new();
    let mut c = Counts::default();
    // When a stop of `node` (or of Cassandra) may have held a delivery back.
    let stops: Vec<(i64, i64, Option<usize>)> = ev
        .iter()
        .filter_map(|e| match &e.kind {
            Kind::Fault {
                kind: FaultKind::Stop | FaultKind::CassandraPause,
                node,
                ..
            } => Some((e.start_ms, e.end_ms, *node)),
            _ => None,
        })
        .collect();
    // The deliveries acknowledged with an answer that was stored.
    let acked: std::collections::HashSet<usize> = ev
        .iter()
        .filter_map(|e| match &e.kind {
            Kind::Ack {
                delivery,
                answer: Answer::Ok(_),
                ..
            } => Some(*delivery),
            _ => None,
        })
        .collect();
    // Attempts of each retry that had a delivery left unacknowledged.
    let mut unacked: std::collections::HashSet<(&str, u32)> = Default::default();
    for (i, e) in ev.iter().enumerate() {
        if let Kind::Delivery {
            service,
            tx,
            attempt,
            ..
        } = &e.kind
        {
            if service == SERVICE && !acked.contains(&i) {
                unacked.insert((tx.as_str(), *attempt));
            }
        }
    }
    // The windows in which a hold was surely in force everywhere.
    let mut windows = Vec::new();
    for (i, e) in ev.iter().enumerate() {
        if let Kind::Ack {
            service,
            outcome: Outcome::Hold,
            answer: Answer::Ok(_),
            ..
        } = &e.kind
        {
            if service == SERVICE {
                c.holds += 1;
                let from = e.end_ms + REFRESH_MS + SLACK_MS;
                let to = e.start_ms + HOLD_MS - MAX_SKEW_MS - SLACK_MS;
                if from < to {
                    windows.push((from, to, i));
                }
            }
        }
    }
    for (i, e) in ev.iter().enumerate() {
        let Kind::Delivery {
            service,
            tx,
            node,
            attempt,
            ..
        } = &e.kind
        else {
            continue;
        };
        if service != SERVICE {
            continue;
        }
        c.deliveries += 1;
        if *attempt != 2 && !unacked.contains(&(tx.as_str(), attempt.saturating_sub(1))) {
            out.push(Violation {
                kind: "a held retry used an attempt",
                subject: format!(
                    "{SERVICE}/{tx}: #{i} is attempt {attempt}, and every delivery of attempt {} was acknowledged",
                    attempt.saturating_sub(1)
                ),
                lines: vec![i],
            });
        }
        let Some(&(from, to, ack)) = windows
            .iter()
            .find(|(from, to, _)| *from <= e.end_ms && e.end_ms <= *to)
        else {
            continue;
        };
        let held_back = stops.iter().any(|&(a, b, n)| {
            (n.is_none() || n == Some(*node)) && a <= e.end_ms && b + 2_000 >= from - HOLD_MS
        });
        if held_back {
            c.excused += 1;
            continue;
        }
        out.push(Violation {
            kind: "delivered while its dependency was held",
            subject: format!(
                "{SERVICE}/{tx}: #{i} on n{} while the hold of #{ack} was in force ({} ms after it came back, {} ms before it ended)",
                node + 1,
                e.end_ms - (from - REFRESH_MS - SLACK_MS),
                to + MAX_SKEW_MS + SLACK_MS - e.end_ms
            ),
            lines: vec![ack, i],
        });
    }
    for ((s, tx), a) in finals {
        if s != SERVICE {
            continue;
        }
        c.retries += 1;
        let ok = matches!(a, Answer::Ok(r) if r.status == pb::RetryStatus::Succeeded as i32);
        // An enqueue refused or never landed leaves nothing: NOT_FOUND is fine.
        let absent = matches!(a, Answer::Refused(x) if x.starts_with("NotFound"));
        if !ok && !absent {
            out.push(Violation {
                kind: "a held retry did not end SUCCEEDED",
                subject: format!("{SERVICE}/{tx}: {a:?}"),
                lines: vec![],
            });
        }
    }
    (out, c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::AckOk;

    fn delivery(ms: i64, tx: &str, attempt: u32) -> Event {
        Event {
            start_ms: ms,
            end_ms: ms,
            kind: Kind::Delivery {
                node: 0,
                service: SERVICE.into(),
                tx: tx.into(),
                delivery_id: format!("{tx}@{ms}"),
                attempt,
                due_ms: ms,
                deadline_ms: ms + 10_000,
            },
        }
    }
    fn hold(ms: i64, tx: &str) -> Event {
        Event {
            start_ms: ms,
            end_ms: ms + 20,
            kind: Kind::Ack {
                node: 0,
                service: SERVICE.into(),
                tx: tx.into(),
                delivery_id: String::new(),
                delivery: 0,
                attempt: 2,
                outcome: Outcome::Hold,
                retry_after_ms: None,
                error: String::new(),
                answer: Answer::Ok(AckOk {
                    next_due_ms: None,
                    dead_lettered: false,
                    snoozed: true,
                }),
            },
        }
    }

    #[test]
    fn a_delivery_inside_a_hold_or_at_a_later_attempt_is_found() {
        let finals = BTreeMap::from([(
            (SERVICE.to_string(), "g0".to_string()),
            Answer::Ok(pb::Retry {
                status: pb::RetryStatus::Succeeded as i32,
                ..Default::default()
            }),
        )]);
        // Held at 1 s for 5 s: in force everywhere from 2.52 s to 5.25 s.
        let ok = vec![
            delivery(1_000, "g0", 2),
            hold(1_000, "g0"),
            delivery(6_500, "g0", 2),
        ];
        let (v, c) = check(&ok, &finals);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!((c.deliveries, c.holds), (2, 1));
        let inside = vec![
            delivery(1_000, "g1", 2),
            hold(1_000, "g1"),
            delivery(3_000, "g2", 2),
        ];
        let (v, _) = check(&inside, &finals);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind, "delivered while its dependency was held");
        let attempt = vec![delivery(1_000, "g0", 3)];
        let (v, _) = check(&attempt, &finals);
        assert_eq!(v[0].kind, "a held retry used an attempt");
        let dead = BTreeMap::from([(
            (SERVICE.to_string(), "g0".to_string()),
            Answer::Ok(pb::Retry {
                status: pb::RetryStatus::Dead as i32,
                ..Default::default()
            }),
        )]);
        let (v, _) = check(&ok, &dead);
        assert_eq!(v[0].kind, "a held retry did not end SUCCEEDED");
    }
}
