//! A layer over any store: single state-row reads and writes made at the same moment go out
//! together, through the contract's batch methods. While a read of a service is in flight,
//! later reads of that service queue and go out as one `get_states`; while state writes are
//! in flight, later ones queue and go out as one `put_states` (or `settle_states` for the
//! settles). At low load nothing waits; under load a call pays a share of a request instead
//! of one of its own. Every caller still returns only once its own row is read or durable,
//! so no write order changes. The limits are the store's own (the Cassandra store's follow
//! Cassandra's batch warnings); every other call passes straight through.

use std::{collections::HashSet, sync::Arc};

use async_trait::async_trait;
use futures::future::BoxFuture;
use rebound_common::{
    coalesce::{Counts, Group, Limits},
    tasks::Tasks,
};

use crate::{
    FinishedAt, FinishedPage, StateStore, Status, StoreError, StoreLifecycle, StoreResult, TxState,
};

/// How the layer batches: the limits of the state-row reads (per service) and writes (per
/// node, plain and settles apart), and what a row weighs against the writes' `max_weight`.
#[derive(Debug, Clone, Copy)]
pub struct CoalesceOptions {
    pub reads: Limits,
    pub writes: Limits,
    pub settles: Limits,
    pub write_weight: fn(&TxState) -> usize,
}

type Reads = Group<String, String, Option<TxState>, StoreError>;
type Writes<R> = Group<(), R, StoreResult<()>, StoreError>;
/// A batch method of the store (`put_states`, `settle_states`): rows of a TTL type `T`.
type BatchWrite<S, T> = fn(Arc<S>, Vec<(TxState, T)>) -> BoxFuture<'static, Vec<StoreResult<()>>>;

/// `inner`, with its single state-row reads and writes coalesced.
#[derive(Debug)]
pub struct Coalesced<S: ?Sized> {
    inner: Arc<S>,
    opts: CoalesceOptions,
    reads: Arc<Reads>,
    puts: Arc<Writes<(TxState, Option<u32>)>>,
    settles: Arc<Writes<(TxState, u32)>>,
}

impl<S: ?Sized> Coalesced<S> {
    pub fn new(inner: Arc<S>, opts: CoalesceOptions) -> Self {
        Self {
            inner,
            reads: Group::new(opts.reads),
            puts: Group::new(opts.writes),
            settles: Group::new(opts.settles),
            opts,
        }
    }

    /// The store underneath.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// Every call the layer does not coalesce goes straight to the store.
    pub(crate) async fn call<T>(
        &self,
        _method: &'static str,
        fut: impl std::future::Future<Output = T>,
    ) -> T {
        fut.await
    }
}

/// Splits a batch into rounds in which each transaction appears once, in queue order: the
/// batch methods take a transaction once, and two writes of one transaction queued at the
/// same moment go one after the other, as two calls would.
fn rounds<R>(rows: Vec<R>, key: impl Fn(&R) -> (&str, &str)) -> Vec<Vec<(usize, R)>> {
    let mut seen: Vec<HashSet<(String, String)>> = Vec::new();
    let mut out: Vec<Vec<(usize, R)>> = Vec::new();
    for (i, row) in rows.into_iter().enumerate() {
        let (service, txid) = key(&row);
        let id = (service.to_string(), txid.to_string());
        let at = match seen.iter().position(|s| !s.contains(&id)) {
            Some(at) => at,
            None => {
                seen.push(HashSet::new());
                out.push(Vec::new());
                out.len() - 1
            }
        };
        seen[at].insert(id);
        out[at].push((i, row));
    }
    out
}

/// Writes `rows` with `write` (a batch method), round by round (see `rounds`); one result per
/// row, in order.
async fn write_rounds<R, F>(
    rows: Vec<R>,
    key: impl Fn(&R) -> (&str, &str),
    write: F,
) -> Vec<StoreResult<()>>
where
    F: Fn(Vec<R>) -> BoxFuture<'static, Vec<StoreResult<()>>>,
{
    let n = rows.len();
    let mut results: Vec<Option<StoreResult<()>>> = vec![None; n];
    for round in rounds(rows, key) {
        let (at, rows): (Vec<usize>, Vec<R>) = round.into_iter().unzip();
        for (i, r) in at.into_iter().zip(write(rows).await) {
            results[i] = Some(r);
        }
    }
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(StoreError::Internal(
                    "a batch write gave too few results".into(),
                ))
            })
        })
        .collect()
}

impl<S: StateStore + ?Sized + 'static> Coalesced<S> {
    /// Queues one state-row write (`row`: the row and its TTL) in `writes` and waits until
    /// it is durable. The call that finds the queue's slot free starts the task that sends the
    /// queued rows through `batch` (a batch method of the store), request after request,
    /// round by round (see `rounds`).
    async fn write<T: Send + 'static>(
        &self,
        writes: &Arc<Writes<(TxState, T)>>,
        row: (TxState, T),
        kind: &'static str,
        batch: BatchWrite<S, T>,
    ) -> StoreResult<()> {
        let weight = (self.opts.write_weight)(&row.0);
        let joined = writes.join((), row, weight);
        if let Some(mut slot) = joined.slot {
            let inner = self.inner.clone();
            // Boxed: the caller's future would otherwise carry the batch write's.
            let carry = Box::pin(async move {
                while let Some(mut queued) = slot.next_batch() {
                    let rows = std::mem::take(&mut queued.items);
                    crate::metric_definitions::metrics().coalesced(kind, rows.len());
                    let written = write_rounds(
                        rows,
                        |(s, _)| (&s.service, &s.transaction_id),
                        |rows| batch(inner.clone(), rows),
                    )
                    .await;
                    queued.answer(Ok(written));
                }
            });
            if let Err(carry) = writes.tasks().spawn(carry) {
                carry.await;
            }
        }
        joined.answer.get().await?
    }
}

#[async_trait]
impl<S: StateStore + ?Sized + 'static> StateStore for Coalesced<S> {
    async fn put_state(&self, state: &TxState, ttl_seconds: Option<u32>) -> StoreResult<()> {
        let row = (state.clone(), ttl_seconds);
        self.write(&self.puts, row, "state_writes", |inner, rows| {
            Box::pin(async move { inner.put_states(rows).await })
        })
        .await
    }

    async fn settle_state(&self, state: &TxState, ttl_seconds: u32) -> StoreResult<()> {
        let row = (state.clone(), ttl_seconds);
        self.write(&self.settles, row, "state_settles", |inner, rows| {
            Box::pin(async move { inner.settle_states(rows).await })
        })
        .await
    }

    async fn get_state(&self, service: &str, transaction_id: &str) -> StoreResult<Option<TxState>> {
        let joined = self
            .reads
            .join(service.to_string(), transaction_id.to_string(), 1);
        if let Some(mut slot) = joined.slot {
            let (inner, service) = (self.inner.clone(), service.to_string());
            let carry = Box::pin(async move {
                while let Some(mut batch) = slot.next_batch() {
                    let ids = std::mem::take(&mut batch.items);
                    crate::metric_definitions::metrics().coalesced("state_reads", ids.len());
                    batch.answer(inner.get_states(&service, &ids).await);
                }
            });
            if let Err(carry) = self.reads.tasks().spawn(carry) {
                carry.await;
            }
        }
        joined.answer.get().await
    }

    async fn cancel_state(
        &self,
        state: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<()> {
        self.inner
            .cancel_state(state, ttl_seconds, cancel_ttl_seconds)
            .await
    }
    async fn get_states(&self, service: &str, ids: &[String]) -> StoreResult<Vec<Option<TxState>>> {
        self.inner.get_states(service, ids).await
    }
    async fn put_states(&self, rows: Vec<(TxState, Option<u32>)>) -> Vec<StoreResult<()>> {
        self.inner.put_states(rows).await
    }
    async fn settle_states(&self, rows: Vec<(TxState, u32)>) -> Vec<StoreResult<()>> {
        self.inner.settle_states(rows).await
    }
    async fn put_state_if(
        &self,
        state: &TxState,
        ttl_seconds: Option<u32>,
        if_generation: i64,
    ) -> StoreResult<bool> {
        self.inner
            .put_state_if(state, ttl_seconds, if_generation)
            .await
    }
    async fn cancel_state_if(
        &self,
        state: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<bool> {
        self.inner
            .cancel_state_if(state, ttl_seconds, cancel_ttl_seconds)
            .await
    }
    async fn list_finished(
        &self,
        service: &str,
        status: Status,
        from: FinishedAt,
        until_second: i64,
        limit: usize,
    ) -> StoreResult<FinishedPage> {
        self.inner
            .list_finished(service, status, from, until_second, limit)
            .await
    }
}

/// The store's loop and counts are its own; the tasks are the layer's flushes, then the
/// store's.
impl<S: StoreLifecycle + ?Sized> StoreLifecycle for Coalesced<S> {
    fn background(
        self: Arc<Self>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Option<BoxFuture<'static, ()>> {
        self.inner.clone().background(stop)
    }

    fn task_owners(&self) -> Vec<(&'static str, &Tasks)> {
        let mut owners = vec![
            ("state reads", self.reads.tasks()),
            ("state writes", self.puts.tasks()),
            ("state settles", self.settles.tasks()),
        ];
        owners.extend(self.inner.task_owners());
        owners
    }

    fn state_io_counts(&self) -> (Counts, Counts) {
        self.inner.state_io_counts()
    }
}

#[cfg(test)]
mod tests {
    use super::rounds;

    #[test]
    fn a_transaction_queued_twice_goes_in_a_later_round_in_queue_order() {
        let rows = vec![
            ("s", "a", 1),
            ("s", "b", 2),
            ("s", "a", 3),
            ("t", "a", 4),
            ("s", "a", 5),
        ];
        let got: Vec<Vec<(usize, i32)>> = rounds(rows, |(s, t, _)| (s, t))
            .into_iter()
            .map(|r| r.into_iter().map(|(i, (_, _, v))| (i, v)).collect())
            .collect();
        assert_eq!(
            got,
            vec![vec![(0, 1), (1, 2), (3, 4)], vec![(2, 3)], vec![(4, 5)]]
        );
    }
}
