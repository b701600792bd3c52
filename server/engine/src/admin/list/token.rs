//! The parts of a listing and its `page_token`: where the next call resumes. Parsing a token
//! is total: any text is a place to resume or a `page_token` error.

use rebound_store::{window::WindowId, FinishedAt};

use super::super::{
    dead_letters::{hex, unhex},
    Cursor,
};
use crate::{error::Error, validate};

/// The parts of a listing, in the order they come: the scheduled retries (the directory),
/// the ones in flight (every node's memory), the dead ones (the dead letters), the succeeded
/// and the cancelled ones (the finished log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Part {
    Scheduled,
    InFlight,
    Dead,
    Succeeded,
    Cancelled,
}

/// Where a listing resumes (its `page_token`).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Resume {
    /// At the first part asked for.
    Start,
    /// In the scheduled part, strictly after a position (`l1.`).
    Scheduled(Position),
    /// In the scheduled part, in a window listed by due time, strictly after a (due time,
    /// transaction id) of it (`l2.`).
    Sorted(SortedAt),
    /// In the in-flight part, strictly after a (due time, transaction id), or at its start
    /// (`i1.`).
    InFlight(Option<(i64, String)>),
    /// In the dead part, after a dead-letter cursor, or at its start (`d1.`).
    Dead(Option<Cursor>),
    /// In a part of the finished log (SUCCEEDED `s1.`, CANCELLED `c1.`), at a place in it, or
    /// at its start.
    Finished(Part, Option<FinishedAt>),
}

impl Resume {
    pub(super) fn part(&self) -> Option<Part> {
        match self {
            Resume::Start => None,
            Resume::Scheduled(_) | Resume::Sorted(_) => Some(Part::Scheduled),
            Resume::InFlight(_) => Some(Part::InFlight),
            Resume::Dead(_) => Some(Part::Dead),
            Resume::Finished(part, _) => Some(*part),
        }
    }

    /// Parses a `page_token`.
    pub(super) fn decode(token: &str) -> Result<Resume, Error> {
        let bad = || Error::invalid("page_token", "is not a token returned by ListRetries");
        if token.is_empty() {
            return Ok(Resume::Start);
        }
        if let Some(rest) = token.strip_prefix(DEAD_TOKEN) {
            if rest.is_empty() {
                return Ok(Resume::Dead(None));
            }
            let c = Cursor::decode(&format!("v1.{rest}")).map_err(|_| bad())?;
            return Ok(Resume::Dead(Some(c)));
        }
        if let Some(rest) = token.strip_prefix(IN_FLIGHT_TOKEN) {
            if rest.is_empty() {
                return Ok(Resume::InFlight(None));
            }
            let (due, id) = rest.split_once('.').ok_or_else(bad)?;
            let due = due.parse().map_err(|_| bad())?;
            let id = unhex(id, validate::MAX_TRANSACTION_ID_BYTES).ok_or_else(bad)?;
            return Ok(Resume::InFlight(Some((due, id))));
        }
        for (part, prefix) in FINISHED_TOKENS {
            if let Some(rest) = token.strip_prefix(prefix) {
                if rest.is_empty() {
                    return Ok(Resume::Finished(part, None));
                }
                let mut fields = rest.splitn(3, '.');
                let mut next = || fields.next().ok_or_else(bad);
                let second = next()?.parse().map_err(|_| bad())?;
                let chunk = next()?.parse().map_err(|_| bad())?;
                let index = next()?.parse().map_err(|_| bad())?;
                return Ok(Resume::Finished(
                    part,
                    Some(FinishedAt {
                        second,
                        chunk,
                        index,
                    }),
                ));
            }
        }
        if token.starts_with(SORTED_TOKEN) {
            return Ok(Resume::Sorted(SortedAt::decode(token)?));
        }
        Ok(Resume::Scheduled(Position::decode(token)?))
    }
}

const SORTED_TOKEN: &str = "l2.";

/// A place in a window listed by due time: the listing resumes strictly after (due time,
/// transaction id) in that window. Its text form is the `page_token`:
/// `l2.<day>.<window>.<due ms>.<transaction id as hex>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortedAt {
    pub window: WindowId,
    pub due_ms: i64,
    pub transaction_id: String,
}

impl SortedAt {
    pub fn encode(&self) -> String {
        format!(
            "{SORTED_TOKEN}{}.{}.{}.{}",
            self.window.day,
            self.window.index,
            self.due_ms,
            hex(&self.transaction_id)
        )
    }

    /// Parses a `page_token`. Total: any text is a place or a `page_token` error.
    fn decode(token: &str) -> Result<SortedAt, Error> {
        let bad = || Error::invalid("page_token", "is not a token returned by ListRetries");
        let rest = token.strip_prefix(SORTED_TOKEN).ok_or_else(bad)?;
        let mut parts = rest.splitn(4, '.');
        let day = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let index = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let due_ms = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let transaction_id = parts
            .next()
            .and_then(|p| unhex(p, validate::MAX_TRANSACTION_ID_BYTES))
            .ok_or_else(bad)?;
        Ok(SortedAt {
            window: WindowId { day, index },
            due_ms,
            transaction_id,
        })
    }
}

/// The `page_token`s of the finished parts: the prefix, and then, past its start, the place of
/// the next entry to read: `<second>.<chunk>.<index>`.
const FINISHED_TOKENS: [(Part, &str); 2] = [(Part::Succeeded, "s1."), (Part::Cancelled, "c1.")];

pub(super) fn finished_token(part: Part, at: Option<&FinishedAt>) -> String {
    let prefix = FINISHED_TOKENS
        .iter()
        .find(|(p, _)| *p == part)
        .map_or("s1.", |(_, prefix)| prefix);
    match at {
        None => prefix.to_string(),
        Some(at) => format!("{prefix}{}.{}.{}", at.second, at.chunk, at.index),
    }
}

/// A `page_token` of the dead part: `d1.` and then a dead-letter cursor without its `v1.`
/// (`d1.` alone: from the first letter).
pub(super) const DEAD_TOKEN: &str = "d1.";

/// A `page_token` of the in-flight part: `i1.` and then, past its start, the due time and
/// transaction id of the last retry listed: `<due ms>.<transaction id as hex>`.
pub(super) const IN_FLIGHT_TOKEN: &str = "i1.";

pub(super) fn in_flight_token(after: Option<&(i64, String)>) -> String {
    match after {
        None => IN_FLIGHT_TOKEN.to_string(),
        Some((due, id)) => format!("{IN_FLIGHT_TOKEN}{due}.{}", hex(id)),
    }
}

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
    pub(super) fn window_start(w: WindowId) -> Position {
        Position {
            day: w.day,
            window: w.index,
            instance: String::new(),
            bucket: 0,
            transaction_id: String::new(),
        }
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
            for t in [
                token,
                format!("l2.{tail}"),
                format!("i1.{tail}"),
                format!("d1.{tail}"),
                format!("s1.{tail}"),
                format!("c1.{tail}"),
            ] {
                if let Err(e) = Resume::decode(&t) {
                    prop_assert!(e.to_string().starts_with("page_token:"));
                }
            }
        }

        #[test]
        fn in_flight_tokens_round_trip(due in any::<i64>(), id in "\\PC{0,60}") {
            let at = (due, id);
            let t = in_flight_token(Some(&at));
            prop_assert_eq!(Resume::decode(&t).unwrap(), Resume::InFlight(Some(at)));
        }

        #[test]
        fn sorted_tokens_round_trip(
            day in any::<i32>(),
            index in any::<u32>(),
            due_ms in any::<i64>(),
            transaction_id in "\\PC{0,60}",
        ) {
            let at = SortedAt { window: WindowId { day, index }, due_ms, transaction_id };
            prop_assert_eq!(Resume::decode(&at.encode()).unwrap(), Resume::Sorted(at));
        }

        #[test]
        fn finished_tokens_round_trip(second in any::<i64>(), chunk in any::<i64>(), index in any::<u32>(), cancelled in any::<bool>()) {
            let part = if cancelled { Part::Cancelled } else { Part::Succeeded };
            let at = FinishedAt { second, chunk, index };
            let t = finished_token(part, Some(&at));
            prop_assert_eq!(Resume::decode(&t).unwrap(), Resume::Finished(part, Some(at)));
            prop_assert_eq!(Resume::decode(&finished_token(part, None)).unwrap(), Resume::Finished(part, None));
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
