//! The finished parts of a listing: a service's SUCCEEDED or CANCELLED retries, read from the
//! finished log (`StateStore::list_finished`) in the order they finished, while the terminal
//! TTL keeps them (docs/architecture.md, "Listing retries").

use std::collections::HashSet;

use rebound_store::{FinishedAt, Status};

use super::{finished_token, summary_of, Page, Part, STATE_CHUNK};
use crate::{error::Error, handle::Handle};

/// Reads of the log one call makes at most (each bounded by the store), so that a log of
/// empty days cannot hold a call.
const MAX_LOG_READS: usize = 16;
/// How far past this node's clock the log is read: rows written by a node whose clock runs
/// ahead by up to this much are listed too.
const AHEAD_SECONDS: i64 = 60;

impl Handle {
    /// The `part` (SUCCEEDED or CANCELLED) of the listing, from `from` or from the oldest
    /// entry kept: each entry listed when its retry's row still ended so at that generation,
    /// and matches the filters. The token to resume with, None once the log was read to now.
    pub(super) async fn list_finished(
        &self,
        page: &mut Page,
        part: Part,
        from: Option<FinishedAt>,
    ) -> Result<Option<String>, Error> {
        let status = if part == Part::Cancelled {
            Status::Cancelled
        } else {
            Status::Succeeded
        };
        let now = self.clock.now_ms().div_euclid(1000);
        // The log lives as long as its rows: nothing older is kept.
        let oldest = now - i64::from(self.writer.finished_ttl_seconds()) - 1;
        let until = now + AHEAD_SECONDS;
        let mut at = match from {
            Some(a) if a.second >= oldest => a,
            _ => FinishedAt::start(oldest),
        };
        let mut listed: HashSet<String> = HashSet::new();
        for _ in 0..MAX_LOG_READS {
            if page.full() || page.out_of_budget() {
                return Ok(Some(finished_token(part, Some(&at))));
            }
            let log = self
                .store
                .list_finished(&page.query.service, status, at, until, STATE_CHUNK)
                .await?;
            let ids: Vec<String> = log
                .entries
                .iter()
                .map(|e| e.transaction_id.clone())
                .collect();
            let states = self.store.get_states(&page.query.service, &ids).await?;
            for (e, s) in log.entries.into_iter().zip(states) {
                page.pointers_read += 1;
                let cell = |s: &rebound_store::TxState| match status {
                    Status::Cancelled => s.cancelled_generation,
                    _ => s.succeeded_generation,
                };
                if let Some(s) = s.filter(|s| {
                    s.status == status
                        && cell(s) == Some(e.generation)
                        && page.query.matches(s)
                        && !listed.contains(&s.transaction_id)
                }) {
                    listed.insert(s.transaction_id.clone());
                    page.rows.push(summary_of(&s));
                }
                at = FinishedAt {
                    index: e.at.index.saturating_add(1),
                    ..e.at
                };
                if page.full() || page.out_of_budget() {
                    return Ok(Some(finished_token(part, Some(&at))));
                }
            }
            match log.next {
                Some(next) => at = next,
                None => return Ok(None),
            }
        }
        Ok(Some(finished_token(part, Some(&at))))
    }
}
