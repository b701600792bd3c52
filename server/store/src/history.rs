//! A retry's attempt history (`TxState::history`): what each attempt was and how it ended,
//! kept in the state row's body, so recording it costs no request of its own (the ack that
//! ends an attempt writes the row anyway). Bounded: the first attempt and the most recent
//! ones, with a count of those dropped between them (docs/architecture.md, "Attempt history").

/// Most attempts a history keeps: the first, and the `MAX_ATTEMPTS_KEPT - 1` most recent.
pub const MAX_ATTEMPTS_KEPT: usize = 10;
/// Most bytes of an attempt's error kept in its record (cut at a character boundary); the
/// retry's `last_error` keeps the whole of the last one.
pub const MAX_RECORDED_ERROR_BYTES: usize = 512;

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    Succeeded,
    /// Acknowledged RETRY: the attempt failed and counts.
    Retry,
    Failed,
    /// Not acknowledged within its deadline, delivery after delivery, until the attempt
    /// counted as failed (`max_deliveries_per_attempt`).
    DeadlineExpired,
    /// Acknowledged RETRY with a hold of its dependency: postponed, no attempt used.
    Held,
    /// Acknowledged RETRY as a snooze: postponed, no attempt used.
    Snoozed,
    /// Not an attempt: an operator's action (ActOnRetries), recorded with who acted
    /// (`executor_id`) and why (`error`). No attempt used.
    RunNow,
    Rescheduled,
    Cancelled,
    DeadLettered,
}

impl AttemptEnd {
    /// The stored code (`body::AttemptBody::end`); 0 is no end known.
    pub fn code(self) -> u32 {
        match self {
            AttemptEnd::Succeeded => 1,
            AttemptEnd::Retry => 2,
            AttemptEnd::Failed => 3,
            AttemptEnd::DeadlineExpired => 4,
            AttemptEnd::Held => 5,
            AttemptEnd::Snoozed => 6,
            AttemptEnd::RunNow => 7,
            AttemptEnd::Rescheduled => 8,
            AttemptEnd::Cancelled => 9,
            AttemptEnd::DeadLettered => 10,
        }
    }

    pub fn of_code(code: u32) -> Option<AttemptEnd> {
        Some(match code {
            1 => AttemptEnd::Succeeded,
            2 => AttemptEnd::Retry,
            3 => AttemptEnd::Failed,
            4 => AttemptEnd::DeadlineExpired,
            5 => AttemptEnd::Held,
            6 => AttemptEnd::Snoozed,
            7 => AttemptEnd::RunNow,
            8 => AttemptEnd::Rescheduled,
            9 => AttemptEnd::Cancelled,
            10 => AttemptEnd::DeadLettered,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AttemptEnd::Succeeded => "SUCCEEDED",
            AttemptEnd::Retry => "RETRY",
            AttemptEnd::Failed => "FAILED",
            AttemptEnd::DeadlineExpired => "DEADLINE_EXPIRED",
            AttemptEnd::Held => "HELD",
            AttemptEnd::Snoozed => "SNOOZED",
            AttemptEnd::RunNow => "RUN_NOW",
            AttemptEnd::Rescheduled => "RESCHEDULED",
            AttemptEnd::Cancelled => "CANCELLED",
            AttemptEnd::DeadLettered => "DEAD_LETTERED",
        }
    }
}

/// One attempt: its delivery and its end.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// The attempt's number (`Delivery.attempt`).
    pub attempt: u32,
    /// When it was (last) delivered, and when its end was recorded (ms since the epoch).
    pub delivered_at_ms: i64,
    pub ended_at_ms: i64,
    /// The node that delivered it and the executor it went to (`SubscribeRequest.executor_id`;
    /// `push` for a push target).
    pub node_id: String,
    pub executor_id: String,
    pub end: AttemptEnd,
    /// The error the ack gave, cut to `MAX_RECORDED_ERROR_BYTES`, and its class.
    pub error: String,
    pub error_class: String,
    /// The `retry_after` the ack asked for (None: none, the policy's backoff).
    pub retry_after_ms: Option<u64>,
    /// Deliveries the attempt took (more than one after expired deadlines).
    pub deliveries: u32,
}

impl AttemptRecord {
    /// How long the executor took: from the delivery to the end.
    pub fn duration_ms(&self) -> i64 {
        (self.ended_at_ms - self.delivered_at_ms).max(0)
    }
}

/// The attempts kept, oldest first, and how many were dropped between the first and the rest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub attempts: Vec<AttemptRecord>,
    pub dropped: u32,
}

/// What `History::record` changed, for `History::undo`.
#[derive(Debug)]
pub struct Recorded(Option<AttemptRecord>);

impl History {
    /// Appends `r` (its error cut to `MAX_RECORDED_ERROR_BYTES`). Past `MAX_ATTEMPTS_KEPT`
    /// the oldest record after the first goes, and is counted as dropped.
    pub fn record(&mut self, mut r: AttemptRecord) -> Recorded {
        cut(&mut r.error, MAX_RECORDED_ERROR_BYTES);
        self.attempts.push(r);
        if self.attempts.len() > MAX_ATTEMPTS_KEPT {
            self.dropped = self.dropped.saturating_add(1);
            return Recorded(Some(self.attempts.remove(1)));
        }
        Recorded(None)
    }

    /// Takes back the last `record` (its write failed; the attempt will be recorded again).
    pub fn undo(&mut self, recorded: Recorded) {
        self.attempts.pop();
        if let Some(r) = recorded.0 {
            self.attempts.insert(1, r);
            self.dropped = self.dropped.saturating_sub(1);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.attempts.is_empty() && self.dropped == 0
    }
}

/// Cuts `s` to at most `max` bytes, at a character boundary.
fn cut(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(n: u32, error: &str) -> AttemptRecord {
        AttemptRecord {
            attempt: n,
            delivered_at_ms: 1_000 * i64::from(n),
            ended_at_ms: 1_000 * i64::from(n) + 250,
            node_id: "n1".into(),
            executor_id: "w1".into(),
            end: AttemptEnd::Retry,
            error: error.into(),
            error_class: String::new(),
            retry_after_ms: None,
            deliveries: 1,
        }
    }

    #[test]
    fn keeps_the_first_and_the_latest_and_counts_the_rest() {
        let mut h = History::default();
        for n in 1..=25 {
            h.record(attempt(n, "boom"));
        }
        let kept: Vec<u32> = h.attempts.iter().map(|a| a.attempt).collect();
        assert_eq!(kept, vec![1, 17, 18, 19, 20, 21, 22, 23, 24, 25]);
        assert_eq!(h.dropped, 15);
        assert_eq!(h.attempts[3].duration_ms(), 250);
    }

    #[test]
    fn undo_restores_what_record_changed() {
        let mut h = History::default();
        for n in 1..=10 {
            h.record(attempt(n, "x"));
        }
        for n in 11..=12 {
            let before = h.clone();
            let r = h.record(attempt(n, "y"));
            assert_ne!(h, before);
            h.undo(r);
            assert_eq!(h, before);
            h.record(attempt(n, "y"));
        }
        let mut empty = History::default();
        let r = empty.record(attempt(1, "z"));
        empty.undo(r);
        assert!(empty.is_empty());
    }

    #[test]
    fn errors_are_cut_at_a_character_boundary() {
        let mut h = History::default();
        let long = "é".repeat(MAX_RECORDED_ERROR_BYTES);
        h.record(attempt(1, &long));
        let kept = &h.attempts[0].error;
        assert!(
            kept.len() <= MAX_RECORDED_ERROR_BYTES && kept.len() >= MAX_RECORDED_ERROR_BYTES - 1
        );
        assert!(long.starts_with(kept.as_str()));
    }

    #[test]
    fn codes_round_trip() {
        for end in [
            AttemptEnd::Succeeded,
            AttemptEnd::Retry,
            AttemptEnd::Failed,
            AttemptEnd::DeadlineExpired,
            AttemptEnd::Held,
            AttemptEnd::Snoozed,
        ] {
            assert_eq!(AttemptEnd::of_code(end.code()), Some(end));
        }
        assert_eq!(AttemptEnd::of_code(0), None);
        assert_eq!(AttemptEnd::of_code(99), None);
    }
}
