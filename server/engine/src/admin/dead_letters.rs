//! Dead letters: ListDeadLetters and PurgeDeadLetters, the validated letter query, the
//! `page_token` cursor and the walk over matching letters (also used by GetStats and redrive).

use futures::TryStreamExt;
use rebound_proto::v1 as pb;

use crate::handle::Handle;
use crate::{error::Error, validate};
use rebound_proto::time::ts;
use rebound_store::{window::DAY_MS, DeadLetter};

/// Longest time range a dead-letter call may cover.
const MAX_DLQ_RANGE_DAYS: i64 = 400;
const MAX_ERROR_FILTER_BYTES: usize = 1024;

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

/// `s`'s bytes as lower-case hex: the text form of an id in a page token.
pub(super) fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The text whose bytes `h` spells in hex (either case), at most `max` bytes; None for
/// anything else. Total: pairs of bytes, not of string indices, so a multi-byte character is
/// refused rather than sliced through, and a sign is no digit.
pub(super) fn unhex(h: &str, max: usize) -> Option<String> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    };
    let h = h.as_bytes();
    if !h.len().is_multiple_of(2) || h.len() > 2 * max {
        return None;
    }
    let bytes = h
        .chunks_exact(2)
        .map(|p| Some((digit(p[0])? << 4) | digit(p[1])?))
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

impl Cursor {
    pub fn encode(&self) -> String {
        format!(
            "v1.{}.{}.{}",
            self.day,
            self.dead_at_ms,
            hex(&self.transaction_id)
        )
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
        let transaction_id = parts
            .next()
            .and_then(|h| unhex(h, validate::MAX_TRANSACTION_ID_BYTES))
            .ok_or_else(bad)?;
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

impl Handle {
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
        let page_size = validate::count("page_size", r.page_size, 100, 1000)? as usize;
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
        // A letter of a saga step or a compensation shows where its chain stands: the page's
        // state rows in one read, and the chain's rows for each that has one.
        let ids: Vec<String> = page.iter().map(|(l, _)| l.transaction_id.clone()).collect();
        let rows = self.writer.get_many(&r.service, &ids).await?;
        let mut dead_letters = Vec::with_capacity(page.len());
        for ((l, red), row) in page.into_iter().zip(rows) {
            let chain = match row.filter(|s| !s.saga.is_empty()) {
                Some(state) => crate::wire::chain_progress(&self.writer, &state).await?,
                None => None,
            };
            dead_letters.push(pb::DeadLetter {
                service: l.service,
                transaction_id: l.transaction_id,
                attempt: l.attempt,
                last_error: l.last_error,
                dead_at: Some(ts(l.dead_at_ms)),
                redriven_at: red.map(ts),
                chain,
            });
        }
        Ok(pb::ListDeadLettersResponse {
            dead_letters,
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
