//! The operator API: service settings, purge, dead letters and redrive, dependency holds,
//! statistics and window inspection, the operator half of the engine's `Handle`. Every
//! request is validated before anything is read or written. It answers in the API's protobuf
//! messages (`wire`); asking the other nodes for their part of the statistics is the node's
//! (`AskPeer`), as is every transport.
//!
//! Deletes made here, and the invariant that allows each:
//! - `PurgeService` deletes a bucket's Tier-5 partition only after every pointer in it is
//!   resolved: its retry was scheduled before `before` and is now CANCELLED, or the pointer
//!   is stale (an older generation, or a state row already terminal). A pointer whose state
//!   row may still land (younger than the orphan grace) or a retry scheduled at or after
//!   `before` keeps the bucket. Tier-4 and Tier-3 rows are deleted only in windows closed to
//!   writers (ended plus the skew margin: invariant 1), so no writer can add a bucket behind
//!   the delete; in open windows the dispatcher removes the then-empty rows as usual.
//! - `PurgeDeadLetters` deletes dead letters only (whole day partitions, or one range per
//!   day); the retries themselves stay DEAD until their terminal TTL.
//! - Redrive never deletes: a redriven letter is marked (`redriven_at`), so day partitions
//!   gain no row tombstones.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use futures::TryStreamExt;
use rebound_proto::v1 as pb;

use crate::policy::Rules as _;
use crate::window::WindowGrid;
use crate::wire::policy_pb;
use crate::{
    error::Error,
    handle::Handle,
    services::push_target as target,
    services::{Services, Settings},
    validate,
    walk::{Entry, Walk},
    writer::generation_ms,
};
use rebound_proto::time::{dur, ts};
use rebound_store::{
    window::{day_to_date, WindowId},
    Location, PointerState, Status, TokenRange,
};

pub mod act;
mod dead_letters;
mod holds;
pub mod list;
pub mod redrive;

pub use dead_letters::Cursor;

fn unknown_service(service: &str) -> Error {
    Error::NotFound(format!(
        "no service {service:?}: it was never enqueued to nor configured"
    ))
}

pub fn service_info(s: &Settings, services: &Services) -> pb::ServiceInfo {
    pb::ServiceInfo {
        service: s.service.clone(),
        paused: s.paused,
        policy: Some(s.policy.clone()),
        limits: Some(s.limits),
        paused_at: s.paused_at_ms.map(ts),
        updated_at: s.updated_at_ms.map(ts),
        effective_policy: Some(policy_pb(&services.default_policy().apply(&s.overrides))),
        push_target: s.push.as_ref().map(target::mask),
    }
}

fn no_push_target(service: &str) -> Error {
    Error::NotFound(format!("service {service:?} has no push target"))
}

impl Handle {
    fn grid(&self) -> WindowGrid {
        self.writer.grid()
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Now, on the clock the components run on.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// This node's in-flight deliveries and streams, by service.
    pub fn hub_stats(&self) -> HashMap<String, (u64, u32)> {
        self.hub.stats()
    }

    /// GetRing's answer: the live members and their token ranges, or this node alone with
    /// the whole ring when it was given a fixed ownership (no lease ring).
    pub async fn ring(&self) -> Result<pb::Ring, Error> {
        let nodes = match &self.ring {
            None => vec![pb::RingNode {
                node_id: self.node_id.to_string(),
                address: self.address.to_string(),
                compactor: true,
                ranges: vec![crate::wire::token_range_pb(&TokenRange::FULL)],
            }],
            Some(ring) => ring
                .view()
                .await?
                .into_iter()
                .map(|(m, compactor, ranges)| pb::RingNode {
                    node_id: m.node_id,
                    address: m.address,
                    compactor,
                    ranges: ranges.iter().map(crate::wire::token_range_pb).collect(),
                })
                .collect(),
        };
        Ok(pb::Ring { nodes })
    }

    /// The schema migrations the store reads as applied (the readiness probe's check that
    /// the store answers and was not dropped under the node).
    pub async fn applied_migrations(&self) -> Result<Vec<i32>, Error> {
        Ok(self.store.applied_migrations().await?)
    }

    /// A service's settings as the API shows them.
    pub fn service_info(&self, s: &Settings) -> pb::ServiceInfo {
        service_info(s, &self.services)
    }

    /// GetRetry: the names are checked, then the state row is read, with its compensation
    /// chain's progress. The caller's right to the service is the transport's to check first.
    pub async fn get_retry(
        &self,
        service: &str,
        transaction_id: &str,
    ) -> Result<(rebound_store::TxState, pb::Retry), Error> {
        validate::service("service", service)?;
        validate::transaction_id("transaction_id", transaction_id)?;
        let state = self.writer.get(service, transaction_id).await?;
        let chain = crate::wire::chain_progress(&self.writer, &state).await?;
        let retry = pb::Retry {
            chain,
            ..crate::wire::retry_pb(state.clone())
        };
        Ok((state, retry))
    }

    pub(crate) fn known(&self, service: &str) -> Result<(), Error> {
        validate::service("service", service)
    }

    /// A valid name of a service that exists: one that was enqueued to or configured (it has a row
    /// in `services`). An unknown service is NOT_FOUND (proto/rebound/v1/admin.proto), so a
    /// mistyped name reads as a mistake rather than as an empty service.
    pub(crate) async fn existing(&self, service: &str) -> Result<(), Error> {
        self.known(service)?;
        if self.services.get(service).is_some() || self.services.load(service).await?.is_some() {
            return Ok(());
        }
        Err(unknown_service(service))
    }

    pub async fn list_services(&self) -> Result<pb::ListServicesResponse, Error> {
        self.services.refresh().await?;
        Ok(pb::ListServicesResponse {
            services: self
                .services
                .all()
                .iter()
                .map(|s| service_info(s, &self.services))
                .collect(),
        })
    }

    pub async fn get_service(&self, service: &str) -> Result<pb::ServiceInfo, Error> {
        self.known(service)?;
        match self.services.load(service).await? {
            Some(s) => Ok(service_info(&s, &self.services)),
            None => Err(unknown_service(service)),
        }
    }

    pub async fn set_paused(&self, service: &str, paused: bool) -> Result<pb::ServiceInfo, Error> {
        self.known(service)?;
        let s = self.services.set_paused(service, paused).await?;
        if !paused {
            self.hub.wake();
        }
        Ok(service_info(&s, &self.services))
    }

    pub async fn set_policy(
        &self,
        r: &pb::SetServicePolicyRequest,
    ) -> Result<pb::SetServicePolicyResponse, Error> {
        let s = self.store_policy(r).await?;
        Ok(pb::SetServicePolicyResponse {
            policy: Some(s.policy.clone()),
            effective_policy: Some(policy_pb(
                &self.services.default_policy().apply(&s.overrides),
            )),
        })
    }

    /// Validates and stores a service's policy; answers the settings as written (no read
    /// after the write, whose failure would hide that the write happened).
    pub async fn store_policy(&self, r: &pb::SetServicePolicyRequest) -> Result<Settings, Error> {
        self.known(&r.service)?;
        let policy = r.policy.clone().unwrap_or_default();
        let overrides = validate::policy("policy", Some(&policy))?;
        let effective = self.services.default_policy().apply(&overrides);
        effective
            .validate()
            .map_err(|e| Error::invalid(format!("policy.{}", e.field), e.message))?;
        self.services.set_policy(&r.service, &policy).await
    }

    pub async fn set_limits(
        &self,
        r: &pb::SetServiceLimitsRequest,
    ) -> Result<pb::SetServiceLimitsResponse, Error> {
        let s = self.store_limits(r).await?;
        Ok(pb::SetServiceLimitsResponse {
            limits: Some(s.limits),
        })
    }

    /// Validates and stores a service's dispatch limits; answers the settings as written.
    pub async fn store_limits(&self, r: &pb::SetServiceLimitsRequest) -> Result<Settings, Error> {
        self.known(&r.service)?;
        let limits = r.limits.unwrap_or_default();
        if let Some(rate) = limits.max_dispatch_per_second {
            if !(rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0) {
                return Err(Error::invalid(
                    "limits.max_dispatch_per_second",
                    format!("must be more than 0 and at most 1000000, got {rate}"),
                ));
            }
        }
        if let Some(b) = limits.dispatch_burst {
            if b == 0 || b > 1_000_000 {
                return Err(Error::invalid(
                    "limits.dispatch_burst",
                    format!("must be between 1 and 1000000, got {b}"),
                ));
            }
            if limits.max_dispatch_per_second.is_none() {
                return Err(Error::invalid(
                    "limits.dispatch_burst",
                    "needs max_dispatch_per_second",
                ));
            }
        }
        if let Some(c) = limits.max_concurrent {
            if c == 0 || c > 1_000_000 {
                return Err(Error::invalid(
                    "limits.max_concurrent",
                    format!("must be between 1 and 1000000, got {c}"),
                ));
            }
        }
        self.services.set_limits(&r.service, &limits).await
    }

    /// SetPushTarget: validates the service name and the target, checks the addresses of its
    /// host as each push will (`push_address::check_address`: a refused address is INVALID_ARGUMENT,
    /// a name that does not resolve now is accepted), then stores the target (with
    /// `updated_at` now) and answers it as stored, secrets and header values masked. Like the
    /// other settings it may configure a service before its first enqueue.
    pub async fn set_push_target(
        &self,
        r: &pb::SetPushTargetRequest,
    ) -> Result<pb::SetPushTargetResponse, Error> {
        self.known(&r.service)?;
        let t = target::validate(r.target.as_ref())?;
        if let Some(why) =
            crate::services::push_address::check_address(&t, &self.push_allow).await?
        {
            tracing::info!(
                service = %r.service,
                "push target's host not judged when set ({why}); each request checks its \
                 addresses"
            );
        }
        let s = self.services.set_push(&r.service, Some(&t)).await?;
        tracing::info!(service = %r.service, "push target set");
        // Read back without it only if another node cleared it in between: answer what this
        // call wrote.
        let stored = s.push.unwrap_or(pb::PushTarget {
            updated_at: s.updated_at_ms.map(ts),
            ..t
        });
        Ok(pb::SetPushTargetResponse {
            target: Some(target::mask(&stored)),
        })
    }

    /// GetPushTarget: the stored target (read fresh), secrets and header values masked;
    /// NOT_FOUND when the service has none or is unknown; FAILED_PRECONDITION, naming the key
    /// id and `REBOUND_SECRETS_KEY_FILE`, when a sealed value of it does not open with this
    /// node's keys (nothing is pushed with it meanwhile).
    pub async fn get_push_target(
        &self,
        r: &pb::GetPushTargetRequest,
    ) -> Result<pb::PushTarget, Error> {
        self.known(&r.service)?;
        let s = self.services.load(&r.service).await?;
        if let Some(why) = s.as_ref().and_then(|s| s.push_unusable.clone()) {
            return Err(Error::FailedPrecondition(why));
        }
        s.and_then(|s| s.push)
            .map(|t| target::mask(&t))
            .ok_or_else(|| no_push_target(&r.service))
    }

    /// ClearPushTarget: deliveries of the service go to Subscribe streams again. `cleared`
    /// is false (and nothing is written) when the service had no target.
    pub async fn clear_push_target(
        &self,
        r: &pb::ClearPushTargetRequest,
    ) -> Result<pb::ClearPushTargetResponse, Error> {
        self.known(&r.service)?;
        let cleared = self.services.clear_push(&r.service).await?;
        if cleared {
            tracing::info!(service = %r.service, "push target cleared");
            // Streams of the service may take its retries again.
            self.hub.wake();
        }
        Ok(pb::ClearPushTargetResponse { cleared })
    }

    /// Every (window, instance) of `service` in the directory (all token ranges), oldest
    /// first, with the window filter applied.
    async fn directory(&self, service: Option<&str>) -> Result<Vec<Entry>, Error> {
        let now = self.clock.now_ms();
        let year = self.grid().window_of(now).year();
        // Every year that holds a day (a backlog of any age), and next year's early days.
        let walk = Walk(&*self.store);
        let years = walk.years(&[year - 1, year, year + 1], None).await?;
        Ok(walk.entries(&years, service).await?)
    }

    pub async fn purge_service(
        &self,
        r: &pb::PurgeServiceRequest,
    ) -> Result<pb::PurgeServiceResponse, Error> {
        self.known(&r.service)?;
        let now = self.clock.now_ms();
        let before = match &r.before {
            Some(t) => validate::timestamp_ms("before", t)?,
            None => now,
        };
        let max_buckets = u64::from(validate::count("max_buckets", r.max_buckets, 100, 10_000)?);
        self.existing(&r.service).await?;
        let mut resp = pb::PurgeServiceResponse {
            done: true,
            before: Some(ts(before)),
            ..Default::default()
        };
        let mut handled = 0u64;
        'walk: for entry in self.directory(Some(&r.service)).await? {
            let closed =
                self.grid()
                    .is_readable(entry.window, self.clock.now_ms(), self.skew_margin_ms);
            let mut all_deleted = true;
            for bucket in &entry.buckets {
                if handled >= max_buckets {
                    resp.done = false;
                    break 'walk;
                }
                let loc = Location {
                    window: entry.window,
                    instance: entry.row.instance.clone(),
                    bucket: *bucket,
                };
                let (cancelled, pointers, keep) =
                    self.purge_bucket(&r.service, &loc, before).await?;
                resp.cancelled += cancelled;
                // The budget counts buckets this call changed. A bucket kept with nothing
                // left to cancel is passed again by every later call: counting it would let
                // max_buckets such buckets stop every call before any progress.
                if pointers > 0 && (cancelled > 0 || !keep) {
                    handled += 1;
                }
                if keep {
                    resp.buckets_kept += 1;
                    all_deleted = false;
                    continue;
                }
                if pointers > 0 {
                    self.store
                        .delete_pointer_partition(&r.service, &loc)
                        .await?;
                    resp.buckets_deleted += 1;
                }
                if closed {
                    self.store
                        .delete_bucket(entry.window, &r.service, &loc.instance, *bucket)
                        .await?;
                }
            }
            if closed && all_deleted {
                self.store.delete_instance(entry.window, &entry.row).await?;
            }
        }
        tracing::info!(service = %r.service, before, cancelled = resp.cancelled, deleted = resp.buckets_deleted, kept = resp.buckets_kept, done = resp.done, "purged service");
        Ok(resp)
    }

    /// Cancels the bucket's live retries scheduled before `before`. Returns (cancelled,
    /// pointers seen, whether the bucket must be kept).
    async fn purge_bucket(
        &self,
        service: &str,
        loc: &Location,
        before: i64,
    ) -> Result<(u64, u64, bool), Error> {
        let mut pointers = self.store.stream_pointers(service, loc).await?;
        let (mut cancelled, mut seen, mut keep) = (0u64, 0u64, false);
        while let Some(p) = pointers.try_next().await? {
            seen += 1;
            let _lock = self
                .writer
                .lock_transaction(service, &p.transaction_id)
                .await;
            let state = self.store.get_state(service, &p.transaction_id).await?;
            match PointerState::of(&p, state, self.clock.now_ms(), self.orphan_grace_ms) {
                PointerState::Live(s) if generation_ms(s.generation) < before => {
                    self.writer.finish(*s, Status::Cancelled).await?;
                    cancelled += 1;
                }
                PointerState::Live(_) | PointerState::Landing => keep = true,
                PointerState::Orphan if p.enqueued_at_ms >= before => keep = true,
                PointerState::Orphan | PointerState::Stale => {}
            }
        }
        Ok((cancelled, seen, keep))
    }

    /// This node's part of the statistics: in-flight deliveries and streams per service.
    fn local_stats(&self) -> (HashMap<String, (u64, u32)>, pb::NodeStats) {
        let hub = self.hub.stats();
        let node = pb::NodeStats {
            node_id: self.node_id.to_string(),
            address: self.address.to_string(),
            held_slots: if self.ring.is_some() {
                self.ownership.held().len() as u32
            } else {
                self.slots
            },
            compactor: self.ownership.is_compactor(self.clock.now_ms()),
            in_flight: hub.values().map(|v| v.0).sum(),
            subscribers: hub.values().map(|v| v.1).sum(),
            reachable: true,
            clock_offset_ms: self.clock.offset_ms(),
        };
        (hub, node)
    }

    /// Every node's part of the statistics, without walking the directory: this node's, and
    /// that of each other live member of the ring, asked in parallel (GetStats `local_only`,
    /// with the caller's `authorization`; a member that does not answer is listed
    /// unreachable). Returns the in-flight deliveries by service summed over the nodes (of
    /// `service` only when not empty) and the nodes by id.
    pub async fn nodes(
        &self,
        service: &str,
        authorization: Option<String>,
    ) -> Result<(HashMap<String, u64>, Vec<pb::NodeStats>), Error> {
        let (local, me) = self.local_stats();
        let mut in_flight: HashMap<String, u64> =
            local.iter().map(|(s, v)| (s.clone(), v.0)).collect();
        let mut nodes = vec![me];
        if let (Some(ring), Some(peers)) = (&self.ring, &self.peers) {
            let members = ring.view().await?;
            let asks = members
                .into_iter()
                .filter(|(m, _, _)| *m.node_id != *self.node_id)
                .map(|(m, _, _)| {
                    let service = service.to_string();
                    let authorization = authorization.clone();
                    async move {
                        let got = peers.local_stats(&m.address, service, authorization).await;
                        (m, got)
                    }
                });
            for (m, got) in futures::future::join_all(asks).await {
                match got {
                    Ok(resp) => {
                        for s in resp.services {
                            *in_flight.entry(s.service).or_default() += s.in_flight;
                        }
                        nodes.extend(resp.nodes);
                    }
                    Err(e) => {
                        tracing::debug!(node = %m.node_id, error = %e, "peer did not answer GetStats");
                        nodes.push(pb::NodeStats {
                            node_id: m.node_id,
                            address: m.address,
                            reachable: false,
                            ..Default::default()
                        });
                    }
                }
            }
        }
        nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        Ok((in_flight, nodes))
    }

    pub async fn stats(
        &self,
        r: &pb::GetStatsRequest,
        authorization: Option<String>,
    ) -> Result<pb::GetStatsResponse, Error> {
        if !r.service.is_empty() {
            if r.local_only {
                // A peer asking for its in-flight counts: the asking node checked the name.
                self.known(&r.service)?;
            } else {
                self.existing(&r.service).await?;
            }
        }
        let only = (!r.service.is_empty()).then_some(r.service.as_str());
        if r.local_only {
            let (local, me) = self.local_stats();
            return Ok(pb::GetStatsResponse {
                services: local
                    .into_iter()
                    .filter(|(s, _)| only.is_none_or(|o| o == s))
                    .map(|(service, (in_flight, _))| pb::ServiceStats {
                        service,
                        in_flight,
                        ..Default::default()
                    })
                    .collect(),
                nodes: vec![me],
                holds: Vec::new(),
            });
        }
        let (in_flight, nodes) = self.nodes(&r.service, authorization).await?;

        // Pending: walk the directory once and count each bucket's pointers.
        let now = self.clock.now_ms();
        let grid = self.grid();
        let mut per: BTreeMap<String, pb::ServiceStats> = BTreeMap::new();
        self.services.refresh().await?;
        for s in self.services.all() {
            if only.is_none_or(|o| o == s.service) {
                per.entry(s.service.clone()).or_default().paused = s.paused;
            }
        }
        let backlog = crate::backlog::measure(&self.store, &grid, now, only, 0, None).await?;
        for (service, b) in backlog {
            let st = per.entry(service).or_default();
            st.pending = b.pending;
            st.bands = Some(pb::DueBands {
                overdue: b.bands.overdue,
                within_minute: b.bands.within_minute,
                within_hour: b.bands.within_hour,
                within_day: b.bands.within_day,
                later: b.bands.later,
            });
            st.oldest_due_age = b
                .oldest_due_age_ms
                .map(|age| dur(Duration::from_millis(age.max(0) as u64)));
            st.windows = b
                .windows
                .into_iter()
                .map(|(window, n)| pb::WindowCount {
                    day: day_to_date(window.day).to_string(),
                    window: window.index,
                    pending: n,
                    window_start: Some(ts(grid.start_ms(window))),
                })
                .collect();
        }
        // Dead letters within the retention period, not redriven.
        let names: Vec<String> = per.keys().cloned().collect();
        for service in names {
            let q = self.letter_query(&service, None, None, "")?;
            let mut n = 0u64;
            self.each_letter(&q, None, false, |_, _| {
                n += 1;
                true
            })
            .await?;
            let st = per.get_mut(&service).expect("listed");
            st.dead_lettered = n;
        }
        for (service, n) in in_flight {
            if only.is_none_or(|o| o == service) {
                per.entry(service).or_default().in_flight = n;
            }
        }
        Ok(pb::GetStatsResponse {
            services: per
                .into_iter()
                .map(|(service, mut s)| {
                    s.service = service;
                    s.bands.get_or_insert_with(Default::default);
                    s
                })
                .collect(),
            nodes,
            holds: self
                .holds
                .list()
                .await?
                .into_iter()
                .map(holds::hold_pb)
                .collect(),
        })
    }

    pub async fn inspect_window(
        &self,
        r: &pb::InspectWindowRequest,
    ) -> Result<pb::InspectWindowResponse, Error> {
        let day = validate::day("day", &r.day)?;
        let grid = self.grid();
        if r.window >= grid.windows_per_day() {
            return Err(Error::invalid(
                "window",
                format!(
                    "must be below {} ({}s windows), got {}",
                    grid.windows_per_day(),
                    grid.window_ms() / 1000,
                    r.window
                ),
            ));
        }
        let window = WindowId {
            day,
            index: r.window,
        };
        let mut instances = Vec::new();
        for row in self.store.list_instances(window, TokenRange::FULL).await? {
            let mut buckets = Vec::new();
            for bucket in self
                .store
                .list_buckets(window, &row.service, &row.instance)
                .await?
            {
                let loc = Location {
                    window,
                    instance: row.instance.clone(),
                    bucket,
                };
                buckets.push(pb::BucketEntry {
                    bucket,
                    pointers: self.store.count_pointers(&row.service, &loc).await?,
                });
            }
            instances.push(pb::InstanceEntry {
                instance_token: row.instance_token,
                service: row.service,
                instance: row.instance,
                buckets,
            });
        }
        Ok(pb::InspectWindowResponse {
            day_listed: self.store.day_listed(window.year(), window.day).await?,
            window_listed: self.store.window_listed(window).await?,
            instances,
            window_start: Some(ts(grid.start_ms(window))),
            window_end: Some(ts(grid.end_ms(window))),
            readable: grid.is_readable(window, self.clock.now_ms(), self.skew_margin_ms),
            low_water: self.store.low_water(window.day).await?,
            window_seconds: (grid.window_ms() / 1000) as u32,
        })
    }
}
