//! A store that stalls: the writer's view of the embedded store, where a pointer or state
//! write takes as long as a test says, on the manual clock (the clock moves on once the write
//! is durable, as it would for a writer paused by GC or a slow database).

use std::sync::{
    atomic::{AtomicBool, AtomicI64, Ordering},
    Arc, Mutex,
};

use tokio::sync::oneshot;

use async_trait::async_trait;
use futures::stream::BoxStream;
use rebound_store::{
    clock::ManualClock, window::WindowId, DirectoryStore, FinishedAt, FinishedPage, InstanceRow,
    Location, Pointer, StateStore, Status, StoreError, StoreResult, TokenRange, TxState,
};
use rebound_store_embedded::EmbeddedStore;

#[derive(Debug)]
pub struct StallingStore {
    pub inner: Arc<EmbeddedStore>,
    clock: ManualClock,
    /// The next pointer write takes this long (then 0 again).
    pointer_ms: AtomicI64,
    /// The next state write takes this long (then 0 again).
    state_ms: AtomicI64,
    /// The next settle (a SUCCEEDED ack's write) fails, with an unknown outcome, unwritten.
    fail_settle: AtomicBool,
    /// The next pointer write says it has begun, then waits to be let go (`hold_next_pointer_write`).
    gate: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

impl StallingStore {
    pub fn new(inner: Arc<EmbeddedStore>, clock: ManualClock) -> Self {
        Self {
            inner,
            clock,
            pointer_ms: AtomicI64::new(0),
            state_ms: AtomicI64::new(0),
            fail_settle: AtomicBool::new(false),
            gate: Mutex::new(None),
        }
    }

    /// Holds the next pointer write: the first channel answers once it has begun, and it goes
    /// on when the second is sent to (or dropped).
    pub fn hold_next_pointer_write(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (began, began_rx) = oneshot::channel();
        let (go, go_rx) = oneshot::channel();
        *self.gate.lock().unwrap() = Some((began, go_rx));
        (began_rx, go)
    }

    async fn pass_gate(&self) {
        let gate = self.gate.lock().unwrap().take();
        if let Some((began, go)) = gate {
            let _ = began.send(());
            let _ = go.await;
        }
    }

    pub fn fail_next_settle(&self) {
        self.fail_settle.store(true, Ordering::SeqCst);
    }

    /// The error of a failed settle, when `fail_next_settle` asked for one.
    fn settle_failure(&self) -> Option<StoreError> {
        self.fail_settle
            .swap(false, Ordering::SeqCst)
            .then(|| StoreError::Timeout("a failed settle (test)".into()))
    }

    pub fn stall_next_pointer_write(&self, ms: i64) {
        self.pointer_ms.store(ms, Ordering::SeqCst);
    }

    pub fn stall_next_state_write(&self, ms: i64) {
        self.state_ms.store(ms, Ordering::SeqCst);
    }

    fn stall(&self, which: &AtomicI64) {
        self.clock.advance(which.swap(0, Ordering::SeqCst));
    }
}

#[async_trait]
impl DirectoryStore for StallingStore {
    async fn put_day(&self, year: i32, day: i32) -> StoreResult<()> {
        self.inner.put_day(year, day).await
    }
    async fn put_window(&self, window: WindowId) -> StoreResult<()> {
        self.inner.put_window(window).await
    }
    async fn put_instance(&self, window: WindowId, row: &InstanceRow) -> StoreResult<()> {
        self.inner.put_instance(window, row).await
    }
    async fn put_bucket(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()> {
        self.inner
            .put_bucket(window, service, instance, bucket)
            .await
    }
    async fn put_pointer(
        &self,
        service: &str,
        location: &Location,
        pointer: &Pointer,
    ) -> StoreResult<()> {
        self.pass_gate().await;
        let r = self.inner.put_pointer(service, location, pointer).await;
        self.stall(&self.pointer_ms);
        r
    }
    async fn put_pointers(
        &self,
        service: &str,
        location: &Location,
        pointers: &[Pointer],
    ) -> StoreResult<()> {
        self.pass_gate().await;
        let r = self.inner.put_pointers(service, location, pointers).await;
        self.stall(&self.pointer_ms);
        r
    }
    async fn list_years(&self) -> StoreResult<Vec<i32>> {
        self.inner.list_years().await
    }
    async fn list_days(&self, year: i32) -> StoreResult<Vec<i32>> {
        self.inner.list_days(year).await
    }
    async fn list_instances(
        &self,
        window: WindowId,
        range: TokenRange,
    ) -> StoreResult<Vec<InstanceRow>> {
        self.inner.list_instances(window, range).await
    }
    async fn list_buckets(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
    ) -> StoreResult<Vec<u32>> {
        self.inner.list_buckets(window, service, instance).await
    }
    async fn stream_pointers(
        &self,
        service: &str,
        location: &Location,
    ) -> StoreResult<BoxStream<'static, StoreResult<Pointer>>> {
        self.inner.stream_pointers(service, location).await
    }
    async fn delete_pointer_partition(
        &self,
        service: &str,
        location: &Location,
    ) -> StoreResult<()> {
        self.inner.delete_pointer_partition(service, location).await
    }
    async fn delete_late_pointer(
        &self,
        service: &str,
        location: &Location,
        transaction_id: &str,
    ) -> StoreResult<()> {
        self.inner
            .delete_late_pointer(service, location, transaction_id)
            .await
    }
    async fn delete_bucket(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()> {
        self.inner
            .delete_bucket(window, service, instance, bucket)
            .await
    }
    async fn delete_instance(&self, window: WindowId, row: &InstanceRow) -> StoreResult<()> {
        self.inner.delete_instance(window, row).await
    }
    async fn window_has_instances(&self, window: WindowId) -> StoreResult<bool> {
        self.inner.window_has_instances(window).await
    }
    async fn delete_window_instances(&self, window: WindowId) -> StoreResult<()> {
        self.inner.delete_window_instances(window).await
    }
    async fn delete_window(&self, window: WindowId) -> StoreResult<()> {
        self.inner.delete_window(window).await
    }
    async fn delete_day(&self, year: i32, day: i32) -> StoreResult<()> {
        self.inner.delete_day(year, day).await
    }
    async fn count_pointers(&self, service: &str, location: &Location) -> StoreResult<u64> {
        self.inner.count_pointers(service, location).await
    }
    async fn day_listed(&self, year: i32, day: i32) -> StoreResult<bool> {
        self.inner.day_listed(year, day).await
    }
    async fn window_listed(&self, window: WindowId) -> StoreResult<bool> {
        self.inner.window_listed(window).await
    }
    async fn low_water(&self, day: i32) -> StoreResult<u32> {
        self.inner.low_water(day).await
    }
    async fn set_low_water(&self, day: i32, window: u32) -> StoreResult<()> {
        self.inner.set_low_water(day, window).await
    }
    async fn delete_low_water(&self, day: i32) -> StoreResult<()> {
        self.inner.delete_low_water(day).await
    }
    async fn list_windows_from(&self, day: i32, from: u32) -> StoreResult<Vec<u32>> {
        self.inner.list_windows_from(day, from).await
    }
}

#[async_trait]
impl StateStore for StallingStore {
    async fn put_state(&self, state: &TxState, ttl_seconds: Option<u32>) -> StoreResult<()> {
        let r = self.inner.put_state(state, ttl_seconds).await;
        self.stall(&self.state_ms);
        r
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
    async fn get_state(&self, service: &str, transaction_id: &str) -> StoreResult<Option<TxState>> {
        self.inner.get_state(service, transaction_id).await
    }
    async fn get_states(&self, service: &str, ids: &[String]) -> StoreResult<Vec<Option<TxState>>> {
        self.inner.get_states(service, ids).await
    }
    async fn put_states(&self, rows: Vec<(TxState, Option<u32>)>) -> Vec<StoreResult<()>> {
        let r = self.inner.put_states(rows).await;
        self.stall(&self.state_ms);
        r
    }
    async fn settle_state(&self, state: &TxState, ttl_seconds: u32) -> StoreResult<()> {
        if let Some(e) = self.settle_failure() {
            return Err(e);
        }
        let r = self.inner.settle_state(state, ttl_seconds).await;
        self.stall(&self.state_ms);
        r
    }
    async fn settle_states(&self, rows: Vec<(TxState, u32)>) -> Vec<StoreResult<()>> {
        if let Some(e) = self.settle_failure() {
            return vec![Err(e); rows.len()];
        }
        let r = self.inner.settle_states(rows).await;
        self.stall(&self.state_ms);
        r
    }
    async fn put_state_if(
        &self,
        state: &TxState,
        ttl_seconds: Option<u32>,
        if_generation: i64,
    ) -> StoreResult<bool> {
        let r = self
            .inner
            .put_state_if(state, ttl_seconds, if_generation)
            .await;
        self.stall(&self.state_ms);
        r
    }
    async fn cancel_state_if(
        &self,
        state: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<bool> {
        let r = self
            .inner
            .cancel_state_if(state, ttl_seconds, cancel_ttl_seconds)
            .await;
        self.stall(&self.state_ms);
        r
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
