//! Request coalescing: many concurrent callers, few Cassandra requests.
//!
//! Each key (a bucket partition, a service, or one shared queue) runs at most `parallel`
//! flushes at once. A caller whose key has a free flush slot goes out at once, alone; callers
//! arriving while every slot is busy queue, and the next free slot carries as many of them as
//! the limits allow in one request. At low load nothing waits; under load the number of
//! requests per item falls as the load grows, and every caller still returns only once its own
//! item is done (a write is durable, a read has its row), so no ordering the caller relies on
//! changes. Flushes run in spawned tasks, which the coalescer owns (`tasks`): a cancelled caller
//! cannot stall its key.

use std::{
    collections::{HashMap, VecDeque},
    hash::Hash,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use crate::tasks::Tasks;

/// A flush that failed in the coalescer itself, not in the store: the caller's error type
/// `E` is built from it (`E: From<Broken>`), so this module knows no caller's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Broken {
    #[error("coalesced flush was dropped")]
    Dropped,
    #[error("coalesced flush returned {got} results for {items} items")]
    Miscounted { got: usize, items: usize },
}

/// How much one flush may carry, and how many flushes of one key may run at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_items: usize,
    /// Sum of the items' weights (an estimate of their bytes); an item heavier than this goes
    /// out alone.
    pub max_weight: usize,
    pub parallel: usize,
}

/// Runs one flush: the items of one key, in order; returns one output per item, in order, or
/// one error for all of them.
pub type Flush<K, I, O, E> =
    Arc<dyn Fn(K, Vec<I>) -> BoxFuture<'static, Result<Vec<O>, E>> + Send + Sync>;

type Waiter<I, O, E> = (I, usize, oneshot::Sender<Result<O, E>>);

struct Queue<I, O, E> {
    running: usize,
    waiting: VecDeque<Waiter<I, O, E>>,
}

/// Flushes issued and items they carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub flushes: u64,
    pub items: u64,
}

pub struct Coalescer<K, I, O, E> {
    limits: Limits,
    flush: Flush<K, I, O, E>,
    queues: Mutex<HashMap<K, Queue<I, O, E>>>,
    flushes: AtomicU64,
    items: AtomicU64,
    /// The running flushes.
    tasks: Tasks,
}

impl<K, I, O, E> std::fmt::Debug for Coalescer<K, I, O, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("limits", &self.limits)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl<K, I, O, E> Coalescer<K, I, O, E> {
    /// Counts one request that a caller batching its own items made for the same kind of
    /// rows, so that the counts cover every request.
    pub fn record(&self, items: usize) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.items.fetch_add(items as u64, Ordering::Relaxed);
    }

    pub fn counts(&self) -> Counts {
        Counts {
            flushes: self.flushes.load(Ordering::Relaxed),
            items: self.items.load(Ordering::Relaxed),
        }
    }

    /// The owner of the flush tasks, for shutdown.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }
}

impl<K, I, O, E> Coalescer<K, I, O, E>
where
    K: Hash + Eq + Clone + Send + 'static,
    I: Send + 'static,
    O: Send + 'static,
    E: From<Broken> + Clone + Send + 'static,
{
    pub fn new(limits: Limits, flush: Flush<K, I, O, E>) -> Arc<Self> {
        assert!(limits.max_items > 0 && limits.parallel > 0);
        Arc::new(Self {
            limits,
            flush,
            queues: Mutex::default(),
            flushes: AtomicU64::new(0),
            items: AtomicU64::new(0),
            tasks: Tasks::new("coalescer"),
        })
    }

    /// Queues `item` under `key` and waits for the flush that carries it.
    pub async fn submit(self: &Arc<Self>, key: K, item: I, weight: usize) -> Result<O, E> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut queues = self.queues.lock().expect("coalescer queues");
            let q = queues.entry(key.clone()).or_insert_with(|| Queue {
                running: 0,
                waiting: VecDeque::new(),
            });
            q.waiting.push_back((item, weight, tx));
            let start = q.running < self.limits.parallel;
            if start {
                q.running += 1;
            }
            start
        };
        if start {
            let this = self.clone();
            // Once shut down, the caller carries its own flush.
            if let Err(flush) = self.tasks.spawn(async move { this.run(key).await }) {
                flush.await;
            }
        }
        rx.await.unwrap_or_else(|_| Err(Broken::Dropped.into()))
    }

    /// One flush slot of `key`: carries queued items until none is left.
    async fn run(self: Arc<Self>, key: K) {
        loop {
            let Some(batch) = self.take(&key) else {
                return;
            };
            let (items, senders): (Vec<I>, Vec<_>) =
                batch.into_iter().map(|(item, _, tx)| (item, tx)).unzip();
            let n = items.len();
            let result = (self.flush)(key.clone(), items).await;
            self.flushes.fetch_add(1, Ordering::Relaxed);
            self.items.fetch_add(n as u64, Ordering::Relaxed);
            match result {
                Ok(outputs) if outputs.len() == n => {
                    for (tx, out) in senders.into_iter().zip(outputs) {
                        let _ = tx.send(Ok(out));
                    }
                }
                Ok(outputs) => {
                    let e = E::from(Broken::Miscounted {
                        got: outputs.len(),
                        items: n,
                    });
                    for tx in senders {
                        let _ = tx.send(Err(e.clone()));
                    }
                }
                Err(e) => {
                    for tx in senders {
                        let _ = tx.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// The next batch of `key` within the limits, or None (and the slot released) when its
    /// queue is empty.
    fn take(&self, key: &K) -> Option<Vec<Waiter<I, O, E>>> {
        let mut queues = self.queues.lock().expect("coalescer queues");
        let q = queues.get_mut(key).expect("a running key has a queue");
        if q.waiting.is_empty() {
            q.running -= 1;
            if q.running == 0 {
                queues.remove(key);
            }
            return None;
        }
        let mut batch = Vec::new();
        let mut weight = 0;
        while let Some((_, w, _)) = q.waiting.front() {
            if !batch.is_empty()
                && (batch.len() >= self.limits.max_items || weight + *w > self.limits.max_weight)
            {
                break;
            }
            weight += *w;
            batch.push(q.waiting.pop_front().expect("front exists"));
        }
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The error of the test flushes: the coalescer's own, or the flush's.
    #[derive(Debug, Clone, PartialEq)]
    enum TestError {
        Broken(Broken),
        Unavailable(String),
    }

    impl From<Broken> for TestError {
        fn from(b: Broken) -> Self {
            TestError::Broken(b)
        }
    }

    fn summing(
        limits: Limits,
        log: Arc<Mutex<Vec<Vec<u32>>>>,
    ) -> Arc<Coalescer<u8, u32, u32, TestError>> {
        Coalescer::new(
            limits,
            Arc::new(move |_key, items: Vec<u32>| {
                let log = log.clone();
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    if items.contains(&999) {
                        return Err(TestError::Unavailable("boom".into()));
                    }
                    log.lock().unwrap().push(items.clone());
                    Ok(items.iter().map(|i| i * 2).collect())
                })
            }),
        )
    }

    #[tokio::test]
    async fn concurrent_items_share_flushes_and_each_gets_its_own_answer() {
        let log = Arc::default();
        let c = summing(
            Limits {
                max_items: 8,
                max_weight: 1000,
                parallel: 1,
            },
            Arc::clone(&log),
        );
        let answers = futures::future::join_all((0..40u32).map(|i| c.submit(0, i, 1))).await;
        for (i, a) in answers.into_iter().enumerate() {
            assert_eq!(a.unwrap(), 2 * i as u32);
        }
        let log = log.lock().unwrap();
        // Batches of at most 8, in submission order.
        assert!(log.iter().all(|b| b.len() <= 8));
        assert_eq!(log.concat(), (0..40).collect::<Vec<_>>());
        assert_eq!(c.counts().items, 40);
        assert_eq!(c.counts().flushes, log.len() as u64);
        assert!(log.len() <= 6, "40 items in {} flushes", log.len());
    }

    #[tokio::test]
    async fn weight_caps_a_flush_and_a_heavy_item_goes_alone() {
        let log = Arc::default();
        let c = summing(
            Limits {
                max_items: 100,
                max_weight: 10,
                parallel: 1,
            },
            Arc::clone(&log),
        );
        // All seven are queued before the (current-thread) runtime runs the first flush.
        let weights = [1, 4, 4, 4, 50, 3, 3];
        let answers = futures::future::join_all(
            weights
                .iter()
                .enumerate()
                .map(|(i, w)| c.submit(0, i as u32, *w)),
        )
        .await;
        assert!(answers.iter().all(Result::is_ok));
        let log = log.lock().unwrap();
        assert_eq!(*log, vec![vec![0, 1, 2], vec![3], vec![4], vec![5, 6]]);
    }

    #[tokio::test]
    async fn keys_and_slots_run_in_parallel_and_errors_reach_every_item_of_their_flush() {
        let log = Arc::default();
        let c = summing(
            Limits {
                max_items: 4,
                max_weight: 1000,
                parallel: 2,
            },
            Arc::clone(&log),
        );
        let (a, b, bad) = tokio::join!(c.submit(1, 1, 1), c.submit(2, 2, 1), c.submit(3, 999, 1));
        assert_eq!((a.unwrap(), b.unwrap()), (2, 4));
        assert!(matches!(bad, Err(TestError::Unavailable(_))));
        // Every queue is gone once idle.
        assert!(c.queues.lock().unwrap().is_empty());
    }
}
