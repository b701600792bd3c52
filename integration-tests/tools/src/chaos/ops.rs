//! The workload's operations, from the seed alone: enqueues (single and batched), cancels,
//! actions on one retry (ActOnRetries) and listings (ListRetries), drawn one at a time by
//! [`OpGen`] (the chaos plan and the soak's steady load both draw them; `saga` and `hold` plan
//! operations of their own).

use std::collections::{BTreeMap, BTreeSet};

use rand::{rngs::StdRng, Rng};
use rebound_proto::v1 as pb;

use super::SERVICES;

#[derive(Clone, Debug)]
pub enum Sched {
    Delay(i64),
    DueIn(i64),
}

#[derive(Clone, Debug)]
pub enum Op {
    Enqueue {
        node: usize,
        items: Vec<(String, String, Sched)>,
        batch: bool,
    },
    Cancel {
        node: usize,
        service: String,
        tx: String,
    },
    /// ActOnRetries of the one retry `tx` (`transaction_ids = [tx]`, the selection its
    /// service's): run now, reschedule (due `due_in_ms` after the call, 0-3,000 ms; 0 for
    /// the other actions), cancel or dead-letter. Streamed services of [`SERVICES`] only.
    Act {
        node: usize,
        service: String,
        tx: String,
        action: pb::RetryAction,
        due_in_ms: i64,
    },
    /// ListRetries of a service's scheduled retries, a few pages of 100.
    List { node: usize, service: String },
}

/// The workload's operations, drawn one at a time from a seeded generator: enqueues (single
/// and batched) of new ids and of ids used recently, cancels, actions on a recent id of a
/// streamed service, and listings. The chaos plan draws a fixed number of them spread over
/// its run; the soak draws them at a steady rate.
pub struct OpGen {
    nodes: usize,
    /// A pushed service new ids go to a quarter of the time.
    pushed: Option<&'static str>,
    /// The ids used last, which re-enqueues and cancels pick from.
    recent: Vec<(String, String)>,
    next_id: u32,
}

impl OpGen {
    pub fn new(nodes: usize) -> OpGen {
        OpGen {
            nodes,
            pushed: None,
            recent: Vec::new(),
            next_id: 0,
        }
    }

    /// New ids go to `service` (which has a push target) a quarter of the time.
    pub fn with_pushed(mut self, service: &'static str) -> OpGen {
        self.pushed = Some(service);
        self
    }

    /// A new id (45 %) or one of the last 40.
    fn pick(&mut self, rng: &mut StdRng) -> (String, String) {
        if self.recent.is_empty() || rng.random_bool(0.45) {
            self.next_id += 1;
            let svc = match self.pushed {
                Some(p) if rng.random_bool(0.25) => p,
                _ if rng.random_bool(0.7) => SERVICES[0],
                _ => SERVICES[1],
            };
            let id = (svc.to_string(), format!("tx-{:05}", self.next_id));
            self.recent.push(id.clone());
            if self.recent.len() > 40 {
                self.recent.remove(0);
            }
            id
        } else {
            self.recent[rng.random_range(0..self.recent.len())].clone()
        }
    }

    fn sched(rng: &mut StdRng) -> Sched {
        if rng.random_bool(0.8) {
            Sched::Delay(rng.random_range(0..=3_000))
        } else {
            Sched::DueIn(rng.random_range(0..=3_000))
        }
    }

    /// One of the last ids of a streamed service of [`SERVICES`] (None: there is none).
    fn pick_streamed(&self, rng: &mut StdRng) -> Option<(String, String)> {
        let streamed: Vec<&(String, String)> = self
            .recent
            .iter()
            .filter(|(s, _)| SERVICES.contains(&s.as_str()))
            .collect();
        if streamed.is_empty() {
            return None;
        }
        Some(streamed[rng.random_range(0..streamed.len())].clone())
    }

    /// The action of an [`Op::Act`]: run now (35 %), reschedule (35 %), cancel (15 %) or
    /// dead-letter (15 %), and for a reschedule its due time (0-3,000 ms after the call).
    fn action(rng: &mut StdRng) -> (pb::RetryAction, i64) {
        let r: f64 = rng.random();
        if r < 0.35 {
            (pb::RetryAction::RunNow, 0)
        } else if r < 0.70 {
            (pb::RetryAction::Reschedule, rng.random_range(0..=3_000))
        } else if r < 0.85 {
            (pb::RetryAction::Cancel, 0)
        } else {
            (pb::RetryAction::DeadLetter, 0)
        }
    }

    /// The next operation, on a random node: an enqueue (62 %), an action on a recent id of a
    /// streamed service (4 %; an enqueue while there is none), a listing of a streamed
    /// service (2 %), a batch of 2-5 enqueues (14 %) or a cancel (18 %).
    pub fn next(&mut self, rng: &mut StdRng) -> Op {
        let node = rng.random_range(0..self.nodes);
        let r: f64 = rng.random();
        if r < 0.66 {
            if r >= 0.62 {
                if let Some((service, tx)) = self.pick_streamed(rng) {
                    let (action, due_in_ms) = Self::action(rng);
                    return Op::Act {
                        node,
                        service,
                        tx,
                        action,
                        due_in_ms,
                    };
                }
            }
            let id = self.pick(rng);
            Op::Enqueue {
                node,
                items: vec![(id.0, id.1, Self::sched(rng))],
                batch: false,
            }
        } else if r < 0.68 {
            Op::List {
                node,
                service: SERVICES[rng.random_range(0..SERVICES.len())].to_string(),
            }
        } else if r < 0.82 {
            let n = rng.random_range(2..=5);
            let mut items: Vec<(String, String, Sched)> = Vec::new();
            for _ in 0..n {
                let id = self.pick(rng);
                if !items.iter().any(|(s, t, _)| *s == id.0 && *t == id.1) {
                    items.push((id.0, id.1, Self::sched(rng)));
                }
            }
            Op::Enqueue {
                node,
                items,
                batch: true,
            }
        } else {
            let id = self.pick(rng);
            Op::Cancel {
                node,
                service: id.0,
                tx: id.1,
            }
        }
    }
}

impl Op {
    /// Counts the operation by kind and adds the transactions it touches.
    pub fn count(
        &self,
        counts: &mut BTreeMap<&'static str, usize>,
        touched: &mut BTreeSet<(String, String)>,
    ) {
        match self {
            Op::Enqueue { items, batch, .. } => {
                *counts
                    .entry(if *batch { "enqueue_batch" } else { "enqueue" })
                    .or_default() += 1;
                for (s, t, _) in items {
                    touched.insert((s.clone(), t.clone()));
                }
            }
            Op::Cancel { service, tx, .. } => {
                *counts.entry("cancel").or_default() += 1;
                touched.insert((service.clone(), tx.clone()));
            }
            Op::Act { service, tx, .. } => {
                *counts.entry("act").or_default() += 1;
                touched.insert((service.clone(), tx.clone()));
            }
            Op::List { .. } => {
                *counts.entry("list").or_default() += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn actions_and_listings_are_drawn_for_the_streamed_services_only() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut draw = OpGen::new(3).with_pushed("pushed");
        let (mut acts, mut lists) = (0, 0);
        let mut actions: BTreeMap<i32, usize> = BTreeMap::new();
        for _ in 0..20_000 {
            match draw.next(&mut rng) {
                Op::Act {
                    service,
                    action,
                    due_in_ms,
                    ..
                } => {
                    assert!(SERVICES.contains(&service.as_str()), "{service}");
                    assert!((0..=3_000).contains(&due_in_ms));
                    if action != pb::RetryAction::Reschedule {
                        assert_eq!(due_in_ms, 0);
                    }
                    acts += 1;
                    *actions.entry(action as i32).or_default() += 1;
                }
                Op::List { service, .. } => {
                    assert!(SERVICES.contains(&service.as_str()), "{service}");
                    lists += 1;
                }
                _ => {}
            }
        }
        // About 4 % and 2 % of 20,000.
        assert!((600..1_000).contains(&acts), "{acts}");
        assert!((300..500).contains(&lists), "{lists}");
        assert_eq!(actions.len(), 4, "{actions:?}");
    }
}
