//! The workload's operations, from the seed alone: enqueues (single and batched) and cancels,
//! drawn one at a time by [`OpGen`] (the chaos plan and the soak's steady load both draw
//! them; `saga` and `hold` plan operations of their own).

use std::collections::{BTreeMap, BTreeSet};

use rand::{rngs::StdRng, Rng};

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
}

/// The workload's operations, drawn one at a time from a seeded generator: enqueues (single
/// and batched) of new ids and of ids used recently, and cancels. The chaos plan draws a fixed
/// number of them spread over its run; the soak draws them at a steady rate.
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

    /// The next operation: an enqueue (68 %), a batch of 2-5 (14 %) or a cancel (18 %), on a
    /// random node.
    pub fn next(&mut self, rng: &mut StdRng) -> Op {
        let node = rng.random_range(0..self.nodes);
        let r: f64 = rng.random();
        if r < 0.68 {
            let id = self.pick(rng);
            Op::Enqueue {
                node,
                items: vec![(id.0, id.1, Self::sched(rng))],
                batch: false,
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
        }
    }
}
