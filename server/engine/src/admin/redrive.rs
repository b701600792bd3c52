//! Redrive of dead letters: RedriveDeadLetters (the letters matching a filter, one call's
//! worth at a time) and the dashboard's redrive of selected letters. Both check the delay
//! and the rate the same way ([`Handle::pacing`]) and move each letter with the same step
//! ([`Handle::redrive_letter`]) at that rate ([`Handle::redrive_batch`]).
//!
//! Redrive never deletes: a redriven letter is marked (`redriven_at`), so day partitions gain
//! no row tombstones.

use std::{collections::BTreeSet, time::Duration};

use futures::TryStreamExt;
use rebound_proto::v1 as pb;

use crate::handle::Handle;
use crate::{error::Error, validate};
use rebound_store::{window::DAY_MS, DeadLetter, Status};

/// The most letters one redrive of selected letters may name.
pub const MAX_SELECTED_LETTERS: usize = 1000;

/// A dead letter named by its key: the transaction and when it died.
#[derive(Debug, Clone, PartialEq)]
pub struct LetterKey {
    pub transaction_id: String,
    pub dead_at: Option<prost_types::Timestamp>,
}

impl Handle {
    /// The delay (default none) and rate (default 500 per second) of a redrive.
    pub(super) fn pacing(
        &self,
        delay: Option<&prost_types::Duration>,
        max_per_second: u32,
    ) -> Result<(Duration, u32), Error> {
        let delay = delay
            .map(|d| validate::duration("delay", d))
            .transpose()?
            .unwrap_or_default();
        if delay > self.writer.max_delay() {
            return Err(Error::invalid(
                "delay",
                format!(
                    "{}s is over the maximum of {}s (REBOUND_MAX_DELAY_SECONDS)",
                    delay.as_secs(),
                    self.writer.max_delay().as_secs()
                ),
            ));
        }
        let rate = validate::count("max_per_second", max_per_second, 500, 100_000)?;
        Ok((delay, rate))
    }

    /// One letter: its retry starts again (attempt 0, due after `delay`) when it is still
    /// the generation that died; either way the letter is marked redriven. Returns whether
    /// the retry was started again (false: it was enqueued again meanwhile, or is gone).
    async fn redrive_letter(&self, letter: &DeadLetter, delay: Duration) -> Result<bool, Error> {
        let _lock = self
            .writer
            .lock_transaction(&letter.service, &letter.transaction_id)
            .await;
        let now = self.clock.now_ms();
        let state = self
            .store
            .get_state(&letter.service, &letter.transaction_id)
            .await?;
        let redriven = match state {
            Some(mut s) if s.status == Status::Dead && s.generation == letter.generation => {
                s.attempt = 0;
                s.first_enqueued_at_ms = now;
                s.last_enqueued_at_ms = now;
                s.enqueue_count = s.enqueue_count.saturating_add(1);
                let due = now + delay.as_millis() as i64;
                self.writer.restart(s, due).await?;
                true
            }
            _ => false,
        };
        self.store.mark_redriven(letter, now).await?;
        Ok(redriven)
    }

    /// Redrives `batch` at `rate` letters per second, counting into `resp`.
    async fn redrive_batch(
        &self,
        batch: Vec<DeadLetter>,
        delay: Duration,
        rate: u32,
        resp: &mut pb::RedriveDeadLettersResponse,
    ) -> Result<(), Error> {
        let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        for letter in batch {
            tick.tick().await;
            if self.redrive_letter(&letter, delay).await? {
                resp.redriven += 1;
            } else {
                resp.skipped += 1;
            }
        }
        Ok(())
    }

    pub async fn redrive(
        &self,
        r: &pb::RedriveDeadLettersRequest,
    ) -> Result<pb::RedriveDeadLettersResponse, Error> {
        let q = self.letter_query(
            &r.service,
            r.from.as_ref(),
            r.to.as_ref(),
            &r.error_contains,
        )?;
        self.existing(&r.service).await?;
        let (delay, rate) = self.pacing(r.delay.as_ref(), r.max_per_second)?;
        let max_items = validate::count("max_items", r.max_items, 1000, 100_000)? as usize;
        // Collect one call's worth first (bounded by max_items), then move them at the rate.
        let mut batch = Vec::new();
        let exhausted = self
            .each_letter(&q, None, false, |l, _| {
                if batch.len() == max_items {
                    return false;
                }
                batch.push(l);
                true
            })
            .await?;
        let mut resp = pb::RedriveDeadLettersResponse {
            done: exhausted,
            ..Default::default()
        };
        self.redrive_batch(batch, delay, rate, &mut resp).await?;
        tracing::info!(service = %r.service, redriven = resp.redriven, skipped = resp.skipped, done = resp.done, "redrove dead letters");
        Ok(resp)
    }

    /// Redrives exactly the letters named (1 to [`MAX_SELECTED_LETTERS`]), each as
    /// RedriveDeadLetters would, at the same rate limit. A letter that is not there (purged,
    /// or past its retention) or was already redriven counts as skipped; a letter named twice
    /// counts once. The answer is always `done`.
    pub async fn redrive_selected(
        &self,
        service: &str,
        letters: &[LetterKey],
        delay: Option<&prost_types::Duration>,
        max_per_second: u32,
    ) -> Result<pb::RedriveDeadLettersResponse, Error> {
        self.known(service)?;
        let (delay, rate) = self.pacing(delay, max_per_second)?;
        if letters.is_empty() || letters.len() > MAX_SELECTED_LETTERS {
            return Err(Error::invalid(
                "letters",
                format!(
                    "must name 1 to {MAX_SELECTED_LETTERS} dead letters, got {}",
                    letters.len()
                ),
            ));
        }
        let mut keys = BTreeSet::new();
        for (i, l) in letters.iter().enumerate() {
            validate::transaction_id(&format!("letters[{i}].transaction_id"), &l.transaction_id)?;
            let field = format!("letters[{i}].dead_at");
            let dead_at = l
                .dead_at
                .as_ref()
                .ok_or_else(|| Error::invalid(&field, "is required"))?;
            keys.insert((validate::timestamp_ms(&field, dead_at)?, &l.transaction_id));
        }
        self.existing(service).await?;
        let mut resp = pb::RedriveDeadLettersResponse {
            done: true,
            ..Default::default()
        };
        let mut batch = Vec::with_capacity(keys.len());
        for (dead_at_ms, transaction_id) in keys {
            let day = dead_at_ms.div_euclid(DAY_MS) as i32;
            let mut rows = self
                .store
                .stream_dead_letters(service, day, dead_at_ms, dead_at_ms + 1)
                .await?;
            let mut found = None;
            while let Some(row) = rows.try_next().await? {
                if &row.letter.transaction_id == transaction_id && row.redriven_at_ms.is_none() {
                    found = Some(row.letter);
                    break;
                }
            }
            match found {
                Some(letter) => batch.push(letter),
                None => resp.skipped += 1,
            }
        }
        self.redrive_batch(batch, delay, rate, &mut resp).await?;
        tracing::info!(%service, redriven = resp.redriven, skipped = resp.skipped, "redrove selected dead letters");
        Ok(resp)
    }
}
