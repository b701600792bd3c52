//! The contract's traits implemented on the layers (`observed::Observed`,
//! `coalesced::Coalesced`), once for all of them: every method passes through the layer's
//! `call(method, future)`. A layer that changes what a method does (the coalescing layer's
//! state-row reads and writes) implements that trait by hand and is left out of its list.

use futures::stream::BoxStream;

use crate::{
    coalesced::Coalesced, observed::Observed, window::WindowId, Cas, DeadLetter, DeadLetterRow,
    DeadLetterStore, DirectoryStore, FinishedAt, FinishedPage, HoldRow, HoldStore, InstanceRow,
    LeaseChange, LeaseRow, LeaseStore, Location, Member, MigrationStore, Pointer, ProbeClaim,
    ServiceRow, ServiceStore, StateStore, Status, StoreResult, TokenRange, TxState,
};

/// Implements `$trait` on `$layer<S>` by passing every call through `self.call`.
macro_rules! layer_impl {
    ($layer:ident, $trait:ident { $(
        async fn $name:ident(&self $(, $arg:ident : $ty:ty)* $(,)?) -> $ret:ty;
    )* }) => {
        #[async_trait::async_trait]
        impl<S: $trait + ?Sized + 'static> $trait for $layer<S> {
            $(
                async fn $name(&self $(, $arg: $ty)*) -> $ret {
                    self.call(stringify!($name), self.inner().$name($($arg),*)).await
                }
            )*
        }
    };
}

/// Implements `$trait` on each layer listed.
macro_rules! layers {
    ([$($layer:ident),+] $trait:ident $body:tt) => {
        $( layer_impl!($layer, $trait $body); )+
    };
}

layers!([Observed, Coalesced] DirectoryStore {
    async fn put_day(&self, year: i32, day: i32) -> StoreResult<()>;
    async fn put_window(&self, window: WindowId) -> StoreResult<()>;
    async fn put_instance(&self, window: WindowId, row: &InstanceRow) -> StoreResult<()>;
    async fn put_bucket(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()>;
    async fn put_pointer(
        &self,
        service: &str,
        location: &Location,
        pointer: &Pointer,
    ) -> StoreResult<()>;
    async fn put_pointers(
        &self,
        service: &str,
        location: &Location,
        pointers: &[Pointer],
    ) -> StoreResult<()>;
    async fn put_pointer_groups(
        &self,
        groups: &[(String,
        Location,
        Vec<Pointer>)],
    ) -> StoreResult<()>;
    async fn list_years(&self) -> StoreResult<Vec<i32>>;
    async fn list_days(&self, year: i32) -> StoreResult<Vec<i32>>;
    async fn list_instances(
        &self,
        window: WindowId,
        range: TokenRange,
    ) -> StoreResult<Vec<InstanceRow>>;
    async fn list_buckets(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
    ) -> StoreResult<Vec<u32>>;
    async fn stream_pointers(
        &self,
        service: &str,
        location: &Location,
    ) -> StoreResult<BoxStream<'static, StoreResult<Pointer>>>;
    async fn delete_pointer_partition(&self, service: &str, location: &Location) -> StoreResult<()>;
    async fn delete_late_pointer(
        &self,
        service: &str,
        location: &Location,
        transaction_id: &str,
    ) -> StoreResult<()>;
    async fn delete_bucket(
        &self,
        window: WindowId,
        service: &str,
        instance: &str,
        bucket: u32,
    ) -> StoreResult<()>;
    async fn delete_instance(&self, window: WindowId, row: &InstanceRow) -> StoreResult<()>;
    async fn window_has_instances(&self, window: WindowId) -> StoreResult<bool>;
    async fn delete_window_instances(&self, window: WindowId) -> StoreResult<()>;
    async fn delete_window(&self, window: WindowId) -> StoreResult<()>;
    async fn delete_day(&self, year: i32, day: i32) -> StoreResult<()>;
    async fn count_pointers(&self, service: &str, location: &Location) -> StoreResult<u64>;
    async fn day_listed(&self, year: i32, day: i32) -> StoreResult<bool>;
    async fn window_listed(&self, window: WindowId) -> StoreResult<bool>;
    async fn low_water(&self, day: i32) -> StoreResult<u32>;
    async fn set_low_water(&self, day: i32, window: u32) -> StoreResult<()>;
    async fn delete_low_water(&self, day: i32) -> StoreResult<()>;
    async fn list_windows_from(&self, day: i32, from: u32) -> StoreResult<Vec<u32>>;
});

layers!([Observed] StateStore {
    async fn put_state(&self, state: &TxState, ttl_seconds: Option<u32>) -> StoreResult<()>;
    async fn cancel_state(
        &self,
        state: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<()>;
    async fn get_state(&self, service: &str, transaction_id: &str) -> StoreResult<Option<TxState>>;
    async fn get_states(&self, service: &str, ids: &[String]) -> StoreResult<Vec<Option<TxState>>>;
    async fn put_states(&self, rows: Vec<(TxState, Option<u32>)>) -> Vec<StoreResult<()>>;
    async fn settle_state(&self, state: &TxState, ttl_seconds: u32) -> StoreResult<()>;
    async fn settle_states(&self, rows: Vec<(TxState, u32)>) -> Vec<StoreResult<()>>;
    async fn put_state_if(
        &self,
        state: &TxState,
        ttl_seconds: Option<u32>,
        if_generation: i64,
    ) -> StoreResult<bool>;
    async fn cancel_state_if(
        &self,
        state: &TxState,
        ttl_seconds: u32,
        cancel_ttl_seconds: u32,
    ) -> StoreResult<bool>;
    async fn list_finished(
        &self,
        service: &str,
        status: Status,
        from: FinishedAt,
        until_second: i64,
        limit: usize,
    ) -> StoreResult<FinishedPage>;
});

layers!([Observed, Coalesced] LeaseStore {
    async fn server_time_ms(&self) -> StoreResult<i64>;
    async fn heartbeat(&self, member: &Member, ttl_seconds: u32) -> StoreResult<()>;
    async fn list_members(&self) -> StoreResult<Vec<Member>>;
    async fn read_lease(&self, slot: i32) -> StoreResult<Option<LeaseRow>>;
    async fn peek_leases(&self, slots: &[i32]) -> StoreResult<Vec<LeaseRow>>;
    async fn create_lease(&self, lease: &LeaseRow) -> StoreResult<Cas>;
    async fn replace_lease(
        &self,
        lease: &LeaseRow,
        expected_epoch: i64,
        change: LeaseChange,
    ) -> StoreResult<Cas>;
});

layers!([Observed, Coalesced] ServiceStore {
    async fn list_services(&self) -> StoreResult<Vec<ServiceRow>>;
    async fn touch_service(&self, service: &str, now_ms: i64) -> StoreResult<()>;
    async fn set_service_paused(&self, service: &str, paused: bool, now_ms: i64) -> StoreResult<()>;
    async fn set_service_policy(
        &self,
        service: &str,
        policy: &[u8],
        now_ms: i64,
    ) -> StoreResult<()>;
    async fn set_service_limits(
        &self,
        service: &str,
        limits: &[u8],
        now_ms: i64,
    ) -> StoreResult<()>;
    async fn set_service_push(&self, service: &str, push: &[u8], now_ms: i64) -> StoreResult<()>;
});

layers!([Observed, Coalesced] DeadLetterStore {
    async fn put_dead_letter(&self, letter: &DeadLetter, ttl_seconds: u32) -> StoreResult<()>;
    async fn stream_dead_letters(
        &self,
        service: &str,
        day: i32,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<BoxStream<'static, StoreResult<DeadLetterRow>>>;
    async fn mark_redriven(&self, letter: &DeadLetter, now_ms: i64) -> StoreResult<()>;
    async fn delete_dead_letter_day(&self, service: &str, day: i32) -> StoreResult<()>;
    async fn delete_dead_letter_range(
        &self,
        service: &str,
        day: i32,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<()>;
});

layers!([Observed, Coalesced] HoldStore {
    async fn put_hold(&self, hold: &HoldRow, ttl_seconds: u32) -> StoreResult<()>;
    async fn list_holds(&self) -> StoreResult<Vec<HoldRow>>;
    async fn claim_probe(
        &self,
        dependency: &str,
        until_ms: i64,
        owner: &str,
        now_ms: i64,
        stale_before_ms: i64,
        ttl_seconds: u32,
    ) -> StoreResult<ProbeClaim>;
    async fn answer_probe(
        &self,
        dependency: &str,
        until_ms: i64,
        owner: &str,
        answered_at_ms: i64,
        ttl_seconds: u32,
    ) -> StoreResult<bool>;
});

layers!([Observed, Coalesced] MigrationStore {
    async fn migrate(&self, now_ms: i64) -> StoreResult<Vec<i32>>;
    async fn applied_migrations(&self) -> StoreResult<Vec<i32>>;
    async fn record_settings(
        &self,
        node_id: &str,
        settings: &[(String, String)],
    ) -> StoreResult<Vec<String>>;
});
