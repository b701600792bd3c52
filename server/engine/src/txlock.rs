//! The per-transaction lock of one node: a read-decide-write of a transaction's state row
//! (enqueue, cancel, an ack, an expired delivery, a redrive or a purge) holds it, so two of
//! them on this node never interleave. It is local to the node and held only in memory.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

/// One lock per transaction whose state row this node is reading to decide a write: enqueue,
/// cancel, an ack, an expired delivery, a redrive or a purge. Two concurrent enqueues of one
/// transaction (a client retrying its call while the first is still in flight) would otherwise
/// race their pointer and state writes and could leave the state row naming the generation of
/// a pointer that the other overwrote: a retry nobody would deliver. A cancel racing an ack
/// could answer "cancelled" and then see the ack write the retry back as SCHEDULED. Entries
/// live only while someone holds or waits for them.
#[derive(Debug, Default)]
pub struct TxLocks(Mutex<LockMap>);

#[derive(Debug)]
struct LockMap {
    entries: HashMap<TxKey, Arc<tokio::sync::Mutex<()>>>,
    /// Size at which the next sweep runs: twice what the last sweep kept, so that a map full of
    /// live entries is not swept again on every call.
    sweep_at: usize,
}

impl Default for LockMap {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            sweep_at: TX_LOCKS_SWEEP_AT,
        }
    }
}

/// (service, transaction id).
type TxKey = (String, String);
const TX_LOCKS_SWEEP_AT: usize = 4096;

/// The lock of one transaction, held until dropped.
pub struct TxLock<'a> {
    locks: &'a TxLocks,
    key: TxKey,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl TxLocks {
    /// Waits for and holds the lock of one transaction. Not reentrant.
    pub async fn lock(&self, service: &str, transaction_id: &str) -> TxLock<'_> {
        let key = (service.to_string(), transaction_id.to_string());
        let m = {
            let mut map = self.0.lock().expect("tx locks");
            // A caller cancelled while waiting leaves its entry behind: sweep those once the
            // map grows past what concurrent enqueues alone explain.
            if map.entries.len() >= map.sweep_at {
                map.entries.retain(|_, m| Arc::strong_count(m) > 1);
                map.sweep_at = (2 * map.entries.len()).max(TX_LOCKS_SWEEP_AT);
            }
            map.entries.entry(key.clone()).or_default().clone()
        };
        TxLock {
            locks: self,
            key,
            guard: Some(m.lock_owned().await),
        }
    }
}

impl Drop for TxLock<'_> {
    fn drop(&mut self) {
        let mut map = self.locks.0.lock().expect("tx locks");
        self.guard.take();
        if map
            .entries
            .get(&self.key)
            .is_some_and(|m| Arc::strong_count(m) == 1)
        {
            map.entries.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_transaction_lock_serialises_its_holders_and_is_forgotten_when_free() {
        let locks = Arc::new(TxLocks::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = locks.lock("s", "t").await;
        let waiter = {
            let (locks, order) = (locks.clone(), order.clone());
            tokio::spawn(async move {
                let _l = locks.lock("s", "t").await;
                order.lock().unwrap().push("second");
            })
        };
        // Another transaction is not held up.
        drop(locks.lock("s", "u").await);
        tokio::time::sleep(Duration::from_millis(20)).await;
        order.lock().unwrap().push("first");
        drop(first);
        waiter.await.unwrap();
        assert_eq!(*order.lock().unwrap(), vec!["first", "second"]);
        assert!(locks.0.lock().unwrap().entries.is_empty());
    }
}
