//! Compensation chains in the chaos workload (docs/architecture.md, "Compensation chains").
//!
//! A saga step is a retry of [`STEP`] enqueued by the workload with two compensations, `<tx>/c1`
//! and `<tx>/c2`, both in [`UNDO`]. The executors answer both services as they answer the
//! others (SUCCEEDED, RETRY, FAILED, snooze, or no answer), so a step ends SUCCEEDED, DEAD
//! (FAILED, or its attempts used up) or CANCELLED (the workload cancels some), and a
//! compensation may itself die. The nodes enqueue the compensations themselves, so the
//! per-transaction rules of the checker do not apply to [`UNDO`] (no enqueue of the workload
//! explains its deliveries); a step is an ordinary retry and is held to them. [`check`] holds
//! the chains to their own rule: every chain whose step died runs to its end in order, or stops
//! at a dead compensation that has its dead letter; a step that did not die runs none.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rand::{rngs::StdRng, Rng};
use rebound_proto::v1 as pb;

use super::{
    history::{Answer, Event, Kind, Outcome},
    ops::{Op, Sched},
    violation::{Violation, SLACK_MS},
};

/// The service of the saga steps.
pub const STEP: &str = "saga";
/// The service of their compensations.
pub const UNDO: &str = "undo";
/// Both, for the executors and the dead letters.
pub const SERVICES: &[&str] = &[STEP, UNDO];

/// The compensations of step `tx`, in the order they run.
pub fn chain(tx: &str) -> [String; 2] {
    [format!("{tx}/c1"), format!("{tx}/c2")]
}

/// What an enqueue of step `tx` carries: its two compensations, retried every 0.5-1 s
/// (no attempt limit: the default, for 24 h).
pub fn compensations(tx: &str) -> Vec<pb::Compensation> {
    let d = |ms: i64| prost_types::Duration {
        seconds: ms / 1000,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    };
    chain(tx)
        .into_iter()
        .map(|c| pb::Compensation {
            service: UNDO.into(),
            payload: c.as_bytes().to_vec(),
            transaction_id: c,
            policy: Some(pb::RetryPolicy {
                initial_backoff: Some(d(500)),
                max_backoff: Some(d(1_000)),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect()
}

/// The saga part of a chaos plan over `span_ms`: a step every 2-3 s on a node in turn, and
/// a cancel of one step in five, 0.5-3 s after its enqueue.
pub fn plan(rng: &mut StdRng, span_ms: i64, nodes: usize) -> Vec<(i64, Op)> {
    let mut ops = Vec::new();
    let mut at = rng.random_range(0..2_000);
    let mut i = 0usize;
    while at < span_ms - 2_000 {
        let tx = format!("s{i}");
        ops.push((
            at,
            Op::Enqueue {
                node: i % nodes,
                items: vec![(STEP.to_string(), tx.clone(), Sched::Delay(0))],
                batch: false,
            },
        ));
        if rng.random_range(0..5) == 0 {
            ops.push((
                at + rng.random_range(500..=3_000),
                Op::Cancel {
                    node: (i + 1) % nodes,
                    service: STEP.to_string(),
                    tx,
                },
            ));
        }
        i += 1;
        at += rng.random_range(2_000..=3_000);
    }
    ops
}

fn status(a: Option<&Answer<pb::Retry>>) -> Option<pb::RetryStatus> {
    match a? {
        Answer::Ok(r) => pb::RetryStatus::try_from(r.status).ok(),
        _ => None,
    }
}

fn not_found(a: Option<&Answer<pb::Retry>>) -> bool {
    matches!(a, Some(Answer::Refused(s)) if s.starts_with("NotFound"))
}

/// Whether the chain of a dead step has settled: both compensations SUCCEEDED, or one DEAD
/// and none after it enqueued.
pub fn settled(finals: &BTreeMap<(String, String), Answer<pb::Retry>>, tx: &str) -> bool {
    let [c1, c2] = chain(tx);
    let s1 = status(finals.get(&(UNDO.to_string(), c1)));
    let f2 = finals.get(&(UNDO.to_string(), c2));
    match s1 {
        Some(pb::RetryStatus::Succeeded) => matches!(
            status(f2),
            Some(pb::RetryStatus::Succeeded | pb::RetryStatus::Dead)
        ),
        Some(pb::RetryStatus::Dead) => not_found(f2),
        _ => false,
    }
}

/// The keys to read for the chains of `steps`.
pub fn chain_keys(steps: &[String]) -> BTreeSet<(String, String)> {
    steps
        .iter()
        .flat_map(|tx| chain(tx).map(|c| (UNDO.to_string(), c)))
        .collect()
}

/// What [`check`] counted.
#[derive(Debug, Default)]
pub struct Counts {
    pub steps: usize,
    pub dead: usize,
    pub completed: usize,
    pub stopped: usize,
    pub deliveries: usize,
    /// Deliveries of a compensation after an acknowledged SUCCEEDED of it (at least once:
    /// not a violation).
    pub after_success: usize,
    /// Steps that ended DEAD although one of their deliveries was answered SUCCEEDED with OK
    /// or an unknown outcome (two deliveries of one attempt answered SUCCEEDED and FAILED at
    /// once, docs/architecture.md, "Compensation chains").
    pub dead_over_success: usize,
}

/// The saga rule over a run: `finals` holds the end states of the steps and of their
/// compensations, `letters` the dead letters by (service, transaction).
pub fn check(
    ev: &[Event],
    finals: &BTreeMap<(String, String), Answer<pb::Retry>>,
    letters: &HashMap<(String, String), Vec<String>>,
) -> (Vec<Violation>, Counts) {
    let mut out = Vec::new();
    let mut counts = Counts::default();
    // The events of each transaction of both services.
    let mut by_tx: HashMap<(String, String), Vec<usize>> = HashMap::new();
    for (i, e) in ev.iter().enumerate() {
        if let Some((s, t)) = e.tx() {
            if SERVICES.contains(&s) {
                by_tx.entry((s.into(), t.into())).or_default().push(i);
            }
        }
    }
    let events_of = |s: &str, t: &str| -> Vec<usize> {
        by_tx
            .get(&(s.to_string(), t.to_string()))
            .cloned()
            .unwrap_or_default()
    };
    let deliveries = |t: &str| -> Vec<usize> {
        events_of(UNDO, t)
            .iter()
            .copied()
            .filter(|&i| matches!(ev[i].kind, Kind::Delivery { .. }))
            .collect()
    };
    // Acks of `t` (in UNDO) with outcome SUCCEEDED that may have been stored.
    let successes = |t: &str| -> Vec<usize> {
        events_of(UNDO, t)
            .iter()
            .copied()
            .filter(|&i| {
                matches!(
                    &ev[i].kind,
                    Kind::Ack {
                        outcome: Outcome::Succeeded,
                        answer: Answer::Ok(_) | Answer::Unknown(_),
                        ..
                    }
                )
            })
            .collect()
    };
    let steps: BTreeSet<&str> = finals
        .keys()
        .filter(|(s, _)| s == STEP)
        .map(|(_, t)| t.as_str())
        .collect();
    for tx in steps {
        counts.steps += 1;
        let [c1, c2] = chain(tx);
        let mut lines = events_of(STEP, tx);
        for c in [&c1, &c2] {
            lines.extend(events_of(UNDO, c));
        }
        lines.sort_unstable();
        if lines.len() > 40 {
            lines.drain(..lines.len() - 40);
        }
        let mut v = |kind: &'static str, detail: String| {
            out.push(Violation {
                kind,
                subject: format!("{STEP}/{tx}: {detail}"),
                lines: lines.clone(),
            })
        };
        let step = status(finals.get(&(STEP.to_string(), tx.to_string())));
        let (d1, d2) = (deliveries(&c1), deliveries(&c2));
        counts.deliveries += d1.len() + d2.len();
        let f1 = finals.get(&(UNDO.to_string(), c1.clone()));
        let f2 = finals.get(&(UNDO.to_string(), c2.clone()));
        if step != Some(pb::RetryStatus::Dead) {
            let ran = !d1.is_empty() || !d2.is_empty() || !not_found(f1) || !not_found(f2);
            if ran {
                v(
                    "compensation of a step that did not die",
                    format!("step {step:?}; {c1}: {f1:?}, {c2}: {f2:?}"),
                );
            }
            continue;
        }
        counts.dead += 1;
        if raced(ev, &events_of(STEP, tx)) {
            counts.dead_over_success += 1;
        }
        let (s1, s2) = (status(f1), status(f2));
        let letter = |c: &str| letters.contains_key(&(UNDO.to_string(), c.to_string()));
        match (s1, s2) {
            (Some(pb::RetryStatus::Succeeded), Some(pb::RetryStatus::Succeeded)) => {
                counts.completed += 1
            }
            (Some(pb::RetryStatus::Dead), _) if not_found(f2) && letter(&c1) => counts.stopped += 1,
            (Some(pb::RetryStatus::Succeeded), Some(pb::RetryStatus::Dead)) if letter(&c2) => {
                counts.stopped += 1
            }
            _ => v(
                "chain not run to its end",
                format!("{c1}: {f1:?}; {c2}: {f2:?}"),
            ),
        }
        // In order: the step died (a failing ack, or at least a delivery) before the first
        // compensation went out, which went SUCCEEDED before the second went out.
        let step_events = events_of(STEP, tx);
        let died_by = step_events
            .iter()
            .filter_map(|&i| match &ev[i].kind {
                Kind::Ack {
                    outcome: Outcome::Failed | Outcome::Retry | Outcome::RetryAfter,
                    answer: Answer::Ok(_) | Answer::Unknown(_),
                    ..
                } => Some(ev[i].start_ms),
                _ => None,
            })
            .min()
            .or_else(|| {
                step_events
                    .iter()
                    .filter(|&&i| matches!(ev[i].kind, Kind::Delivery { .. }))
                    .map(|&i| ev[i].end_ms)
                    .min()
            });
        if let (Some(&first), Some(bound)) = (d1.first(), died_by) {
            if ev[first].end_ms < bound - SLACK_MS {
                v(
                    "compensation before its step died",
                    format!("{c1} delivered (#{first}) before the step's first failing answer"),
                );
            }
        }
        if let Some(&first) = d2.first() {
            let ok = successes(&c1)
                .iter()
                .any(|&a| ev[a].start_ms <= ev[first].end_ms + SLACK_MS);
            if !ok {
                v(
                    "compensation out of order",
                    format!("{c2} delivered (#{first}) before {c1} was acknowledged SUCCEEDED"),
                );
            }
        }
        for (c, d) in [(&c1, &d1), (&c2, &d2)] {
            let acked = successes(c)
                .into_iter()
                .filter(|&a| {
                    matches!(
                        &ev[a].kind,
                        Kind::Ack {
                            answer: Answer::Ok(_),
                            ..
                        }
                    )
                })
                .map(|a| ev[a].end_ms)
                .min();
            if let Some(acked) = acked {
                counts.after_success += d.iter().filter(|&&i| ev[i].start_ms > acked).count();
            }
        }
    }
    (out, counts)
}

/// Whether two deliveries of one attempt of a step were answered SUCCEEDED and with an
/// outcome that may have ended it (FAILED, RETRY), both possibly stored.
fn raced(ev: &[Event], step_events: &[usize]) -> bool {
    let mut by_attempt: HashMap<u32, (bool, bool)> = HashMap::new();
    for &i in step_events {
        if let Kind::Ack {
            attempt,
            outcome,
            answer: Answer::Ok(_) | Answer::Unknown(_),
            ..
        } = &ev[i].kind
        {
            let e = by_attempt.entry(*attempt).or_default();
            match outcome {
                Outcome::Succeeded => e.0 = true,
                Outcome::Failed | Outcome::Retry | Outcome::RetryAfter => e.1 = true,
                _ => {}
            }
        }
    }
    by_attempt.values().any(|&(ok, failed)| ok && failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::history::{AckOk, EnqueueOk};

    fn at(ms: i64, kind: Kind) -> Event {
        Event {
            start_ms: ms,
            end_ms: ms + 10,
            kind,
        }
    }
    fn delivery(ms: i64, service: &str, tx: &str) -> Event {
        at(
            ms,
            Kind::Delivery {
                node: 0,
                service: service.into(),
                tx: tx.into(),
                delivery_id: format!("{tx}@{ms}"),
                attempt: 1,
                due_ms: ms,
                deadline_ms: ms + 10_000,
            },
        )
    }
    fn ack(ms: i64, service: &str, tx: &str, delivery: usize, outcome: Outcome) -> Event {
        at(
            ms,
            Kind::Ack {
                node: 0,
                service: service.into(),
                tx: tx.into(),
                delivery_id: String::new(),
                delivery,
                attempt: 1,
                outcome,
                retry_after_ms: None,
                error: String::new(),
                answer: Answer::Ok(AckOk {
                    next_due_ms: None,
                    dead_lettered: false,
                    snoozed: false,
                }),
            },
        )
    }
    fn retry(status: pb::RetryStatus) -> Answer<pb::Retry> {
        Answer::Ok(pb::Retry {
            status: status as i32,
            ..Default::default()
        })
    }
    fn missing() -> Answer<pb::Retry> {
        Answer::Refused("NotFound: no retry".into())
    }

    type Finals = BTreeMap<(String, String), Answer<pb::Retry>>;

    /// A dead step whose chain ran: the events, and the end states.
    fn run(c2_before_c1_succeeded: bool) -> (Vec<Event>, Finals) {
        let enq = at(
            0,
            Kind::Enqueue {
                node: 0,
                service: STEP.into(),
                tx: "s0".into(),
                asked: "delay=0ms".into(),
                batch: false,
                answer: Answer::Ok(EnqueueOk {
                    due_ms: 0,
                    generation: 1,
                    deduplicated: false,
                }),
            },
        );
        let mut ev = vec![enq, delivery(1_000, STEP, "s0")];
        ev.push(ack(1_100, STEP, "s0", 1, Outcome::Failed));
        ev.push(delivery(2_000, UNDO, "s0/c1"));
        if c2_before_c1_succeeded {
            ev.push(delivery(2_500, UNDO, "s0/c2"));
            ev.push(ack(3_500, UNDO, "s0/c1", 3, Outcome::Succeeded));
        } else {
            ev.push(ack(2_100, UNDO, "s0/c1", 3, Outcome::Succeeded));
            ev.push(delivery(3_000, UNDO, "s0/c2"));
        }
        ev.push(ack(4_000, UNDO, "s0/c2", 5, Outcome::Succeeded));
        let finals = BTreeMap::from([
            ((STEP.into(), "s0".into()), retry(pb::RetryStatus::Dead)),
            (
                (UNDO.into(), "s0/c1".into()),
                retry(pb::RetryStatus::Succeeded),
            ),
            (
                (UNDO.into(), "s0/c2".into()),
                retry(pb::RetryStatus::Succeeded),
            ),
        ]);
        (ev, finals)
    }

    #[test]
    fn a_chain_run_in_order_passes_and_each_broken_rule_is_found() {
        let letters = HashMap::from([((STEP.to_string(), "s0".to_string()), vec![])]);
        let (ev, finals) = run(false);
        let (v, counts) = check(&ev, &finals, &letters);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!((counts.dead, counts.completed), (1, 1));

        let (ev, finals) = run(true);
        let (v, _) = check(&ev, &finals, &letters);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind, "compensation out of order");

        // The second compensation never ran.
        let (ev, mut finals) = run(false);
        finals.insert((UNDO.into(), "s0/c2".into()), missing());
        let (v, _) = check(&ev, &finals, &letters);
        assert_eq!(v[0].kind, "chain not run to its end");

        // The first compensation died without its letter, or with it (the chain stops).
        let (ev, mut finals) = run(false);
        finals.insert((UNDO.into(), "s0/c1".into()), retry(pb::RetryStatus::Dead));
        finals.insert((UNDO.into(), "s0/c2".into()), missing());
        let (v, _) = check(&ev[..4], &finals, &letters);
        assert_eq!(v[0].kind, "chain not run to its end");
        let mut with_letter = letters.clone();
        with_letter.insert((UNDO.into(), "s0/c1".into()), vec!["FAILED".into()]);
        let (v, counts) = check(&ev[..4], &finals, &with_letter);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(counts.stopped, 1);

        // A step that succeeded runs no compensation.
        let (ev, mut finals) = run(false);
        finals.insert(
            (STEP.into(), "s0".into()),
            retry(pb::RetryStatus::Succeeded),
        );
        let (v, _) = check(&ev, &finals, &letters);
        assert_eq!(v[0].kind, "compensation of a step that did not die");

        // Two deliveries of the step's attempt answered FAILED and SUCCEEDED (one of them is
        // refused by the store, unless an answer was unknown): a DEAD end runs its chain
        // (counted), a SUCCEEDED end with its chain run is a violation.
        let (mut ev, finals) = run(false);
        ev.insert(2, delivery(1_050, STEP, "s0"));
        ev.insert(4, ack(1_150, STEP, "s0", 2, Outcome::Succeeded));
        let (v, counts) = check(&ev, &finals, &letters);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!((counts.dead, counts.dead_over_success), (1, 1));
        let mut finals = finals;
        finals.insert(
            (STEP.into(), "s0".into()),
            retry(pb::RetryStatus::Succeeded),
        );
        let (v, _) = check(&ev, &finals, &letters);
        assert_eq!(v[0].kind, "compensation of a step that did not die");

        // A compensation before the step's failing answer.
        let (mut ev, finals) = run(false);
        ev[3].start_ms = 100;
        ev[3].end_ms = 110;
        let (v, _) = check(&ev, &finals, &letters);
        assert_eq!(v[0].kind, "compensation before its step died");
    }
}
