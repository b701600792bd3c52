//! ListRetries: a service's scheduled retries, read from the directory that already orders
//! them by window (docs/architecture.md, "Listing retries"), filtered on their state rows,
//! a bounded part of the directory per call, with a `page_token` cursor.

use std::collections::BTreeMap;

use futures::TryStreamExt;
use rebound_proto::time::ts;
use rebound_proto::v1 as pb;
use rebound_store::{window::WindowId, Location, Status, TxState};

use super::{
    dead_letters::{hex, unhex},
    Cursor,
};
use crate::{error::Error, handle::Handle, validate, walk::Walk};

/// Rows per page when the request does not say, and at most.
pub const DEFAULT_PAGE_SIZE: u32 = 100;
pub const MAX_PAGE_SIZE: u32 = 500;
/// What one call reads at most before it answers with a token: pointers, and windows of the
/// directory (empty ones included), so that no call walks a whole backlog.
const MAX_POINTERS_READ: usize = 5_000;
const MAX_WINDOWS_READ: usize = 400;
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
    scheduled: bool,
    dead: bool,
    /// Set when the token says the scheduled part is done: where the dead part resumes.
    dead_cursor: Option<Option<Cursor>>,
}

/// A `page_token` of the dead part: `d1.` and then a dead-letter cursor without its `v1.`
/// (`d1.` alone: from the first letter).
const DEAD_TOKEN: &str = "d1.";

/// A place in the directory walk: the listing resumes strictly after it. An empty instance
/// sorts before every instance of its window, so `(day, window, "", 0, "")` is the start of
/// that window. Its text form is the `page_token`:
/// `l1.<day>.<window>.<bucket>.<instance as hex>.<transaction id as hex>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub day: i32,
    pub window: u32,
    pub instance: String,
    pub bucket: u32,
    pub transaction_id: String,
}

impl Position {
    pub fn encode(&self) -> String {
        format!(
            "l1.{}.{}.{}.{}.{}",
            self.day,
            self.window,
            self.bucket,
            hex(&self.instance),
            hex(&self.transaction_id)
        )
    }

    /// Parses a `page_token`. Total: any text is a position or a `page_token` error.
    pub fn decode(token: &str) -> Result<Position, Error> {
        let bad = || Error::invalid("page_token", "is not a token returned by ListRetries");
        let mut parts = token.splitn(6, '.');
        if parts.next() != Some("l1") {
            return Err(bad());
        }
        let day = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let window = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let bucket = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let instance = parts.next().and_then(|p| unhex(p, 256)).ok_or_else(bad)?;
        let transaction_id = parts
            .next()
            .and_then(|p| unhex(p, validate::MAX_TRANSACTION_ID_BYTES))
            .ok_or_else(bad)?;
        Ok(Position {
            day,
            window,
            instance,
            bucket,
            transaction_id,
        })
    }

    /// The start of window `w`.
    fn window_start(w: WindowId) -> Position {
        Position {
            day: w.day,
            window: w.index,
            instance: String::new(),
            bucket: 0,
            transaction_id: String::new(),
        }
    }
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
    let (mut scheduled, mut dead) = (r.statuses.is_empty(), false);
    for (i, s) in r.statuses.iter().enumerate() {
        match pb::RetryStatus::try_from(*s) {
            Ok(pb::RetryStatus::Scheduled) => scheduled = true,
            Ok(pb::RetryStatus::Dead) => dead = true,
            Ok(pb::RetryStatus::Unspecified) | Err(_) => {
                return Err(Error::invalid(
                    format!("statuses[{i}]"),
                    format!("{s} is not a RetryStatus"),
                ))
            }
            Ok(_) => {
                return Err(Error::invalid(
                    format!("statuses[{i}]"),
                    "only SCHEDULED and DEAD retries can be listed so far; read a finished one by id (GetRetry)",
                ))
            }
        }
    }
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
    let (cursor, dead_cursor) = match r.page_token.strip_prefix(DEAD_TOKEN) {
        None if r.page_token.is_empty() => (None, None),
        None => (Some(Position::decode(&r.page_token)?), None),
        Some("") if dead => (None, Some(None)),
        Some(rest) if dead => {
            let c = Cursor::decode(&format!("v1.{rest}")).map_err(|_| {
                Error::invalid("page_token", "is not a token returned by ListRetries")
            })?;
            (None, Some(Some(c)))
        }
        Some(_) => {
            return Err(Error::invalid(
                "page_token",
                "is a token of a listing of DEAD retries; ask for the same statuses",
            ))
        }
    };
    if cursor.is_some() && !scheduled {
        return Err(Error::invalid(
            "page_token",
            "is a token of a listing of SCHEDULED retries; ask for the same statuses",
        ));
    }
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
        scheduled,
        dead,
        dead_cursor,
    })
}

fn summary(s: TxState) -> pb::RetrySummary {
    let (chain_position, saga_transaction_id) = match &s.saga.chain {
        Some(c) => (c.position, c.saga_transaction_id.clone()),
        None if !s.saga.compensations.is_empty() => (0, s.transaction_id.clone()),
        None => (0, String::new()),
    };
    pb::RetrySummary {
        status: crate::wire::status_pb(s.status) as i32,
        attempt: s.attempt,
        due_time: Some(ts(s.due_at_ms)),
        last_error: s.last_error,
        dependency: s.dependency,
        chain_position,
        saga_transaction_id,
        enqueue_count: s.enqueue_count,
        delivery_count: s.delivery_count,
        attributes: s.attributes.into_iter().collect(),
        transaction_id: s.transaction_id,
    }
}

/// One listing call's walk: the rows found, and where it stopped.
struct Page {
    query: Query,
    rows: Vec<pb::RetrySummary>,
    pointers_read: usize,
    windows_read: usize,
    /// Where the next page starts (strictly after), once this one is full or out of budget.
    stopped_at: Option<Position>,
}

impl Page {
    fn full(&self) -> bool {
        self.rows.len() >= self.query.page_size
    }

    fn out_of_budget(&self) -> bool {
        self.pointers_read >= MAX_POINTERS_READ || self.windows_read >= MAX_WINDOWS_READ
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
    /// ListRetries: the validated request's scheduled retries, oldest window first, each
    /// live pointer's state row checked against the filters; then, when asked for, its dead
    /// ones, in the order of their dead letters. The caller's right to the service is the
    /// transport's to check first.
    pub async fn list_retries(
        &self,
        r: &pb::ListRetriesRequest,
    ) -> Result<pb::ListRetriesResponse, Error> {
        let query = query(r)?;
        let dead_from = query.dead_cursor.clone();
        let mut page = Page {
            query,
            rows: Vec::new(),
            pointers_read: 0,
            windows_read: 0,
            stopped_at: None,
        };
        if page.query.scheduled && dead_from.is_none() {
            self.list_scheduled(&mut page).await?;
            if let Some(p) = page.stopped_at.take() {
                return Ok(pb::ListRetriesResponse {
                    retries: page.rows,
                    next_page_token: p.encode(),
                });
            }
        }
        let next_page_token = if page.query.dead {
            self.list_dead(&mut page, dead_from.flatten()).await?
        } else {
            String::new()
        };
        Ok(pb::ListRetriesResponse {
            retries: page.rows,
            next_page_token,
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
                    if page.stopped_at.is_some() {
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
    ) -> Result<String, Error> {
        let token = |c: Option<&Cursor>| match c {
            None => DEAD_TOKEN.to_string(),
            Some(c) => format!("{DEAD_TOKEN}{}", &c.encode()["v1.".len()..]),
        };
        let q = self.letter_query(&page.query.service, None, None, "")?;
        loop {
            if page.full() || page.out_of_budget() {
                return Ok(token(cursor.as_ref()));
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
                    page.rows.push(summary(s));
                }
                cursor = Some(Cursor {
                    day: l.day,
                    dead_at_ms: l.dead_at_ms,
                    transaction_id: l.transaction_id,
                });
                if page.full() || page.out_of_budget() {
                    return Ok(token(cursor.as_ref()));
                }
            }
            if all_read {
                return Ok(String::new());
            }
        }
    }

    /// The service's instances of `window`, bucket by bucket, pointer by pointer.
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
        for row in rows {
            let mut buckets = walk.buckets(window, &row).await?;
            buckets.sort_unstable();
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
                                page.rows.push(summary(s));
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn positions_round_trip_and_refuse_junk() {
        let p = Position {
            day: 20_428,
            window: 1_439,
            instance: "n1-17-3".into(),
            bucket: 7,
            transaction_id: "order-7/é.x".into(),
        };
        assert_eq!(Position::decode(&p.encode()).unwrap(), p);
        let start = Position::window_start(WindowId { day: 1, index: 2 });
        assert_eq!(Position::decode(&start.encode()).unwrap(), start);
        for junk in [
            "",
            "l1",
            "l2.1.2.3.61.62",
            "l1.1.2.3.61",
            "l1.1.2.-3.61.62",
            "l1.1.2.3.6.62",
            "l1.1.2.3.61.ff",
            "l1.1.2.3.aé.62",
            "l1.1.2.3.+f.62",
        ] {
            let e = Position::decode(junk).unwrap_err();
            assert!(e.to_string().starts_with("page_token:"), "{junk}: {e}");
        }
    }

    #[test]
    fn every_pointer_of_a_window_sorts_after_its_start_and_before_the_next() {
        let w = WindowId { day: 5, index: 9 };
        let p = Position {
            day: 5,
            window: 9,
            instance: "a".into(),
            bucket: 0,
            transaction_id: String::new(),
        };
        assert!(p > Position::window_start(w));
        assert!(p < Position::window_start(WindowId { day: 5, index: 10 }));
        assert!(p < Position::window_start(WindowId { day: 6, index: 0 }));
    }

    proptest! {
        #[test]
        fn page_tokens_are_total(token in "(?s).{0,80}", tail in "[0-9a-fA-F.l-]{0,40}") {
            for t in [token.clone(), format!("l1.{tail}")] {
                match Position::decode(&t) {
                    Ok(p) => prop_assert_eq!(Position::decode(&p.encode()).unwrap(), p),
                    Err(e) => prop_assert!(e.to_string().starts_with("page_token:")),
                }
            }
        }

        #[test]
        fn positions_round_trip(
            day in any::<i32>(),
            window in any::<u32>(),
            bucket in any::<u32>(),
            instance in "[a-z0-9-]{0,40}",
            transaction_id in "\\PC{0,60}",
        ) {
            let p = Position { day, window, instance, bucket, transaction_id };
            prop_assert_eq!(Position::decode(&p.encode()).unwrap(), p);
        }
    }
}
