//! Request coalescing: many concurrent callers, few Cassandra requests.
//!
//! Each key (a bucket partition, a service, or one shared queue) runs at most `parallel`
//! flushes at once. A caller whose key has a free flush slot goes out at once, alone; callers
//! arriving while every slot is busy queue, and the next free slot carries as many of them as
//! the limits allow in one request. At low load nothing waits; under load the number of
//! requests per item falls as the load grows, and every caller still returns only once its own
//! item is done (a write is durable, a read has its row), so no ordering the caller relies on
//! changes.
//!
//! A [`Group`] is only the queues. The caller that finds its key's slot free is handed the
//! slot and writes the batches in its own code, in a task the group owns (`tasks`), so a
//! cancelled caller cannot stall its key; and a path that batches (the writer's group commit,
//! the Cassandra store's state rows) reads top to bottom in one place, without a callback.

use std::{
    collections::{HashMap, VecDeque},
    hash::Hash,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

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

/// The queues of a coalescer: a caller joins a key's queue and, when the key had a free flush
/// slot, is handed that slot and writes the queued items, batch after batch
/// (`Slot::next_batch`), in its own code.
pub struct Group<K, I, O, E> {
    limits: Limits,
    queues: Mutex<HashMap<K, Queue<I, O, E>>>,
    flushes: AtomicU64,
    items: AtomicU64,
    /// The running flushes.
    tasks: Tasks,
}

/// What joining a queue gives a caller: the answer to its item, and the key's flush slot when
/// it was free. Whoever holds the slot must carry it (`Slot::next_batch` until `None`): the items
/// queued behind it wait for it.
pub struct Joined<K, I, O, E>
where
    K: Hash + Eq,
{
    pub answer: Answer<O, E>,
    pub slot: Option<Slot<K, I, O, E>>,
}

/// The answer to one queued item, once the batch that carries it is written.
pub struct Answer<O, E>(oneshot::Receiver<Result<O, E>>);

impl<O, E: From<Broken>> Answer<O, E> {
    pub async fn get(self) -> Result<O, E> {
        self.0.await.unwrap_or_else(|_| Err(Broken::Dropped.into()))
    }
}

/// One flush slot of a key, held by the code that writes its batches. Dropped before its queue
/// ran empty (a task aborted at shutdown), it fails the items still queued with
/// `Broken::Dropped` rather than leave them waiting.
pub struct Slot<K, I, O, E>
where
    K: Hash + Eq,
{
    group: Arc<Group<K, I, O, E>>,
    key: K,
    released: bool,
}

/// One batch of a slot: the items, in queue order, and the callers waiting for them.
pub struct Batch<I, O, E> {
    pub items: Vec<I>,
    senders: Vec<oneshot::Sender<Result<O, E>>>,
}

impl<K, I, O, E> std::fmt::Debug for Group<K, I, O, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("limits", &self.limits)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl<K, I, O, E> Group<K, I, O, E> {
    pub fn new(limits: Limits) -> Arc<Self> {
        assert!(limits.max_items > 0 && limits.parallel > 0);
        Arc::new(Self {
            limits,
            queues: Mutex::default(),
            flushes: AtomicU64::new(0),
            items: AtomicU64::new(0),
            tasks: Tasks::new("coalescer"),
        })
    }

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

    /// The owner of the tasks that carry slots, for shutdown.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }
}

impl<K, I, O, E> Group<K, I, O, E>
where
    K: Hash + Eq + Clone,
{
    /// Queues `item` under `key`; hands the caller the key's flush slot if one was free.
    pub fn join(self: &Arc<Self>, key: K, item: I, weight: usize) -> Joined<K, I, O, E> {
        let (tx, rx) = oneshot::channel();
        let mut queues = self.queues.lock().expect("coalescer queues");
        let q = queues.entry(key.clone()).or_insert_with(|| Queue {
            running: 0,
            waiting: VecDeque::new(),
        });
        q.waiting.push_back((item, weight, tx));
        let slot = (q.running < self.limits.parallel).then(|| {
            q.running += 1;
            Slot {
                group: self.clone(),
                key,
                released: false,
            }
        });
        Joined {
            answer: Answer(rx),
            slot,
        }
    }
}

impl<K, I, O, E> Slot<K, I, O, E>
where
    K: Hash + Eq,
{
    /// The next batch of the key's queue within the limits, or None once the queue is empty
    /// (the slot is then released).
    pub fn next_batch(&mut self) -> Option<Batch<I, O, E>> {
        if self.released {
            return None;
        }
        let limits = self.group.limits;
        let mut queues = self.group.queues.lock().expect("coalescer queues");
        let q = queues
            .get_mut(&self.key)
            .expect("a running key has a queue");
        if q.waiting.is_empty() {
            q.running -= 1;
            if q.running == 0 {
                queues.remove(&self.key);
            }
            self.released = true;
            return None;
        }
        let mut items = Vec::new();
        let mut senders = Vec::new();
        let mut weight = 0;
        while let Some((_, w, _)) = q.waiting.front() {
            if !items.is_empty()
                && (items.len() >= limits.max_items || weight + *w > limits.max_weight)
            {
                break;
            }
            weight += *w;
            let (item, _, tx) = q.waiting.pop_front().expect("front exists");
            items.push(item);
            senders.push(tx);
        }
        self.group.record(items.len());
        Some(Batch { items, senders })
    }
}

impl<K, I, O, E> Drop for Slot<K, I, O, E>
where
    K: Hash + Eq,
{
    fn drop(&mut self) {
        if self.released {
            return;
        }
        // Not carried to the end: release the slot, and the queued items' senders drop, so
        // their callers get `Broken::Dropped` instead of waiting for a flush that never comes.
        let Ok(mut queues) = self.group.queues.lock() else {
            return;
        };
        if let Some(q) = queues.get_mut(&self.key) {
            q.running -= 1;
            if q.running == 0 {
                queues.remove(&self.key);
            }
        }
    }
}

impl<I, O, E> Batch<I, O, E>
where
    E: From<Broken> + Clone,
{
    /// Answers the batch's callers: one output per item, in order, or one error for all.
    pub fn answer(self, result: Result<Vec<O>, E>) {
        let n = self.senders.len();
        match result {
            Ok(outputs) if outputs.len() == n => {
                for (tx, out) in self.senders.into_iter().zip(outputs) {
                    let _ = tx.send(Ok(out));
                }
            }
            Ok(outputs) => {
                let e = E::from(Broken::Miscounted {
                    got: outputs.len(),
                    items: n,
                });
                for tx in self.senders {
                    let _ = tx.send(Err(e.clone()));
                }
            }
            Err(e) => {
                for tx in self.senders {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
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

    /// A group whose batches double their items after 20 ms (and fail on 999), logged; its
    /// `submit` is how a caller uses a group: join, carry the slot if handed it, wait.
    struct Summing {
        group: Arc<Group<u8, u32, u32, TestError>>,
        log: Arc<Mutex<Vec<Vec<u32>>>>,
    }

    impl Summing {
        async fn submit(&self, key: u8, item: u32, weight: usize) -> Result<u32, TestError> {
            let joined = self.group.join(key, item, weight);
            if let Some(mut slot) = joined.slot {
                let log = self.log.clone();
                let carry = async move {
                    while let Some(mut batch) = slot.next_batch() {
                        let items = std::mem::take(&mut batch.items);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        if items.contains(&999) {
                            batch.answer(Err(TestError::Unavailable("boom".into())));
                            continue;
                        }
                        log.lock().unwrap().push(items.clone());
                        batch.answer(Ok(items.iter().map(|i| i * 2).collect()));
                    }
                };
                if let Err(carry) = self.group.tasks().spawn(carry) {
                    carry.await;
                }
            }
            joined.answer.get().await
        }

        fn counts(&self) -> Counts {
            self.group.counts()
        }
    }

    fn summing(limits: Limits, log: Arc<Mutex<Vec<Vec<u32>>>>) -> Summing {
        Summing {
            group: Group::new(limits),
            log,
        }
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
        assert!(c.group.queues.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_group_hands_its_slot_to_the_first_caller_who_writes_every_queued_batch() {
        let g: Arc<Group<u8, u32, u32, TestError>> = Group::new(Limits {
            max_items: 2,
            max_weight: 1000,
            parallel: 1,
        });
        let first = g.join(0, 1, 1);
        let second = g.join(0, 2, 1);
        let third = g.join(0, 3, 1);
        assert!(second.slot.is_none() && third.slot.is_none());
        let mut slot = first.slot.expect("the first caller holds the slot");
        let mut seen = Vec::new();
        while let Some(mut batch) = slot.next_batch() {
            let items = std::mem::take(&mut batch.items);
            seen.push(items.clone());
            batch.answer(Ok(items.iter().map(|i| i * 10).collect()));
        }
        assert_eq!(seen, vec![vec![1, 2], vec![3]]);
        assert_eq!(first.answer.get().await, Ok(10));
        assert_eq!(second.answer.get().await, Ok(20));
        assert_eq!(third.answer.get().await, Ok(30));
        assert_eq!(
            g.counts(),
            Counts {
                flushes: 2,
                items: 3
            }
        );
        // Released: the next caller gets the slot again.
        assert!(g.join(0, 4, 1).slot.is_some());
    }

    #[tokio::test]
    async fn a_slot_dropped_before_its_queue_is_empty_fails_the_waiting_items() {
        let g: Arc<Group<u8, u32, u32, TestError>> = Group::new(Limits {
            max_items: 1,
            max_weight: 1000,
            parallel: 1,
        });
        let first = g.join(0, 1, 1);
        let second = g.join(0, 2, 1);
        let mut slot = first.slot.expect("slot");
        let batch = slot.next_batch().expect("one batch");
        batch.answer(Ok(vec![7]));
        drop(slot);
        assert_eq!(first.answer.get().await, Ok(7));
        assert_eq!(
            second.answer.get().await,
            Err(TestError::Broken(Broken::Dropped))
        );
        assert!(g.queues.lock().unwrap().is_empty());
        assert!(g.join(0, 3, 1).slot.is_some());
    }
}
