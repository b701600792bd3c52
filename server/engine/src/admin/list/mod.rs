//! ListRetries: a service's scheduled retries, read from the directory that already orders
//! them by window (docs/architecture.md, "Listing retries"), filtered on their state rows,
//! a bounded part of the directory per call, with a `page_token` cursor; then, when asked for,
//! the ones in flight on every node (`in_flight`), the dead ones, and the succeeded and
//! cancelled ones of the finished log (`finished`).

mod finished;
mod in_flight;
mod token;

use token::{finished_token, Part, Resume, DEAD_TOKEN};
pub use token::{Position, SortedAt};

use std::collections::BTreeMap;

use futures::TryStreamExt;
use rebound_proto::time::ts;
use rebound_proto::v1 as pb;
use rebound_store::{window::WindowId, Location, Status, TxState};

use super::Cursor;
use crate::{error::Error, handle::Handle, validate, walk::Walk};

/// Rows per page when the request does not say, and at most.
pub const DEFAULT_PAGE_SIZE: u32 = 100;
pub const MAX_PAGE_SIZE: u32 = 500;
/// What one call reads at most before it answers with a token: pointers, and windows of the
/// directory (empty ones included), so that no call walks a whole backlog.
const MAX_POINTERS_READ: usize = 5_000;
const MAX_WINDOWS_READ: usize = 400;
/// A window whose pointers of the service number at most this many is listed by due time
/// (its pointers read whole, sorted, and only the page's state rows read); a larger one in
/// the order its pointers are stored. One call reads at most `MAX_POINTERS_SORTED` pointers
/// for sorting before it answers.
const MAX_SORTED_WINDOW: usize = 20_000;
const MAX_POINTERS_SORTED: usize = 40_000;
/// State rows read per request.
const STATE_CHUNK: usize = 100;
const MAX_ERROR_FILTER_BYTES: usize = 1024;
/// At most this many attribute filters (as many as a retry may carry).
const MAX_ATTRIBUTE_FILTERS: usize = 64;

/// A ListRetries request after validation.
#[derive(Debug)]
pub(super) struct Query {
    pub(super) service: String,
    due_after: Option<i64>,
    due_before: Option<i64>,
    attributes: BTreeMap<String, String>,
    dependency: String,
    error_contains: String,
    saga_transaction_id: String,
    page_size: usize,
    /// Where the scheduled part resumes (None: at the start, or it is done).
    cursor: Option<Position>,
    /// Where it resumes in a window listed by due time.
    sorted_after: Option<SortedAt>,
    /// The parts asked for, in the order they are listed.
    parts: Vec<Part>,
    /// Where the listing resumes: which part, and where in it.
    resume: Resume,
    /// Only this node's retries in flight (a peer asking).
    local_only: bool,
    /// The request a peer is asked for its retries in flight: these filters, `local_only`.
    peer_request: pb::ListRetriesRequest,
}

impl Query {
    /// Whether a live retry belongs in the listing.
    pub(super) fn matches(&self, s: &TxState) -> bool {
        self.due_after.is_none_or(|t| s.due_at_ms >= t)
            && self.due_before.is_none_or(|t| s.due_at_ms < t)
            && self
                .attributes
                .iter()
                .all(|(k, v)| s.attributes.get(k) == Some(v))
            && (self.dependency.is_empty() || s.dependency == self.dependency)
            && (self.error_contains.is_empty() || s.last_error.contains(&self.error_contains))
            && (self.saga_transaction_id.is_empty() || {
                let chain = s.saga.chain.as_ref();
                chain.is_some_and(|c| c.saga_transaction_id == self.saga_transaction_id)
                    || (chain.is_none()
                        && !s.saga.compensations.is_empty()
                        && s.transaction_id == self.saga_transaction_id)
            })
    }
}

pub(super) fn query(r: &pb::ListRetriesRequest) -> Result<Query, Error> {
    validate::service("service", &r.service)?;
    let mut parts = Vec::new();
    for (i, s) in r.statuses.iter().enumerate() {
        parts.push(match pb::RetryStatus::try_from(*s) {
            Ok(pb::RetryStatus::Scheduled) => Part::Scheduled,
            Ok(pb::RetryStatus::InFlight) => Part::InFlight,
            Ok(pb::RetryStatus::Dead) => Part::Dead,
            Ok(pb::RetryStatus::Succeeded) => Part::Succeeded,
            Ok(pb::RetryStatus::Cancelled) => Part::Cancelled,
            Ok(pb::RetryStatus::Unspecified) | Err(_) => {
                return Err(Error::invalid(
                    format!("statuses[{i}]"),
                    format!("{s} is not a RetryStatus"),
                ))
            }
        });
    }
    if parts.is_empty() {
        parts.push(Part::Scheduled);
    }
    parts.sort();
    parts.dedup();
    let due_after = r
        .due_after
        .as_ref()
        .map(|t| validate::timestamp_ms("due_after", t))
        .transpose()?;
    let due_before = r
        .due_before
        .as_ref()
        .map(|t| validate::timestamp_ms("due_before", t))
        .transpose()?;
    if let (Some(a), Some(b)) = (due_after, due_before) {
        if a >= b {
            return Err(Error::invalid("due_after", "must be before due_before"));
        }
    }
    if r.attributes.len() > MAX_ATTRIBUTE_FILTERS {
        return Err(Error::invalid(
            "attributes",
            format!(
                "at most {MAX_ATTRIBUTE_FILTERS} filters, got {}",
                r.attributes.len()
            ),
        ));
    }
    validate::attributes("attributes", &r.attributes)?;
    if !r.dependency.is_empty() {
        validate::dependency("dependency", &r.dependency)?;
    }
    if r.error_contains.len() > MAX_ERROR_FILTER_BYTES {
        return Err(Error::invalid(
            "error_contains",
            format!(
                "must be at most {MAX_ERROR_FILTER_BYTES} bytes, got {}",
                r.error_contains.len()
            ),
        ));
    }
    if !r.saga_transaction_id.is_empty() {
        validate::transaction_id("saga_transaction_id", &r.saga_transaction_id)?;
    }
    let page_size = validate::count("page_size", r.page_size, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)?;
    if r.local_only && (parts != [Part::InFlight] || !r.page_token.is_empty()) {
        return Err(Error::invalid(
            "local_only",
            "is for IN_FLIGHT listings alone, without a page_token",
        ));
    }
    let resume = Resume::decode(&r.page_token)?;
    if let Some(part) = resume.part().filter(|p| !parts.contains(p)) {
        return Err(Error::invalid(
            "page_token",
            format!("is a token of a listing of {part:?} retries; ask for the same statuses"),
        ));
    }
    let (cursor, sorted_after) = match &resume {
        Resume::Scheduled(p) => (Some(p.clone()), None),
        Resume::Sorted(at) => (Some(Position::window_start(at.window)), Some(at.clone())),
        _ => (None, None),
    };
    Ok(Query {
        service: r.service.clone(),
        due_after,
        due_before,
        attributes: r
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        dependency: r.dependency.clone(),
        error_contains: r.error_contains.clone(),
        saga_transaction_id: r.saga_transaction_id.clone(),
        page_size: page_size as usize,
        cursor,
        sorted_after,
        parts,
        resume,
        local_only: r.local_only,
        peer_request: pb::ListRetriesRequest {
            statuses: vec![pb::RetryStatus::InFlight as i32],
            page_size: 0,
            page_token: String::new(),
            local_only: true,
            ..r.clone()
        },
    })
}

/// The row of a listing for `s`.
fn summary_of(s: &TxState) -> pb::RetrySummary {
    let (chain_position, saga_transaction_id) = match &s.saga.chain {
        Some(c) => (c.position, c.saga_transaction_id.clone()),
        None if !s.saga.compensations.is_empty() => (0, s.transaction_id.clone()),
        None => (0, String::new()),
    };
    pb::RetrySummary {
        status: crate::wire::status_pb(s.status) as i32,
        attempt: s.attempt,
        due_time: Some(ts(s.due_at_ms)),
        last_error: s.last_error.clone(),
        dependency: s.dependency.clone(),
        chain_position,
        saga_transaction_id,
        enqueue_count: s.enqueue_count,
        delivery_count: s.delivery_count,
        attributes: s
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        transaction_id: s.transaction_id.clone(),
        delivery: None,
    }
}

/// One listing call's walk: the rows found, and where it stopped.
struct Page {
    query: Query,
    rows: Vec<pb::RetrySummary>,
    pointers_read: usize,
    windows_read: usize,
    /// Pointers read for sorting windows by due time.
    pointers_sorted: usize,
    /// Where the next page starts (strictly after), once this one is full or out of budget.
    stopped_at: Option<Position>,
    /// Where it starts in a window listed by due time.
    stopped_sorted: Option<SortedAt>,
    /// Nodes that did not answer for their retries in flight.
    unreachable: Vec<String>,
}

impl Page {
    fn full(&self) -> bool {
        self.rows.len() >= self.query.page_size
    }

    fn out_of_budget(&self) -> bool {
        self.pointers_read >= MAX_POINTERS_READ
            || self.windows_read >= MAX_WINDOWS_READ
            || self.pointers_sorted >= MAX_POINTERS_SORTED
    }

    fn stopped(&self) -> bool {
        self.stopped_at.is_some() || self.stopped_sorted.is_some()
    }

    fn after_cursor(&self, p: &Position) -> bool {
        self.query.cursor.as_ref().is_none_or(|c| p > c)
    }

    /// Whether every pointer of this bucket sorts at or before the cursor.
    fn bucket_done(&self, window: WindowId, instance: &str, bucket: u32) -> bool {
        self.query.cursor.as_ref().is_some_and(|c| {
            (c.day, c.window, c.instance.as_str(), c.bucket)
                > (window.day, window.index, instance, bucket)
        })
    }
}

impl Handle {
    /// ListRetries: the validated request's scheduled retries, by due time, each
    /// live pointer's state row checked against the filters; then, when asked for, the ones
    /// in flight on every node (peers asked with `authorization`, the caller's), and the dead
    /// ones in the order of their dead letters. The caller's right to the service is the
    /// transport's to check first.
    pub async fn list_retries(
        &self,
        r: &pb::ListRetriesRequest,
        authorization: Option<String>,
    ) -> Result<pb::ListRetriesResponse, Error> {
        let query = query(r)?;
        let resume = query.resume.clone();
        let first = resume.part();
        let parts: Vec<Part> = query
            .parts
            .iter()
            .copied()
            .filter(|p| first.is_none_or(|f| *p >= f))
            .collect();
        let mut page = Page {
            query,
            rows: Vec::new(),
            pointers_read: 0,
            windows_read: 0,
            pointers_sorted: 0,
            stopped_at: None,
            stopped_sorted: None,
            unreachable: Vec::new(),
        };
        for part in parts {
            // The resume point applies to its own part; the later ones start at their start.
            let here = Some(part) == first;
            let stopped = match part {
                Part::Scheduled => {
                    self.list_scheduled(&mut page).await?;
                    match page.stopped_sorted.take() {
                        Some(at) => Some(at.encode()),
                        None => page.stopped_at.take().map(|p| p.encode()),
                    }
                }
                Part::Dead => {
                    let from = match &resume {
                        Resume::Dead(c) if here => c.clone(),
                        _ => None,
                    };
                    self.list_dead(&mut page, from).await?
                }
                Part::InFlight => {
                    let from = match &resume {
                        Resume::InFlight(c) if here => c.clone(),
                        _ => None,
                    };
                    self.list_in_flight(&mut page, from, authorization.clone())
                        .await?
                }
                Part::Succeeded | Part::Cancelled => {
                    let from = match &resume {
                        Resume::Finished(_, c) if here => *c,
                        _ => None,
                    };
                    self.list_finished(&mut page, part, from).await?
                }
            };
            if let Some(next_page_token) = stopped {
                return Ok(pb::ListRetriesResponse {
                    retries: page.rows,
                    next_page_token,
                    unreachable_nodes: page.unreachable,
                });
            }
        }
        Ok(pb::ListRetriesResponse {
            retries: page.rows,
            next_page_token: String::new(),
            unreachable_nodes: page.unreachable,
        })
    }

    /// The scheduled part: the directory's windows from the cursor on, until the page is full
    /// or the call's budget spent (`page.stopped_at` then says where to resume).
    async fn list_scheduled(&self, page: &mut Page) -> Result<(), Error> {
        let first = page
            .query
            .due_after
            .map(|t| self.grid().window_of(t))
            .map(Position::window_start);
        let walk = Walk(&*self.store);
        let year = self.grid().window_of(self.clock.now_ms()).year();
        let years = walk.years(&[year - 1, year, year + 1], None).await?;
        'walk: for y in years {
            for day in walk.days(y).await? {
                if page.query.cursor.as_ref().is_some_and(|c| day < c.day)
                    || first.as_ref().is_some_and(|f| day < f.day)
                {
                    continue;
                }
                let (_, windows) = walk.windows(day).await?;
                for index in windows {
                    let window = WindowId { day, index };
                    let start = Position::window_start(window);
                    if first.as_ref().is_some_and(|f| start < *f)
                        || page
                            .query
                            .cursor
                            .as_ref()
                            .is_some_and(|c| (c.day, c.window) > (day, index))
                    {
                        continue;
                    }
                    if page.full() || page.out_of_budget() {
                        // The next call starts with this window (every pointer of it sorts
                        // after its start).
                        page.stopped_at = Some(start);
                        break 'walk;
                    }
                    page.windows_read += 1;
                    self.list_window(&walk, window, page).await?;
                    if page.stopped() {
                        break 'walk;
                    }
                }
            }
        }
        Ok(())
    }

    /// The dead part: the service's dead letters in their order, after `cursor`, each listed
    /// when its retry's row is still the DEAD one it names; the token to resume with, empty
    /// once every letter was read.
    async fn list_dead(
        &self,
        page: &mut Page,
        mut cursor: Option<Cursor>,
    ) -> Result<Option<String>, Error> {
        let token = |c: Option<&Cursor>| match c {
            None => DEAD_TOKEN.to_string(),
            Some(c) => format!("{DEAD_TOKEN}{}", &c.encode()["v1.".len()..]),
        };
        let q = self.letter_query(&page.query.service, None, None, "")?;
        loop {
            if page.full() || page.out_of_budget() {
                return Ok(Some(token(cursor.as_ref())));
            }
            let mut batch = Vec::with_capacity(STATE_CHUNK);
            let all_read = self
                .each_letter(&q, cursor.as_ref(), false, |l, _| {
                    batch.push(l);
                    batch.len() < STATE_CHUNK
                })
                .await?;
            let ids: Vec<String> = batch.iter().map(|l| l.transaction_id.clone()).collect();
            let states = self.store.get_states(&page.query.service, &ids).await?;
            for (l, s) in batch.into_iter().zip(states) {
                page.pointers_read += 1;
                if let Some(s) = s.filter(|s| {
                    s.status == Status::Dead
                        && s.generation == l.generation
                        && page.query.matches(s)
                }) {
                    page.rows.push(summary_of(&s));
                }
                cursor = Some(Cursor {
                    day: l.day,
                    dead_at_ms: l.dead_at_ms,
                    transaction_id: l.transaction_id,
                });
                if page.full() || page.out_of_budget() {
                    return Ok(Some(token(cursor.as_ref())));
                }
            }
            if all_read {
                return Ok(None);
            }
        }
    }

    /// The service's part of `window`: by due time when it is small enough to sort
    /// (`MAX_SORTED_WINDOW`) and the listing did not stop inside it in stored order, else
    /// in stored order.
    async fn list_window(
        &self,
        walk: &Walk<'_, dyn rebound_store::RetryStore>,
        window: WindowId,
        page: &mut Page,
    ) -> Result<(), Error> {
        let mut rows: Vec<_> = walk
            .instances(window, &[rebound_store::TokenRange::FULL])
            .await?
            .into_iter()
            .filter(|row| row.service == page.query.service)
            .collect();
        rows.sort_by(|a, b| a.instance.cmp(&b.instance));
        let mut lanes = Vec::with_capacity(rows.len());
        for row in rows {
            let mut buckets = walk.buckets(window, &row).await?;
            buckets.sort_unstable();
            lanes.push((row, buckets));
        }
        let start = Position::window_start(window);
        let stored_inside = page
            .query
            .cursor
            .as_ref()
            .is_some_and(|c| (c.day, c.window) == (window.day, window.index) && *c != start);
        if !stored_inside && self.may_sort(&lanes) {
            if let Some(pointers) = self.window_pointers(window, &lanes, page).await? {
                return self.list_sorted(window, pointers, page).await;
            }
        }
        self.list_window_stored(window, lanes, page).await
    }

    /// False when the window's buckets alone show more than `MAX_SORTED_WINDOW` pointers, so
    /// that a large window is listed in stored order without reading 20,000 pointers first.
    /// A writer opens a lane's next bucket once it has placed the bucket size in the one
    /// before, so every bucket of a lane but its last holds that many (counted with this
    /// node's bucket size; buckets already drained and deleted do not count).
    fn may_sort(&self, lanes: &[(rebound_store::InstanceRow, Vec<u32>)]) -> bool {
        let size = u64::from(self.writer.bucket_size());
        let full: u64 = lanes
            .iter()
            .map(|(_, buckets)| buckets.len().saturating_sub(1) as u64 * size)
            .sum();
        full <= MAX_SORTED_WINDOW as u64
    }

    /// Every pointer of the service's part of `window` as (due time, transaction id,
    /// generation), sorted; None when there are more than `MAX_SORTED_WINDOW`. A pointer
    /// written without its due time sorts at the window's start.
    async fn window_pointers(
        &self,
        window: WindowId,
        lanes: &[(rebound_store::InstanceRow, Vec<u32>)],
        page: &mut Page,
    ) -> Result<Option<Vec<(i64, String, i64)>>, Error> {
        let start_ms = self.grid().start_ms(window);
        let mut all = Vec::new();
        for (row, buckets) in lanes {
            for bucket in buckets {
                let location = Location {
                    window,
                    instance: row.instance.clone(),
                    bucket: *bucket,
                };
                let mut pointers = self
                    .store
                    .stream_pointers(&page.query.service, &location)
                    .await?;
                while let Some(p) = pointers.try_next().await? {
                    page.pointers_sorted += 1;
                    all.push((
                        p.due_at_ms.unwrap_or(start_ms),
                        p.transaction_id,
                        p.generation,
                    ));
                    if all.len() > MAX_SORTED_WINDOW {
                        return Ok(None);
                    }
                }
            }
        }
        all.sort_unstable();
        Ok(Some(all))
    }

    /// A window's sorted pointers after the cursor, their state rows read a chunk at a time.
    async fn list_sorted(
        &self,
        window: WindowId,
        pointers: Vec<(i64, String, i64)>,
        page: &mut Page,
    ) -> Result<(), Error> {
        let from = match page
            .query
            .sorted_after
            .as_ref()
            .filter(|a| a.window == window)
        {
            Some(a) => pointers.partition_point(|(due, id, _)| {
                (*due, id.as_str()) <= (a.due_ms, a.transaction_id.as_str())
            }),
            None => 0,
        };
        for chunk in pointers[from..].chunks(STATE_CHUNK) {
            let ids: Vec<String> = chunk.iter().map(|p| p.1.clone()).collect();
            let states = self.store.get_states(&page.query.service, &ids).await?;
            for ((due, id, generation), s) in chunk.iter().zip(states) {
                page.pointers_read += 1;
                if let Some(s) = s.filter(|s| {
                    s.status == Status::Scheduled
                        && s.generation == *generation
                        && page.query.matches(s)
                }) {
                    page.rows.push(summary_of(&s));
                }
                // The pointers read for sorting count before the next window, not here: a
                // window sorted is listed as far as the page and the state rows allow.
                if page.full() || page.pointers_read >= MAX_POINTERS_READ {
                    page.stopped_sorted = Some(SortedAt {
                        window,
                        due_ms: *due,
                        transaction_id: id.clone(),
                    });
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The service's instances of `window`, bucket by bucket, pointer by pointer.
    async fn list_window_stored(
        &self,
        window: WindowId,
        lanes: Vec<(rebound_store::InstanceRow, Vec<u32>)>,
        page: &mut Page,
    ) -> Result<(), Error> {
        for (row, buckets) in lanes {
            for bucket in buckets {
                let at = |txid: &str| Position {
                    day: window.day,
                    window: window.index,
                    instance: row.instance.clone(),
                    bucket,
                    transaction_id: txid.to_string(),
                };
                if page.bucket_done(window, &row.instance, bucket) {
                    continue;
                }
                let location = Location {
                    window,
                    instance: row.instance.clone(),
                    bucket,
                };
                let mut pointers = self
                    .store
                    .stream_pointers(&page.query.service, &location)
                    .await?;
                let mut chunk = Vec::with_capacity(STATE_CHUNK);
                loop {
                    let next = pointers.try_next().await?;
                    let end = next.is_none();
                    if let Some(p) = next {
                        if page.after_cursor(&at(&p.transaction_id)) {
                            chunk.push(p);
                        }
                    }
                    if chunk.len() == STATE_CHUNK || (end && !chunk.is_empty()) {
                        let ids: Vec<String> =
                            chunk.iter().map(|p| p.transaction_id.clone()).collect();
                        let states = self.store.get_states(&page.query.service, &ids).await?;
                        for (p, s) in chunk.drain(..).zip(states) {
                            page.pointers_read += 1;
                            if let Some(s) = s.filter(|s| {
                                s.status == Status::Scheduled
                                    && s.generation == p.generation
                                    && page.query.matches(s)
                            }) {
                                page.rows.push(summary_of(&s));
                            }
                            if page.full() || page.out_of_budget() {
                                page.stopped_at = Some(at(&p.transaction_id));
                                return Ok(());
                            }
                        }
                    }
                    if end {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}
