//! What a push response (or its absence) means for the retry (docs/architecture.md, "Push
//! delivery"): the HTTP status, `Retry-After` and `rebound-error-class` of the receiver's
//! answer become the same [`AttemptOutcome`] an executor reports over gRPC.
//!
//! | answer | outcome |
//! | --- | --- |
//! | 2xx | `Succeeded` |
//! | 408, 409, 429, 5xx | `Retry`, after `Retry-After` if given, with the class of `rebound-error-class` if valid |
//! | no answer: timeout, connection, TLS or protocol error | `Retry` |
//! | guard refusal, DNS failure | `Retry` too: a DNS name may come back, and `REBOUND_PUSH_ALLOW` may be changed; the policy's attempts and deadline bound the tries |
//! | 3xx | `Failed` (redirects are not followed) |
//! | any other status (other 4xx, 1xx, ...) | `Failed`, with the start of the body |
//!
//! Never a snooze: every push is a try. Error texts are valid UTF-8 and bounded (`HTTP 503: `
//! and at most 1 KiB).

use std::time::Duration;

use super::client::{PushError, Response};
use crate::outcome::AttemptOutcome;

/// A receiver may name the class of its error (matched against the policy's non-retryable
/// classes), as an executor does in its Nack.
pub const ERROR_CLASS_HEADER: &str = "rebound-error-class";
/// The longest wait a `Retry-After` asks for that is honoured; more is cut to it.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30 * 24 * 3600);
/// The most bytes of response text (body, `Location`) or error message put into an error.
pub const MAX_TEXT: usize = 1024;

/// What the result of one push means for its retry. `now_ms` is the clock that an HTTP-date
/// `Retry-After` is measured from.
pub fn outcome(result: &Result<Response, PushError>, now_ms: i64) -> AttemptOutcome {
    let r = match result {
        Ok(r) => r,
        Err(e) => return retry(None, bounded(&e.to_string()).to_owned(), String::new()),
    };
    let status = r.status;
    match status {
        200..=299 => AttemptOutcome::Succeeded,
        408 | 409 | 429 | 500..=599 => {
            let after =
                header(r, http::header::RETRY_AFTER.as_str()).and_then(|v| retry_after(v, now_ms));
            let class = header(r, ERROR_CLASS_HEADER)
                .map(str::trim)
                .filter(|c| crate::policy::error_class_ok(c))
                .unwrap_or_default()
                .to_owned();
            let error = with_status(status, &first_line(&r.body_prefix));
            retry(after, error, class)
        }
        300..=399 => {
            let error = match r.headers.get(http::header::LOCATION) {
                Some(l) => format!(
                    "HTTP {status}: redirect to {} not followed",
                    bounded(String::from_utf8_lossy(l.as_bytes()).trim())
                ),
                None => format!("HTTP {status}: redirect not followed"),
            };
            AttemptOutcome::Failed { error }
        }
        _ => AttemptOutcome::Failed {
            error: with_status(
                status,
                bounded(String::from_utf8_lossy(&r.body_prefix).trim()),
            ),
        },
    }
}

fn retry(after: Option<Duration>, error: String, error_class: String) -> AttemptOutcome {
    AttemptOutcome::Retry {
        after,
        error,
        error_class,
        snooze: false,
    }
}

/// A header's value as text (None: absent or not visible ASCII).
fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
    r.headers.get(name)?.to_str().ok()
}

/// `HTTP 503: text`, or `HTTP 503` when there is no text.
fn with_status(status: u16, text: &str) -> String {
    if text.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {text}")
    }
}

/// The first non-blank line of the body, trimmed, as lossy UTF-8, at most [`MAX_TEXT`] bytes.
fn first_line(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line = text
        .split(['\r', '\n'])
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    bounded(line).to_owned()
}

/// At most [`MAX_TEXT`] bytes of `s`, cut at a character boundary.
fn bounded(s: &str) -> &str {
    if s.len() <= MAX_TEXT {
        return s;
    }
    let mut end = MAX_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The wait a `Retry-After` value asks for: delta-seconds (a non-negative integer) or an
/// HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms) measured from `now_ms`;
/// a date in the past gives zero; capped at [`MAX_RETRY_AFTER`]. None for anything else.
pub fn retry_after(value: &str, now_ms: i64) -> Option<Duration> {
    let v = value.trim_matches([' ', '\t']);
    if v.is_empty() {
        return None;
    }
    if v.bytes().all(|b| b.is_ascii_digit()) {
        // Only all-digit text reaches here, so a parse error is an overflow: a long wait.
        let secs = v.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    let at_ms = http_date_ms(v)?;
    let wait_ms = u64::try_from(at_ms.saturating_sub(now_ms)).unwrap_or(0);
    Some(Duration::from_millis(wait_ms).min(MAX_RETRY_AFTER))
}

/// An HTTP-date (RFC 9110, 5.6.7) as milliseconds since the epoch.
fn http_date_ms(v: &str) -> Option<i64> {
    // IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`, is an RFC 2822 date.
    if let Ok(t) = chrono::DateTime::parse_from_rfc2822(v) {
        return Some(t.timestamp_millis());
    }
    // RFC 850, `Sunday, 06-Nov-94 08:49:37 GMT`; asctime, `Sun Nov  6 08:49:37 1994`.
    ["%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(v, f).ok())
        .map(|t| t.and_utc().timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};
    use proptest::prelude::*;

    /// 1994-11-06T08:49:37Z, the date of RFC 9110's examples.
    const DATE_MS: i64 = 784_111_777_000;

    fn response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Result<Response, PushError> {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        Ok(Response {
            status,
            headers: map,
            body_prefix: body.to_vec(),
        })
    }

    fn retry_of(after: Option<Duration>, error: &str, class: &str) -> AttemptOutcome {
        AttemptOutcome::Retry {
            after,
            error: error.into(),
            error_class: class.into(),
            snooze: false,
        }
    }

    fn failed(error: &str) -> AttemptOutcome {
        AttemptOutcome::Failed {
            error: error.into(),
        }
    }

    #[test]
    fn success_statuses() {
        for s in [200, 201, 202, 204, 299] {
            assert_eq!(
                outcome(&response(s, &[], b"whatever"), 0),
                AttemptOutcome::Succeeded
            );
        }
    }

    #[test]
    fn retryable_statuses() {
        assert_eq!(
            outcome(
                &response(
                    503,
                    &[("retry-after", "120")],
                    b"  down for maintenance \r\nmore"
                ),
                0
            ),
            retry_of(
                Some(Duration::from_secs(120)),
                "HTTP 503: down for maintenance",
                ""
            )
        );
        assert_eq!(
            outcome(
                &response(
                    429,
                    &[
                        ("retry-after", "Sun, 06 Nov 1994 08:50:37 GMT"),
                        (ERROR_CLASS_HEADER, " rate_limited ")
                    ],
                    b"\n\nslow down"
                ),
                DATE_MS
            ),
            retry_of(
                Some(Duration::from_secs(60)),
                "HTTP 429: slow down",
                "rate_limited"
            )
        );
        for s in [408, 409, 500, 502, 504, 599] {
            assert_eq!(
                outcome(
                    &response(s, &[(ERROR_CLASS_HEADER, "db:timeout/primary")], b""),
                    0
                ),
                retry_of(None, &format!("HTTP {s}"), "db:timeout/primary")
            );
        }
        // A class that is not one is dropped, the retry stays.
        for bad in ["has space", "", "ü", &"x".repeat(129)] {
            let o = outcome(&response(500, &[(ERROR_CLASS_HEADER, bad)], b"oops"), 0);
            assert_eq!(o, retry_of(None, "HTTP 500: oops", ""), "{bad:?}");
        }
        // A bad Retry-After is ignored.
        assert_eq!(
            outcome(&response(503, &[("retry-after", "soon")], b""), 0),
            retry_of(None, "HTTP 503", "")
        );
    }

    #[test]
    fn redirects_fail() {
        assert_eq!(
            outcome(
                &response(
                    302,
                    &[("location", "https://elsewhere.example/x")],
                    b"moved"
                ),
                0
            ),
            failed("HTTP 302: redirect to https://elsewhere.example/x not followed")
        );
        assert_eq!(
            outcome(&response(301, &[], b""), 0),
            failed("HTTP 301: redirect not followed")
        );
    }

    #[test]
    fn other_statuses_fail_with_the_body() {
        assert_eq!(
            outcome(&response(410, &[], b"gone\nfor good"), 0),
            failed("HTTP 410: gone\nfor good")
        );
        assert_eq!(outcome(&response(400, &[], b""), 0), failed("HTTP 400"));
        assert_eq!(outcome(&response(101, &[], b"x"), 0), failed("HTTP 101: x"));
        assert_eq!(outcome(&response(600, &[], b"x"), 0), failed("HTTP 600: x"));
        // Invalid UTF-8 is replaced, and the text stays bounded.
        let o = outcome(&response(404, &[], &[0xff; 1024]), 0);
        let AttemptOutcome::Failed { error } = o else {
            panic!("{o:?}")
        };
        assert!(error.starts_with("HTTP 404: \u{fffd}"));
        assert!(
            error.len() <= "HTTP 404: ".len() + MAX_TEXT,
            "{}",
            error.len()
        );
    }

    #[test]
    fn errors_retry_with_their_message() {
        for e in [
            PushError::Timeout,
            PushError::Connect("connect to 10.1.1.1:80: connection refused".into()),
            PushError::Tls("bad certificate".into()),
            PushError::Protocol("connection closed before the response".into()),
            PushError::Refused("push to x refused: ...".into()),
            PushError::Dns("cannot resolve \"x\"".into()),
            PushError::Protocol("é".repeat(2000)),
        ] {
            let message = e.to_string();
            let o = outcome(&Err(e), 0);
            let AttemptOutcome::Retry {
                after: None,
                error,
                error_class,
                snooze: false,
            } = o
            else {
                panic!("{o:?}")
            };
            assert!(error_class.is_empty());
            assert!(!error.is_empty() && error.len() <= MAX_TEXT);
            assert!(message.starts_with(&error), "{error}");
        }
    }

    #[test]
    fn retry_after_forms() {
        let s = |n| Some(Duration::from_secs(n));
        assert_eq!(retry_after("0", DATE_MS), s(0));
        assert_eq!(retry_after(" 120\t", DATE_MS), s(120));
        assert_eq!(retry_after("0007", DATE_MS), s(7));
        assert_eq!(retry_after("2592000", DATE_MS), s(2_592_000));
        assert_eq!(retry_after("2592001", DATE_MS), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after(&"9".repeat(40), DATE_MS), Some(MAX_RETRY_AFTER));
        // IMF-fixdate, RFC 850, asctime: the same instant, 10 s after now.
        for date in [
            "Sun, 06 Nov 1994 08:49:47 GMT",
            "Sunday, 06-Nov-94 08:49:47 GMT",
            "Sun Nov  6 08:49:47 1994",
        ] {
            assert_eq!(retry_after(date, DATE_MS), s(10), "{date}");
        }
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:37 GMT", DATE_MS + 500),
            s(0),
            "a past date is no wait"
        );
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:37 GMT", DATE_MS - 500),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            retry_after("Fri, 01 Jan 2100 00:00:00 GMT", DATE_MS),
            Some(MAX_RETRY_AFTER)
        );
        for bad in [
            "",
            " ",
            "-1",
            "+5",
            "1.5",
            "1e3",
            "soon",
            "12 s",
            "Sun, 32 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(retry_after(bad, DATE_MS), None, "{bad:?}");
        }
    }

    fn dateish() -> impl Strategy<Value = String> {
        prop_oneof![
            "[A-Za-z]{3,9}, [0-9]{1,3}[ -][A-Za-z]{3}[ -][0-9]{2,5} [0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2} [A-Z+0-9-]{0,5}",
            "[A-Za-z]{3} [A-Za-z]{3} {1,2}[0-9]{1,2} [0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2} [0-9]{1,6}",
            "[0-9 \t+-]{0,30}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn retry_after_is_total(v in prop_oneof![any::<String>(), dateish()], now in any::<i64>()) {
            if let Some(d) = retry_after(&v, now) {
                prop_assert!(d <= MAX_RETRY_AFTER);
            }
        }

        #[test]
        fn delta_seconds_round_trip(n in 0u64..=2_592_000, now in any::<i64>()) {
            prop_assert_eq!(retry_after(&n.to_string(), now), Some(Duration::from_secs(n)));
        }

        #[test]
        fn imf_fixdates_round_trip(at in 0i64..4_102_444_800, now in 0i64..4_102_444_800_000) {
            let text = chrono::DateTime::from_timestamp(at, 0)
                .expect("in range")
                .format("%a, %d %b %Y %H:%M:%S GMT")
                .to_string();
            let want = u64::try_from(at * 1000 - now).unwrap_or(0);
            prop_assert_eq!(
                retry_after(&text, now),
                Some(Duration::from_millis(want).min(MAX_RETRY_AFTER))
            );
        }

        #[test]
        fn any_response_gives_a_bounded_outcome(
            status in any::<u16>(),
            body in prop::collection::vec(any::<u8>(), 0..=1024),
            retry in "[ -~]{0,40}",
            class in "[ -~]{0,40}",
            location in "[ -~]{0,2000}",
        ) {
            let r = response(status, &[
                ("retry-after", &retry),
                (ERROR_CLASS_HEADER, &class),
                ("location", &location),
            ], &body);
            let bound = "HTTP 65535: redirect to  not followed".len() + MAX_TEXT;
            match outcome(&r, 0) {
                AttemptOutcome::Succeeded => prop_assert!((200..300).contains(&status)),
                AttemptOutcome::Retry { after, error, error_class, snooze } => {
                    prop_assert!(!snooze);
                    prop_assert!(error.len() <= bound);
                    prop_assert!(after.is_none_or(|a| a <= MAX_RETRY_AFTER));
                    prop_assert!(error_class.is_empty() || crate::policy::error_class_ok(&error_class));
                }
                AttemptOutcome::Failed { error } => prop_assert!(error.len() <= bound),
            }
        }
    }
}
