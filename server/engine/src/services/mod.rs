//! Per-service settings: the stored default policy, pause, dispatch limits, and the push
//! target (`push_target`, its checks and masked form; `seal`, its secrets sealed at rest;
//! `push` delivers to it).
//!
//! The `services` table is one small partition per namespace; every node reads it whole once
//! per refresh interval and keeps it in memory, so the enqueue and dispatch paths never read
//! it. A change made through one node applies there at once and on the others within the
//! refresh interval.
//!
//! Limits are cluster-wide numbers enforced as a per-node share: with `n` live nodes each
//! node allows `rate / n` deliveries per second (burst `max(1, burst / n)`) and
//! `ceil(max_concurrent / n)` unacknowledged deliveries. The cluster therefore stays within
//! `max_concurrent + n - 1` concurrent deliveries and within the rate (plus one burst), as long
//! as membership is stable; while a node joins or leaves, the shares of the nodes that have
//! not refreshed yet can add up to more, for at most one refresh interval.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc, Mutex, RwLock,
    },
    time::Duration,
};

use prost::Message;
use rebound_proto::{time::ts, v1 as pb};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

pub mod push_address;
pub mod push_target;
pub mod seal;

use self::push_target as target;
use crate::policy::{PolicyOverrides, Rules as _};
use crate::{error::Error, validate};
use rebound_store::{
    clock::SharedClock, policy::RetryPolicy, LeaseStore, ServiceRow, ServiceStore,
};

/// The stored settings of one service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    pub service: String,
    pub paused: bool,
    pub paused_at_ms: Option<i64>,
    pub updated_at_ms: Option<i64>,
    /// As stored: only the fields that were set.
    pub policy: pb::RetryPolicy,
    pub overrides: PolicyOverrides,
    pub limits: pb::ServiceLimits,
    /// The push target as stored (secrets opened, in clear; `updated_at` set), when the
    /// service has one: its retries are then POSTed there instead of going to Subscribe
    /// streams.
    pub push: Option<pb::PushTarget>,
    /// Why the stored push target cannot be used, when a value of it does not open
    /// (`seal::Unopened`: its key is not in the key file). `push` is then None, and the
    /// service's deliveries are postponed, neither pushed nor streamed.
    pub push_unusable: Option<String>,
}

impl Settings {
    fn from_row(row: ServiceRow, ring: Option<&seal::Keyring>) -> Self {
        // Rows are written only by this code after validation; a row that no longer decodes
        // (or validates) is ignored field by field rather than stopping the node.
        let policy = pb::RetryPolicy::decode(row.policy.as_slice()).unwrap_or_default();
        let overrides = validate::policy("policy", Some(&policy)).unwrap_or_else(|e| {
            tracing::warn!(service = %row.service, error = %e, "stored service policy is invalid; ignored");
            PolicyOverrides::default()
        });
        let limits = pb::ServiceLimits::decode(row.limits.as_slice()).unwrap_or_default();
        let (push, push_unusable) = match push_of(&row.service, &row.push, ring) {
            Ok(p) => (p, None),
            Err(why) => (None, Some(why)),
        };
        Self {
            service: row.service,
            paused: row.paused,
            paused_at_ms: row.paused_at_ms,
            updated_at_ms: row.updated_at_ms,
            policy,
            overrides,
            limits,
            push,
            push_unusable,
        }
    }
}

/// The stored push target of a row (None when empty), its sealed values opened with `ring`.
/// One that no longer decodes or validates is ignored with a warning: the service is then
/// delivered to Subscribe streams, as without a target, rather than stopping the node. One
/// holding a value that does not open is Err, why (naming the key id and the key file).
fn push_of(
    service: &str,
    bytes: &[u8],
    ring: Option<&seal::Keyring>,
) -> Result<Option<pb::PushTarget>, String> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let stored = match pb::PushTarget::decode(bytes) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(service = %service, error = %e, "stored push target does not decode; ignored");
            return Ok(None);
        }
    };
    let stored = seal::open_target(ring, service, &stored)
        .map_err(|e| format!("the push target of service {service:?} cannot be used: {e}"))?;
    match target::validate(Some(&stored)) {
        Ok(mut t) => {
            t.updated_at = stored.updated_at;
            Ok(Some(t))
        }
        Err(e) => {
            tracing::warn!(service = %service, error = %e, "stored push target is invalid; ignored");
            Ok(None)
        }
    }
}

/// The per-node share of one service's limits.
#[derive(Debug)]
pub struct Limiter {
    /// Deliveries per second on this node; None: unlimited.
    rate: Option<f64>,
    burst: f64,
    bucket: Mutex<(f64, tokio::time::Instant)>,
    slots: Option<Arc<Semaphore>>,
    key: (Option<u64>, u64, Option<usize>),
}

impl Limiter {
    fn new(limits: &pb::ServiceLimits, nodes: u32) -> Option<Limiter> {
        let n = f64::from(nodes.max(1));
        let rate = limits.max_dispatch_per_second.map(|r| (r / n).max(1e-3));
        let burst = match (limits.dispatch_burst, limits.max_dispatch_per_second) {
            (Some(b), _) => (f64::from(b) / n).max(1.0),
            (None, Some(r)) => (r / n).max(1.0),
            (None, None) => 1.0,
        };
        let slots = limits
            .max_concurrent
            .map(|c| (c as usize).div_ceil(nodes.max(1) as usize).max(1));
        if rate.is_none() && slots.is_none() {
            return None;
        }
        Some(Limiter {
            rate,
            burst,
            bucket: Mutex::new((burst, tokio::time::Instant::now())),
            slots: slots.map(|s| Arc::new(Semaphore::new(s))),
            key: (rate.map(|r| (r * 1000.0) as u64), burst as u64, slots),
        })
    }

    /// This node's share: (deliveries per second, concurrent deliveries).
    pub fn share(&self) -> (Option<f64>, Option<usize>) {
        (self.rate, self.key.2)
    }

    /// Waits for a dispatch token; returns false (without a token) when `keep` turns false.
    pub async fn take_token(&self, keep: &(dyn Fn() -> bool + Send + Sync)) -> bool {
        let Some(rate) = self.rate else { return true };
        loop {
            let wait = {
                let mut b = self.bucket.lock().expect("limiter lock");
                let now = tokio::time::Instant::now();
                let elapsed = now.duration_since(b.1).as_secs_f64();
                b.0 = (b.0 + elapsed * rate).min(self.burst);
                b.1 = now;
                if b.0 >= 1.0 {
                    b.0 -= 1.0;
                    return true;
                }
                Duration::from_secs_f64(((1.0 - b.0) / rate).min(0.25))
            };
            if !keep() {
                return false;
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// Waits for a concurrency slot, held until the delivery is resolved; None when the
    /// service has no concurrency limit. Returns Err when `keep` turns false first.
    pub async fn take_slot(
        &self,
        keep: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<Option<OwnedSemaphorePermit>, ()> {
        let Some(slots) = &self.slots else {
            return Ok(None);
        };
        loop {
            if let Ok(p) = slots.clone().try_acquire_owned() {
                return Ok(Some(p));
            }
            if !keep() {
                return Err(());
            }
            if let Ok(Ok(p)) =
                tokio::time::timeout(Duration::from_millis(250), slots.clone().acquire_owned())
                    .await
            {
                return Ok(Some(p));
            }
        }
    }
}

/// The settings of every known service, refreshed from Cassandra.
#[derive(Debug)]
pub struct Services {
    store: Arc<dyn ServiceStore>,
    /// The ring's members, whose count divides the per-service limits.
    members: Arc<dyn LeaseStore>,
    clock: SharedClock,
    default_policy: RetryPolicy,
    map: RwLock<HashMap<String, Settings>>,
    /// Services this process has recorded in the table.
    touched: Mutex<HashSet<String>>,
    limiters: Mutex<HashMap<String, Arc<Limiter>>>,
    live_nodes: AtomicU32,
    /// Bumped whenever the push target of any service changes here (`push_changes`).
    push_version: watch::Sender<u64>,
    /// The keys that seal push targets' secrets (none: stored in clear).
    secrets: Arc<seal::Secrets>,
}

impl Services {
    pub fn new(
        store: Arc<dyn ServiceStore>,
        members: Arc<dyn LeaseStore>,
        clock: SharedClock,
        default_policy: RetryPolicy,
    ) -> Self {
        Self {
            store,
            members,
            clock,
            default_policy,
            map: RwLock::new(HashMap::new()),
            touched: Mutex::new(HashSet::new()),
            limiters: Mutex::new(HashMap::new()),
            live_nodes: AtomicU32::new(1),
            push_version: watch::Sender::new(0),
            secrets: Arc::default(),
        }
    }

    /// The keys that seal push targets' secrets: the node sets them from
    /// `REBOUND_SECRETS_KEY_FILE` before the first refresh, and again on SIGHUP. A target
    /// stored before a change is opened with the new keys at the next refresh.
    pub fn secrets(&self) -> &Arc<seal::Secrets> {
        &self.secrets
    }

    pub fn default_policy(&self) -> &RetryPolicy {
        &self.default_policy
    }

    /// Reads the table (and the member count for limit shares) into memory.
    pub async fn refresh(&self) -> Result<(), Error> {
        let rows = self.store.list_services().await?;
        let members = self.members.list_members().await?.len() as u32;
        self.live_nodes.store(members.max(1), Ordering::Relaxed);
        let ring = self.secrets.keyring();
        let map: HashMap<String, Settings> = rows
            .into_iter()
            .map(|r| (r.service.clone(), Settings::from_row(r, ring.as_deref())))
            .collect();
        {
            let mut touched = self.touched.lock().expect("touched lock");
            touched.extend(map.keys().cloned());
        }
        for s in map.values() {
            self.update_limiter(s);
        }
        {
            let mut limiters = self.limiters.lock().expect("limiters lock");
            limiters.retain(|k, _| map.contains_key(k));
        }
        let changed =
            push_state_of(&map) != push_state_of(&self.map.read().expect("services lock"));
        *self.map.write().expect("services lock") = map;
        if changed {
            self.push_changed();
        }
        Ok(())
    }

    fn push_changed(&self) {
        self.push_version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Refreshes every `every` until the node stops.
    pub async fn run(self: Arc<Self>, every: Duration, mut stop: watch::Receiver<bool>) {
        loop {
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "cannot refresh service settings, will retry");
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }

    fn update_limiter(&self, s: &Settings) {
        let nodes = self.live_nodes.load(Ordering::Relaxed);
        let mut limiters = self.limiters.lock().expect("limiters lock");
        match Limiter::new(&s.limits, nodes) {
            None => {
                limiters.remove(&s.service);
            }
            Some(l) => {
                // A changed limit gets a new limiter; deliveries holding a slot of the old
                // one release it there.
                if limiters.get(&s.service).is_none_or(|old| old.key != l.key) {
                    limiters.insert(s.service.clone(), Arc::new(l));
                }
            }
        }
    }

    fn store_local(&self, s: Settings) {
        self.update_limiter(&s);
        self.touched
            .lock()
            .expect("touched lock")
            .insert(s.service.clone());
        let push = (s.push.clone(), s.push_unusable.clone());
        let old = self
            .map
            .write()
            .expect("services lock")
            .insert(s.service.clone(), s);
        if old.map(|o| (o.push, o.push_unusable)).unwrap_or_default() != push {
            self.push_changed();
        }
    }

    pub fn get(&self, service: &str) -> Option<Settings> {
        self.map
            .read()
            .expect("services lock")
            .get(service)
            .cloned()
    }

    pub fn all(&self) -> Vec<Settings> {
        let mut v: Vec<Settings> = self
            .map
            .read()
            .expect("services lock")
            .values()
            .cloned()
            .collect();
        v.sort_by(|a, b| a.service.cmp(&b.service));
        v
    }

    pub fn is_paused(&self, service: &str) -> bool {
        self.map
            .read()
            .expect("services lock")
            .get(service)
            .is_some_and(|s| s.paused)
    }

    /// The service's push target (secrets in clear), from the cache: None when it has none,
    /// and its retries go to Subscribe streams.
    pub fn push_target(&self, service: &str) -> Option<pb::PushTarget> {
        self.map
            .read()
            .expect("services lock")
            .get(service)
            .and_then(|s| s.push.clone())
    }

    /// Every service that has a push target, with it (secrets in clear), by service name,
    /// from the cache.
    pub fn push_targets(&self) -> Vec<(String, pb::PushTarget)> {
        push_targets_of(&self.map.read().expect("services lock"))
    }

    /// Every service whose stored push target cannot be used (`Settings::push_unusable`),
    /// with why, by service name, from the cache.
    pub fn unusable_push_targets(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .map
            .read()
            .expect("services lock")
            .values()
            .filter_map(|s| s.push_unusable.clone().map(|why| (s.service.clone(), why)))
            .collect();
        v.sort();
        v
    }

    /// Changes whenever a push target was set, replaced or cleared as this node sees it: at
    /// once for a change made through this node, within the refresh interval for one made
    /// elsewhere (a refresh that finds any service's target different, or a service gone),
    /// and when a target turns unusable or usable again (new keys).
    /// The value is a counter; read `push_targets` after a change.
    pub fn push_changes(&self) -> watch::Receiver<u64> {
        self.push_version.subscribe()
    }

    pub fn limiter(&self, service: &str) -> Option<Arc<Limiter>> {
        self.limiters
            .lock()
            .expect("limiters lock")
            .get(service)
            .cloned()
    }

    /// The node default with the service's stored policy on top.
    pub fn service_policy(&self, service: &str) -> RetryPolicy {
        match self.map.read().expect("services lock").get(service) {
            Some(s) => self.default_policy.apply(&s.overrides),
            None => self.default_policy.clone(),
        }
    }

    /// Records the service in the table the first time this process sees it.
    pub async fn touch(&self, service: &str) -> Result<(), Error> {
        if self.touched.lock().expect("touched lock").contains(service) {
            return Ok(());
        }
        self.store
            .touch_service(service, self.clock.now_ms())
            .await?;
        self.touched
            .lock()
            .expect("touched lock")
            .insert(service.to_string());
        Ok(())
    }

    /// Reads the stored row of one service (fresh, not from the cache).
    pub async fn load(&self, service: &str) -> Result<Option<Settings>, Error> {
        let rows = self.store.list_services().await?;
        let ring = self.secrets.keyring();
        Ok(rows
            .into_iter()
            .find(|r| r.service == service)
            .map(|r| Settings::from_row(r, ring.as_deref())))
    }

    pub async fn set_paused(&self, service: &str, paused: bool) -> Result<Settings, Error> {
        let now = self.clock.now_ms();
        self.store.set_service_paused(service, paused, now).await?;
        let s = written(self.load(service).await)?.unwrap_or(Settings {
            service: service.to_string(),
            paused,
            ..Default::default()
        });
        self.store_local(s.clone());
        Ok(s)
    }

    /// Stores a validated policy.
    pub async fn set_policy(
        &self,
        service: &str,
        policy: &pb::RetryPolicy,
    ) -> Result<Settings, Error> {
        let now = self.clock.now_ms();
        self.store
            .set_service_policy(service, &policy.encode_to_vec(), now)
            .await?;
        self.reload(service).await
    }

    pub async fn set_limits(
        &self,
        service: &str,
        limits: &pb::ServiceLimits,
    ) -> Result<Settings, Error> {
        let now = self.clock.now_ms();
        self.store
            .set_service_limits(service, &limits.encode_to_vec(), now)
            .await?;
        self.reload(service).await
    }

    /// Stores a validated push target (`push_target::validate`) with `updated_at` now, its
    /// secrets and header values sealed with the first key when the node has keys
    /// (`seal::seal_target`), or clears the service's target (None). Applies here at once, on
    /// the other nodes within the refresh interval.
    pub async fn set_push(
        &self,
        service: &str,
        target: Option<&pb::PushTarget>,
    ) -> Result<Settings, Error> {
        let now = self.clock.now_ms();
        let bytes = match target {
            None => Vec::new(),
            Some(t) => pb::PushTarget {
                updated_at: Some(ts(now)),
                ..seal::seal_target(self.secrets.keyring().as_deref(), service, t)?
            }
            .encode_to_vec(),
        };
        self.store.set_service_push(service, &bytes, now).await?;
        self.reload(service).await
    }

    /// Clears the service's push target; false (and nothing written) when it had none
    /// stored, the service unknown included. A stored target that no longer decodes is
    /// cleared too.
    pub async fn clear_push(&self, service: &str) -> Result<bool, Error> {
        let rows = self.store.list_services().await?;
        if !rows
            .iter()
            .any(|r| r.service == service && !r.push.is_empty())
        {
            return Ok(false);
        }
        self.set_push(service, None).await?;
        Ok(true)
    }

    /// Reads back a row this node just wrote and applies it here at once.
    async fn reload(&self, service: &str) -> Result<Settings, Error> {
        let s = written(self.load(service).await)?.ok_or_else(|| {
            Error::DeadlineExceeded(
                "the service's settings were written, but the row was not readable right \
                 after; the call is safe to repeat"
                    .into(),
            )
        })?;
        self.store_local(s.clone());
        Ok(s)
    }
}

/// What the pushers follow of `map`: each service's usable target and why one is unusable.
type PushState = Vec<(String, Option<pb::PushTarget>, Option<String>)>;

fn push_state_of(map: &HashMap<String, Settings>) -> PushState {
    let mut v: PushState = map
        .values()
        .filter(|s| s.push.is_some() || s.push_unusable.is_some())
        .map(|s| (s.service.clone(), s.push.clone(), s.push_unusable.clone()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The services of `map` that have a push target, by name.
fn push_targets_of(map: &HashMap<String, Settings>) -> Vec<(String, pb::PushTarget)> {
    let mut v: Vec<(String, pb::PushTarget)> = map
        .values()
        .filter_map(|s| s.push.clone().map(|t| (s.service.clone(), t)))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The read-back after a confirmed write: its failure must not read as "nothing written"
/// (UNAVAILABLE), so it is DEADLINE_EXCEEDED, which callers repeat (the writes are
/// idempotent).
fn written<T>(read: Result<T, Error>) -> Result<T, Error> {
    read.map_err(|e| match e {
        Error::Unavailable(m) => Error::DeadlineExceeded(format!(
            "the service's settings were written, but reading them back failed ({m}); the \
             call is safe to repeat"
        )),
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_read_back_after_a_write_is_not_nothing_written() {
        let e = written::<()>(Err(Error::Unavailable("connection reset".into()))).unwrap_err();
        assert!(
            matches!(&e, Error::DeadlineExceeded(m) if m.contains("written") && m.contains("connection reset")),
            "{e:?}"
        );
        // Other errors, and answers, pass through.
        assert!(matches!(
            written::<()>(Err(Error::Internal("x".into()))),
            Err(Error::Internal(_))
        ));
        assert_eq!(written(Ok(3)).unwrap(), 3);
    }

    fn target(url: &str) -> pb::PushTarget {
        target::validate(Some(&pb::PushTarget {
            url: url.into(),
            signing_secrets: vec![format!("whsec_{}", "A".repeat(32))],
            ..Default::default()
        }))
        .unwrap()
    }

    /// Two nodes' views of one embedded store.
    async fn two_nodes() -> (
        Services,
        Services,
        rebound_store::clock::ManualClock,
        tempfile::TempDir,
    ) {
        use rebound_store::MigrationStore;
        use rebound_store_embedded::EmbeddedStore;
        let dir = tempfile::tempdir().unwrap();
        let clock = rebound_store::clock::ManualClock::new(1_700_000_000_000);
        let shared: SharedClock = Arc::new(clock.clone());
        let store = EmbeddedStore::open(dir.path(), "r", "c", shared.clone()).unwrap();
        store.migrate(0).await.unwrap();
        let store = Arc::new(store);
        let node = || {
            Services::new(
                store.clone(),
                store.clone(),
                shared.clone(),
                RetryPolicy::default(),
            )
        };
        (node(), node(), clock, dir)
    }

    #[tokio::test]
    async fn a_push_target_applies_here_at_once_and_elsewhere_on_refresh() {
        use rebound_store::clock::Clock as _;
        let (a, b, clock, _dir) = two_nodes().await;
        let mut changes = a.push_changes();
        a.set_paused("orders", true).await.unwrap();
        a.set_limits(
            "orders",
            &pb::ServiceLimits {
                max_concurrent: Some(5),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        assert!(!changes.has_changed().unwrap(), "no push target changed");

        clock.advance(1_000);
        let s = a
            .set_push("orders", Some(&target("https://a.example/hook")))
            .await
            .unwrap();
        let stored = s.push.clone().unwrap();
        assert_eq!(stored.url, "https://a.example/hook");
        assert_eq!(stored.updated_at, Some(ts(clock.now_ms())));
        assert_eq!(s.updated_at_ms, Some(clock.now_ms()));
        // Other settings untouched.
        assert!(s.paused);
        assert_eq!(s.limits.max_concurrent, Some(5));
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert_eq!(
            a.push_targets(),
            vec![("orders".to_string(), stored.clone())]
        );
        assert_eq!(a.push_target("orders"), Some(stored.clone()));
        assert_eq!(a.push_target("billing"), None);

        // The other node sees it on its next refresh, and is told.
        let mut b_changes = b.push_changes();
        assert!(b.push_targets().is_empty());
        b.refresh().await.unwrap();
        assert_eq!(b.push_targets(), a.push_targets());
        assert!(b_changes.has_changed().unwrap());
        b_changes.mark_unchanged();
        // A refresh that finds nothing new is no change.
        b.refresh().await.unwrap();
        assert!(!b_changes.has_changed().unwrap());

        // Replaced.
        a.set_push("orders", Some(&target("https://b.example/hook")))
            .await
            .unwrap();
        assert_eq!(a.push_targets()[0].1.url, "https://b.example/hook");
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();

        // Cleared, once; the service and its other settings stay.
        assert!(a.clear_push("orders").await.unwrap());
        assert!(!a.clear_push("orders").await.unwrap());
        assert!(!a.clear_push("never-seen").await.unwrap());
        assert!(a.get("never-seen").is_none(), "clearing makes no row");
        assert!(a.push_targets().is_empty());
        assert!(changes.has_changed().unwrap());
        let s = a.get("orders").unwrap();
        assert!(s.paused && s.push.is_none());
        b.refresh().await.unwrap();
        assert!(b.push_targets().is_empty());
        assert!(b_changes.has_changed().unwrap());
    }

    const KEY_1: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const KEY_2: &str = "k2 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

    fn keys(text: &str) -> Option<seal::Keyring> {
        Some(seal::Keyring::parse(text).unwrap())
    }

    /// The raw `push` column of one service, as the store holds it.
    async fn raw_push(s: &Services, service: &str) -> Vec<u8> {
        s.store
            .list_services()
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.service == service)
            .unwrap()
            .push
    }

    fn contains(haystack: &[u8], needle: &str) -> bool {
        haystack
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    }

    fn with_header(url: &str) -> pb::PushTarget {
        pb::PushTarget {
            headers: HashMap::from([("X-Api-Key".into(), "receiver-api-key-42".into())]),
            ..target(url)
        }
    }

    #[tokio::test]
    async fn with_keys_secrets_and_header_values_are_stored_sealed() {
        let (a, b, _clock, _dir) = two_nodes().await;
        a.secrets().set(keys(KEY_1));
        let t = with_header("https://a.example/hook");
        let s = a.set_push("orders", Some(&t)).await.unwrap();
        // Answered and used in clear.
        let got = s.push.unwrap();
        assert_eq!(got.signing_secrets, t.signing_secrets);
        assert_eq!(got.headers, t.headers);
        // Stored sealed: neither the secret nor the header value is in the row; the URL is.
        let raw = raw_push(&a, "orders").await;
        assert!(!contains(&raw, &t.signing_secrets[0][6..]), "{raw:?}");
        assert!(!contains(&raw, "receiver-api-key-42"), "{raw:?}");
        assert!(contains(&raw, "https://a.example/hook"));
        let stored = pb::PushTarget::decode(raw.as_slice()).unwrap();
        assert!(seal::is_sealed(&stored.signing_secrets[0]));
        assert!(seal::is_sealed(&stored.headers["X-Api-Key"]));

        // A node without the key: the target is unusable, named by key and setting; nothing
        // to push with, and its pushers are told.
        let mut changes = b.push_changes();
        b.refresh().await.unwrap();
        assert!(b.push_targets().is_empty());
        let unusable = b.unusable_push_targets();
        assert_eq!(unusable.len(), 1);
        let (service, why) = &unusable[0];
        assert_eq!(service, "orders");
        assert!(
            why.contains("\"k1\"") && why.contains("REBOUND_SECRETS_KEY_FILE"),
            "{why}"
        );
        assert!(b.get("orders").unwrap().push.is_none());
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        // Given the key (SIGHUP), it opens at the next refresh.
        b.secrets().set(keys(&format!("{KEY_2}\n{KEY_1}")));
        b.refresh().await.unwrap();
        assert!(changes.has_changed().unwrap());
        assert!(b.unusable_push_targets().is_empty());
        assert_eq!(b.push_target("orders").unwrap().headers, t.headers);
        // Its next write uses its first key, which the other node does not hold.
        b.set_push("orders", Some(&t)).await.unwrap();
        let stored = pb::PushTarget::decode(raw_push(&b, "orders").await.as_slice()).unwrap();
        assert!(stored.signing_secrets[0].starts_with(&format!("{}k2:", seal::SEALED_PREFIX)));
        a.refresh().await.unwrap();
        assert!(a.push_targets().is_empty());
        assert!(a.unusable_push_targets()[0].1.contains("\"k2\""));
        // Setting the target again through a node fixes it for that node's keys.
        a.set_push("orders", Some(&t)).await.unwrap();
        assert!(a.unusable_push_targets().is_empty());
        assert_eq!(
            a.push_target("orders").unwrap().signing_secrets,
            t.signing_secrets
        );
        // Clearing an unusable target works.
        b.refresh().await.unwrap();
        assert!(b.clear_push("orders").await.unwrap());
        assert!(b.unusable_push_targets().is_empty());
    }

    #[tokio::test]
    async fn a_target_stored_in_clear_still_reads_and_the_next_write_seals_it() {
        let (a, _b, _clock, _dir) = two_nodes().await;
        let t = with_header("https://a.example/hook");
        a.set_push("orders", Some(&t)).await.unwrap();
        // Without keys: in clear, as before.
        let raw = raw_push(&a, "orders").await;
        assert!(contains(&raw, "receiver-api-key-42"));
        assert!(contains(&raw, &t.signing_secrets[0]));
        a.secrets().set(keys(KEY_1));
        a.refresh().await.unwrap();
        assert_eq!(a.push_target("orders").unwrap().headers, t.headers);
        a.set_push("orders", Some(&t)).await.unwrap();
        let raw = raw_push(&a, "orders").await;
        assert!(!contains(&raw, "receiver-api-key-42"));
        assert!(!contains(&raw, &t.signing_secrets[0][6..]));
        assert_eq!(
            a.push_target("orders").unwrap().signing_secrets,
            t.signing_secrets
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any stored bytes read as a target, none, or an unusable one; never a panic.
        #[test]
        fn stored_push_bytes_are_total(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let ring = keys(KEY_1);
            let _ = push_of("s", &bytes, None);
            let _ = push_of("s", &bytes, ring.as_ref());
        }
    }

    #[test]
    fn a_stored_target_that_no_longer_validates_is_ignored() {
        assert_eq!(push_of("s", b"", None), Ok(None));
        assert_eq!(push_of("s", b"\xff\xff\xff", None), Ok(None));
        let bad = pb::PushTarget {
            url: "ftp://x.example/".into(),
            ..target("https://x.example/")
        };
        assert_eq!(push_of("s", &bad.encode_to_vec(), None), Ok(None));
        let good = pb::PushTarget {
            updated_at: Some(ts(5_000)),
            ..target("https://x.example/")
        };
        assert_eq!(push_of("s", &good.encode_to_vec(), None), Ok(Some(good)));
    }
}
