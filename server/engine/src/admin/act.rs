//! ActOnRetries: run now, reschedule, cancel or dead-letter the scheduled retries a listing
//! selects (its filters, or named ids), paced as redrive is, each change recorded in the
//! retry's attempt history (docs/architecture.md, "Acting on retries").
//!
//! Each retry is acted on under its transaction's lock, from its row read again there: only
//! while it is SCHEDULED and still matches the filters. A run-now or reschedule is a new
//! schedule derived from the generation read (`Writer::reschedule`), as an ack's is, so a
//! cancel or a SUCCEEDED ack of that generation made on another node still wins over it
//! through its cell ("Guarantees across nodes"). A cancel is `Writer::cancel`'s, and a move to
//! the dead letters the dispatcher's (letter first, then the DEAD row); neither deletes.

use std::{collections::BTreeSet, time::Duration};

use rebound_proto::v1 as pb;
use rebound_store::{
    history::{AttemptEnd, AttemptRecord},
    Status, TxState,
};

use super::list::{self, Query, MAX_PAGE_SIZE};
use crate::{error::Error, handle::Handle, validate};

/// The most transaction ids one call may name.
pub const MAX_NAMED_RETRIES: usize = 1000;
/// Most bytes of a reason.
const MAX_REASON_BYTES: usize = 512;
/// Listing pages one call reads at most while it collects its selection.
const MAX_PAGES: usize = 200;

/// What to do with each selected retry.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Action {
    RunNow,
    Reschedule(i64),
    Cancel,
    DeadLetter,
}

impl Action {
    fn end(self) -> AttemptEnd {
        match self {
            Action::RunNow => AttemptEnd::RunNow,
            Action::Reschedule(_) => AttemptEnd::Rescheduled,
            Action::Cancel => AttemptEnd::Cancelled,
            Action::DeadLetter => AttemptEnd::DeadLettered,
        }
    }
}

/// A validated request.
struct Request {
    query: Query,
    action: Action,
    named: Option<Vec<String>>,
    max_items: usize,
    rate: u32,
    reason: String,
}

/// `field` of the selection is `selection.field` of this request.
fn in_selection(e: Error) -> Error {
    match e {
        Error::InvalidArgument { field, message } => Error::InvalidArgument {
            field: format!("selection.{field}"),
            message,
        },
        other => other,
    }
}

impl Handle {
    fn act_request(&self, r: &pb::ActOnRetriesRequest) -> Result<Request, Error> {
        let selection = r
            .selection
            .as_ref()
            .ok_or_else(|| Error::invalid("selection", "is required: a ListRetriesRequest"))?;
        let query = list::query(selection).map_err(in_selection)?;
        if selection
            .statuses
            .iter()
            .any(|s| *s != pb::RetryStatus::Scheduled as i32)
        {
            return Err(Error::invalid(
                "selection.statuses",
                "actions act on SCHEDULED retries only (empty or SCHEDULED); redrive DEAD ones with RedriveDeadLetters",
            ));
        }
        let now = self.clock.now_ms();
        let action = match pb::RetryAction::try_from(r.action) {
            Ok(pb::RetryAction::RunNow) => Action::RunNow,
            Ok(pb::RetryAction::Reschedule) => {
                let due = r.due_time.as_ref().ok_or_else(|| {
                    Error::invalid("due_time", "is required by RETRY_ACTION_RESCHEDULE")
                })?;
                let due = validate::timestamp_ms("due_time", due)?;
                let max = self.writer.max_delay();
                if due - now > max.as_millis() as i64 {
                    return Err(Error::invalid(
                        "due_time",
                        format!(
                            "is more than {}s ahead (REBOUND_MAX_DELAY_SECONDS)",
                            max.as_secs()
                        ),
                    ));
                }
                Action::Reschedule(due)
            }
            Ok(pb::RetryAction::Cancel) => Action::Cancel,
            Ok(pb::RetryAction::DeadLetter) => Action::DeadLetter,
            Ok(pb::RetryAction::Unspecified) | Err(_) => {
                return Err(Error::invalid(
                    "action",
                    format!(
                        "{} is not an action: RETRY_ACTION_RUN_NOW, _RESCHEDULE, _CANCEL or _DEAD_LETTER",
                        r.action
                    ),
                ))
            }
        };
        if r.due_time.is_some() && !matches!(action, Action::Reschedule(_)) {
            return Err(Error::invalid(
                "due_time",
                "is for RETRY_ACTION_RESCHEDULE only",
            ));
        }
        if r.reason.len() > MAX_REASON_BYTES {
            return Err(Error::invalid(
                "reason",
                format!(
                    "must be at most {MAX_REASON_BYTES} bytes, got {}",
                    r.reason.len()
                ),
            ));
        }
        let max_items = validate::count("max_items", r.max_items, 1000, 100_000)? as usize;
        let (_, rate) = self.pacing(None, r.max_per_second)?;
        let named = if r.transaction_ids.is_empty() {
            None
        } else {
            if !selection.page_token.is_empty() {
                return Err(Error::invalid(
                    "selection.page_token",
                    "resumes a filtered selection; it cannot go with transaction_ids",
                ));
            }
            if r.transaction_ids.len() > MAX_NAMED_RETRIES {
                return Err(Error::invalid(
                    "transaction_ids",
                    format!(
                        "must name 1 to {MAX_NAMED_RETRIES} retries, got {}",
                        r.transaction_ids.len()
                    ),
                ));
            }
            let mut seen = BTreeSet::new();
            let mut ids = Vec::with_capacity(r.transaction_ids.len());
            for (i, id) in r.transaction_ids.iter().enumerate() {
                validate::transaction_id(&format!("transaction_ids[{i}]"), id)?;
                if seen.insert(id) {
                    ids.push(id.clone());
                }
            }
            Some(ids)
        };
        Ok(Request {
            query,
            action,
            named,
            max_items,
            rate,
            reason: r.reason.clone(),
        })
    }

    /// ActOnRetries by `actor` (the caller's credential name, or `operator`), whose right to
    /// the service the transport checked.
    pub async fn act_on_retries(
        &self,
        r: &pb::ActOnRetriesRequest,
        actor: &str,
    ) -> Result<pb::ActOnRetriesResponse, Error> {
        let req = self.act_request(r)?;
        let service = req.query.service.clone();
        self.existing(&service).await?;
        let selection = r.selection.clone().unwrap_or_default();
        let (ids, next_page_token) = match req.named.clone() {
            Some(ids) => (ids, String::new()),
            None => self.select(selection, req.max_items).await?,
        };
        let mut resp = pb::ActOnRetriesResponse {
            next_page_token,
            ..Default::default()
        };
        let interval = Duration::from_secs_f64(1.0 / f64::from(req.rate));
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        for id in &ids {
            tick.tick().await;
            match self.act_one(&req, id, actor).await {
                Ok(true) => resp.changed += 1,
                // Changed by another answer meanwhile (a saga step's conditional write).
                Ok(false) | Err(Error::FailedPrecondition(_)) | Err(Error::NotFound(_)) => {
                    resp.skipped += 1
                }
                Err(e) => return Err(e),
            }
        }
        tracing::info!(%service, action = ?req.action, %actor, changed = resp.changed, skipped = resp.skipped, done = resp.next_page_token.is_empty(), "acted on retries");
        Ok(resp)
    }

    /// The ids of up to `max_items` retries of the listing `selection` from its page token on,
    /// and the token to resume with (empty: the listing is done).
    async fn select(
        &self,
        mut selection: pb::ListRetriesRequest,
        max_items: usize,
    ) -> Result<(Vec<String>, String), Error> {
        let mut ids = Vec::new();
        for _ in 0..MAX_PAGES {
            selection.page_size = (max_items - ids.len()).min(MAX_PAGE_SIZE as usize) as u32;
            let page = self
                .list_retries(&selection, None)
                .await
                .map_err(in_selection)?;
            ids.extend(page.retries.into_iter().map(|s| s.transaction_id));
            selection.page_token = page.next_page_token;
            if selection.page_token.is_empty() || ids.len() >= max_items {
                break;
            }
        }
        Ok((ids, selection.page_token))
    }

    /// Acts on one retry; whether it changed it.
    async fn act_one(&self, req: &Request, id: &str, actor: &str) -> Result<bool, Error> {
        let service = &req.query.service;
        let picked = |s: &TxState| s.status == Status::Scheduled && req.query.matches(s);
        if req.action == Action::Cancel {
            let now = self.clock.now_ms();
            let note = |s: &TxState| Some(self.action_record(req, s, actor, now));
            let (_, cancelled) = self.writer.cancel_as(service, id, picked, note).await?;
            return Ok(cancelled);
        }
        let _lock = self.writer.lock_transaction(service, id).await;
        let Some(mut state) = self.store.get_state(service, id).await? else {
            return Ok(false);
        };
        if !picked(&state) {
            return Ok(false);
        }
        let now = self.clock.now_ms();
        let due = match req.action {
            Action::RunNow => now,
            Action::Reschedule(t) => t.max(now),
            Action::Cancel | Action::DeadLetter => 0,
        };
        if matches!(req.action, Action::RunNow | Action::Reschedule(_))
            && (state.due_at_ms == due || (req.action == Action::RunNow && state.due_at_ms <= now))
        {
            return Ok(false);
        }
        let record = self.action_record(req, &state, actor, now);
        state.history.record(record);
        if req.action == Action::DeadLetter {
            state.last_error = if req.reason.is_empty() {
                format!("moved to the dead letters by {actor}")
            } else {
                format!("moved to the dead letters by {actor}: {}", req.reason)
            };
            self.dispatcher.dead_letter(state, now).await?;
        } else {
            self.writer.reschedule(state, due).await?;
        }
        Ok(true)
    }

    /// The history record of an action on `state` (not an attempt: `attempt` is the attempts
    /// made so far).
    fn action_record(
        &self,
        req: &Request,
        state: &TxState,
        actor: &str,
        now: i64,
    ) -> AttemptRecord {
        AttemptRecord {
            attempt: state.attempt,
            delivered_at_ms: now,
            ended_at_ms: now,
            node_id: self.node_id.to_string(),
            executor_id: actor.to_string(),
            end: req.action.end(),
            error: req.reason.clone(),
            error_class: String::new(),
            retry_after_ms: match req.action {
                Action::Reschedule(t) => Some((t - now).max(0) as u64),
                _ => None,
            },
            deliveries: 0,
        }
    }
}
