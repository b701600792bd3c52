//! The operator API (issue 5): service settings, purge, dead letters, statistics and window
//! inspection. Every request is validated before anything is read or written.
//!
//! Deletes made here, and the invariant that allows each:
//! - `PurgeService` deletes a bucket's Tier-5 partition only after every pointer in it is
//!   resolved: its retry was scheduled before `before` and is now CANCELLED, or the pointer
//!   is stale (an older generation, or a state row already terminal). A pointer whose state
//!   row may still land (younger than the orphan grace) or a retry scheduled at or after
//!   `before` keeps the bucket. Tier-4 and Tier-3 rows are deleted only in windows closed to
//!   writers (W+1 plus the skew margin), so no writer can add a bucket behind the delete; in
//!   open windows the dispatcher removes the then-empty rows as usual.
//! - `PurgeDeadLetters` deletes dead letters only (whole day partitions, or one range per
//!   day); the retries themselves stay DEAD until their terminal TTL.
//! - Redrive never deletes: a redriven letter is marked (`redriven_at`), so day partitions
//!   gain no row tombstones.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};

use futures::TryStreamExt;
use rebound_proto::v1 as pb;

use crate::{
    clock::SharedClock,
    dispatch::hub::Hub,
    error::Error,
    ownership::Ownership,
    ring::LeaseRing,
    services::{Services, Settings},
    store::{DeadLetter, Location, PointerState, RetryStore, Status, TokenRange},
    validate,
    walk::{Entry, Walk},
    window::{day_to_date, WindowGrid, WindowId, DAY_MS},
    wire::{dur, policy_pb, ts},
    writer::{generation_ms, Writer},
};

/// Longest time range a dead-letter call may cover.
const MAX_DLQ_RANGE_DAYS: i64 = 400;
const MAX_ERROR_FILTER_BYTES: usize = 1024;

/// Everything the admin calls need from the node.
#[derive(Debug)]
pub struct Admin {
    pub store: Arc<dyn RetryStore>,
    pub services: Arc<Services>,
    pub writer: Arc<Writer>,
    pub hub: Arc<Hub>,
    pub ownership: Arc<dyn Ownership>,
    pub ring: Option<Arc<LeaseRing>>,
    pub clock: SharedClock,
    pub node_id: String,
    pub address: String,
    pub slots: u32,
    pub skew_margin_ms: i64,
    pub orphan_grace_ms: i64,
    pub dead_letter_retention_seconds: u32,
    /// TLS for asking peers (None: in clear).
    pub peer_tls: Option<std::sync::Arc<crate::tls::ServerTls>>,
}

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
    }
}

/// A dead-letter query after validation.
pub(crate) struct LetterQuery {
    service: String,
    from_ms: i64,
    to_ms: i64,
    error_contains: String,
}

/// Where a listing stopped: the last letter returned. Its text form is the `page_token` of
/// ListDeadLetters: `v1.<day>.<dead_at_ms>.<transaction id as lower-case hex>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor {
    pub day: i32,
    pub dead_at_ms: i64,
    pub transaction_id: String,
}

/// The value of one ASCII hex digit.
fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

impl Cursor {
    pub fn encode(&self) -> String {
        let hex: String = self
            .transaction_id
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("v1.{}.{}.{hex}", self.day, self.dead_at_ms)
    }

    /// Parses a `page_token`. Total: any text is a cursor or a `page_token` error (the token
    /// comes from the client, so it may be anything, multi-byte characters included).
    pub fn decode(token: &str) -> Result<Cursor, Error> {
        let bad = || Error::invalid("page_token", "is not a token returned by ListDeadLetters");
        let mut parts = token.splitn(4, '.');
        if parts.next() != Some("v1") {
            return Err(bad());
        }
        let day: i32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let dead_at_ms: i64 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let hex = parts.next().ok_or_else(bad)?.as_bytes();
        if hex.len() % 2 != 0 || hex.len() > 2 * validate::MAX_TRANSACTION_ID_BYTES {
            return Err(bad());
        }
        // Pairs of bytes, not of string indices: a multi-byte character is refused here
        // rather than sliced through.
        let bytes = hex
            .chunks_exact(2)
            .map(|pair| Some((hex_digit(pair[0])? << 4) | hex_digit(pair[1])?))
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(bad)?;
        let transaction_id = String::from_utf8(bytes).map_err(|_| bad())?;
        Ok(Cursor {
            day,
            dead_at_ms,
            transaction_id,
        })
    }

    /// Whether a letter comes after this cursor in listing order.
    fn before(&self, l: &DeadLetter) -> bool {
        (l.day, l.dead_at_ms, l.transaction_id.as_str())
            > (self.day, self.dead_at_ms, self.transaction_id.as_str())
    }
}

impl Admin {
    fn grid(&self) -> WindowGrid {
        self.writer.grid()
    }

    pub(crate) fn known(&self, service: &str) -> Result<(), Error> {
        validate::service("service", service)
    }

    /// A valid name of a service that exists: one that was enqueued to or configured (it has
    /// a row in `services`). DESIGN.md: an unknown service is NOT_FOUND, so a mistyped name
    /// reads as a mistake rather than as an empty service.
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
        let max_buckets = match r.max_buckets {
            0 => 100,
            n if n <= 10_000 => n as u64,
            n => {
                return Err(Error::invalid(
                    "max_buckets",
                    format!("must be between 1 and 10000, got {n}"),
                ))
            }
        };
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

    pub(crate) fn letter_query(
        &self,
        service: &str,
        from: Option<&prost_types::Timestamp>,
        to: Option<&prost_types::Timestamp>,
        error_contains: &str,
    ) -> Result<LetterQuery, Error> {
        self.known(service)?;
        let now = self.clock.now_ms();
        let to_ms = to.map(|t| validate::timestamp_ms("to", t)).transpose()?;
        let to_ms = to_ms.unwrap_or(now + 1);
        let from_ms = from
            .map(|t| validate::timestamp_ms("from", t))
            .transpose()?;
        let from_ms = from_ms.unwrap_or_else(|| {
            to_ms - i64::from(self.dead_letter_retention_seconds) * 1000 - DAY_MS
        });
        if from_ms >= to_ms {
            return Err(Error::invalid("from", "must be before to"));
        }
        if to_ms - from_ms > MAX_DLQ_RANGE_DAYS * DAY_MS {
            return Err(Error::invalid(
                "from",
                format!("the range from..to must be at most {MAX_DLQ_RANGE_DAYS} days"),
            ));
        }
        if error_contains.len() > MAX_ERROR_FILTER_BYTES {
            return Err(Error::invalid(
                "error_contains",
                format!(
                    "must be at most {MAX_ERROR_FILTER_BYTES} bytes, got {}",
                    error_contains.len()
                ),
            ));
        }
        Ok(LetterQuery {
            service: service.to_string(),
            from_ms,
            to_ms,
            error_contains: error_contains.to_string(),
        })
    }

    fn days(q: &LetterQuery) -> std::ops::RangeInclusive<i32> {
        let first = q.from_ms.div_euclid(DAY_MS) as i32;
        let last = (q.to_ms - 1).div_euclid(DAY_MS) as i32;
        first..=last
    }

    /// Matching letters in order, after `cursor`, until `f` says stop.
    pub(crate) async fn each_letter<F>(
        &self,
        q: &LetterQuery,
        cursor: Option<&Cursor>,
        include_redriven: bool,
        mut f: F,
    ) -> Result<bool, Error>
    where
        F: FnMut(DeadLetter, Option<i64>) -> bool,
    {
        for day in Self::days(q) {
            if cursor.is_some_and(|c| c.day > day) {
                continue;
            }
            let from = match cursor {
                Some(c) if c.day == day => q.from_ms.max(c.dead_at_ms),
                _ => q.from_ms,
            };
            let mut rows = self
                .store
                .stream_dead_letters(&q.service, day, from, q.to_ms)
                .await?;
            while let Some(row) = rows.try_next().await? {
                if cursor.is_some_and(|c| !c.before(&row.letter)) {
                    continue;
                }
                if !include_redriven && row.redriven_at_ms.is_some() {
                    continue;
                }
                if !q.error_contains.is_empty()
                    && !row.letter.last_error.contains(&q.error_contains)
                {
                    continue;
                }
                if !f(row.letter, row.redriven_at_ms) {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    pub async fn list_dead_letters(
        &self,
        r: &pb::ListDeadLettersRequest,
    ) -> Result<pb::ListDeadLettersResponse, Error> {
        let q = self.letter_query(
            &r.service,
            r.from.as_ref(),
            r.to.as_ref(),
            &r.error_contains,
        )?;
        self.existing(&r.service).await?;
        let page_size = match r.page_size {
            0 => 100,
            n if n <= 1000 => n as usize,
            n => {
                return Err(Error::invalid(
                    "page_size",
                    format!("must be between 1 and 1000, got {n}"),
                ))
            }
        };
        let cursor = (!r.page_token.is_empty())
            .then(|| Cursor::decode(&r.page_token))
            .transpose()?;
        let mut page: Vec<(DeadLetter, Option<i64>)> = Vec::new();
        let mut more = false;
        self.each_letter(&q, cursor.as_ref(), r.include_redriven, |l, red| {
            if page.len() == page_size {
                more = true;
                return false;
            }
            page.push((l, red));
            true
        })
        .await?;
        let next_page_token = match (more, page.last()) {
            (true, Some((l, _))) => Cursor {
                day: l.day,
                dead_at_ms: l.dead_at_ms,
                transaction_id: l.transaction_id.clone(),
            }
            .encode(),
            _ => String::new(),
        };
        Ok(pb::ListDeadLettersResponse {
            dead_letters: page
                .into_iter()
                .map(|(l, red)| pb::DeadLetter {
                    service: l.service,
                    transaction_id: l.transaction_id,
                    attempt: l.attempt,
                    last_error: l.last_error,
                    dead_at: Some(ts(l.dead_at_ms)),
                    redriven_at: red.map(ts),
                })
                .collect(),
            next_page_token,
        })
    }

    pub async fn purge_dead_letters(
        &self,
        r: &pb::PurgeDeadLettersRequest,
    ) -> Result<pb::PurgeDeadLettersResponse, Error> {
        let q = self.letter_query(&r.service, r.from.as_ref(), r.to.as_ref(), "")?;
        self.existing(&r.service).await?;
        let mut purged = 0u64;
        for day in Self::days(&q) {
            let (start, end) = (i64::from(day) * DAY_MS, i64::from(day + 1) * DAY_MS);
            let (from, to) = (q.from_ms.max(start), q.to_ms.min(end));
            let n = self
                .store
                .stream_dead_letters(&q.service, day, from, to)
                .await?
                .try_fold(0u64, |n, _| async move { Ok(n + 1) })
                .await?;
            if n == 0 {
                continue;
            }
            if from == start && to == end {
                self.store.delete_dead_letter_day(&q.service, day).await?;
            } else {
                self.store
                    .delete_dead_letter_range(&q.service, day, from, to)
                    .await?;
            }
            purged += n;
        }
        tracing::info!(service = %r.service, purged, "purged dead letters");
        Ok(pb::PurgeDeadLettersResponse { purged })
    }

    /// This node's part of the statistics: in-flight deliveries and streams per service.
    fn local_stats(&self) -> (HashMap<String, (u64, u32)>, pb::NodeStats) {
        let hub = self.hub.stats();
        let node = pb::NodeStats {
            node_id: self.node_id.clone(),
            address: self.address.clone(),
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
        authorization: Option<tonic::metadata::AsciiMetadataValue>,
    ) -> Result<(HashMap<String, u64>, Vec<pb::NodeStats>), Error> {
        let (local, me) = self.local_stats();
        let mut in_flight: HashMap<String, u64> =
            local.iter().map(|(s, v)| (s.clone(), v.0)).collect();
        let mut nodes = vec![me];
        if let Some(ring) = &self.ring {
            let members = ring.view().await?;
            let asks = members
                .into_iter()
                .filter(|(m, _, _)| m.node_id != self.node_id)
                .map(|(m, _, _)| {
                    let service = service.to_string();
                    let authorization = authorization.clone();
                    let tls = self.peer_tls.as_ref().map(|t| t.peer());
                    async move {
                        let got = ask_peer(&m.address, service, authorization, tls).await;
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
        authorization: Option<tonic::metadata::AsciiMetadataValue>,
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

/// GetStats(local_only) on a peer, with a short deadline.
async fn ask_peer(
    address: &str,
    service: String,
    authorization: Option<tonic::metadata::AsciiMetadataValue>,
    tls: Option<tonic::transport::ClientTlsConfig>,
) -> Result<pb::GetStatsResponse, String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = if address.contains("://") {
        address.to_string()
    } else {
        format!("{scheme}://{address}")
    };
    let mut endpoint = tonic::transport::Endpoint::from_shared(url)
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(2));
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls).map_err(|e| e.to_string())?;
    }
    let channel = endpoint.connect().await.map_err(|e| e.to_string())?;
    let mut request = tonic::Request::new(pb::GetStatsRequest {
        service,
        local_only: true,
    });
    if let Some(a) = authorization {
        request.metadata_mut().insert("authorization", a);
    }
    pb::admin_service_client::AdminServiceClient::new(channel)
        .get_stats(request)
        .await
        .map(|r| r.into_inner())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_junk() {
        let c = Cursor {
            day: 20_000,
            dead_at_ms: 1_700_000_000_123,
            transaction_id: "order-7/é.x".into(),
        };
        assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
        for junk in [
            "",
            "v1",
            "v2.1.2.00",
            "v1.x.2.00",
            "v1.1.2.0",
            "v1.1.2.zz",
            "v1.1.2.ff",
        ] {
            let e = Cursor::decode(junk).unwrap_err();
            assert!(e.to_string().starts_with("page_token:"), "{junk}: {e}");
        }
    }

    #[test]
    fn a_page_token_with_a_multibyte_character_is_refused_not_sliced() {
        // Issue 14: the hex part "aéb" is 4 bytes, so pairs of string indices cut the é.
        for token in ["v1.0.0.aéb", "v1.0.0.é", "v1.0.0.éé", "v1.1.2.0é0"] {
            let e = Cursor::decode(token).unwrap_err();
            assert_eq!(
                e.to_string(),
                "page_token: is not a token returned by ListDeadLetters",
                "{token}"
            );
        }
        // A sign is no hex digit (`u8::from_str_radix` would take "+f").
        assert!(Cursor::decode("v1.1.2.+f").is_err());
        // Hex digits in either case.
        let c = Cursor::decode("v1.1.2.4A4b").unwrap();
        assert_eq!(c.transaction_id, "JK");
    }

    mod props {
        use proptest::prelude::*;

        use super::*;

        /// Text that looks like a token: the prefix, numbers and dots, then anything,
        /// multi-byte characters included.
        fn token_like() -> impl Strategy<Value = String> {
            prop_oneof![
                "v1\\.[0-9.]{0,10}.{0,5}",
                "v1\\.-?[0-9]{1,6}\\.-?[0-9]{1,14}\\.[0-9a-fA-F+é€ -]{0,12}",
                "(?s).{0,64}",
            ]
        }

        fn page_token_error(e: &Error) -> bool {
            matches!(e, Error::InvalidArgument { field, .. } if field == "page_token")
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn page_token_decode_is_total(s in any::<String>()) {
                if let Err(e) = Cursor::decode(&s) {
                    prop_assert!(page_token_error(&e), "{e}");
                }
            }

            #[test]
            fn page_token_decode_is_total_on_token_like_text(s in token_like()) {
                match Cursor::decode(&s) {
                    // Whatever decodes encodes to a token that decodes the same.
                    Ok(c) => prop_assert_eq!(Cursor::decode(&c.encode()).unwrap(), c),
                    Err(e) => prop_assert!(page_token_error(&e), "{e}"),
                }
            }

            #[test]
            fn page_token_decode_is_total_on_bytes(
                prefix in prop::sample::select(vec!["", "v1.", "v1.0.0.", "v1.-3.17."]),
                bytes in prop::collection::vec(any::<u8>(), 0..48),
            ) {
                let s = format!("{prefix}{}", String::from_utf8_lossy(&bytes));
                if let Err(e) = Cursor::decode(&s) {
                    prop_assert!(page_token_error(&e), "{e}");
                }
            }

            #[test]
            fn page_tokens_round_trip(
                day in any::<i32>(),
                dead_at_ms in any::<i64>(),
                // At most 64 characters of up to 4 bytes: within MAX_TRANSACTION_ID_BYTES.
                transaction_id in "(?s).{0,64}",
            ) {
                let c = Cursor { day, dead_at_ms, transaction_id };
                prop_assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
            }
        }
    }
}
