//! A service's push target as an admin call gives it (`AdminService.SetPushTarget`): its
//! validation (the check of its host's addresses when it is set is `push_address`'s), the raw
//! keys of its signing secrets, and the masked form the API answers with ([`mask`]).
//!
//! The limits are those of `PushTarget` in proto/rebound/v1/admin.proto. Every check here is
//! total: any text a client sends is refused with INVALID_ARGUMENT naming the field and the
//! limit, never a panic. Error messages never repeat a secret, a header value, nor a URL (it
//! may carry a token in its query).
//!
//! Secrets and header values are answered masked, and a masked value (it holds [`MASK`], which
//! no secret or header value may hold) is refused when a target is set: a target read back
//! and sent again can never store the masked text in place of the real value.

use std::{collections::BTreeMap, time::Duration};

use base64::Engine as _;
use rebound_proto::{time::dur, v1 as pb};

use crate::{error::Error, names::show, validate};

/// How long one request may take when the target does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
pub const MIN_TIMEOUT: Duration = Duration::from_secs(1);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Requests in flight at once to the target from one node, when the target does not say.
pub const DEFAULT_MAX_CONCURRENT: u32 = 64;
pub const MAX_CONCURRENT: u32 = 1000;
/// Characters of the URL, as given and as stored (normalized).
pub const MAX_URL_CHARS: usize = 2048;
pub const MAX_HEADERS: usize = 32;
/// Bytes of every header name and value together.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;
/// One secret, or two while rotating.
pub const MAX_SECRETS: usize = 2;
/// Bytes of a signing key, after base64 decoding.
pub const MIN_SECRET_BYTES: usize = 24;
pub const MAX_SECRET_BYTES: usize = 64;
/// The Standard Webhooks prefix of a secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// What stands for the hidden part of a masked secret or header value. Not ASCII, so never
/// part of a valid secret or header value.
pub const MASK: char = '…';
/// A header value keeps its last [`MASK_TAIL`] characters in its masked form only when it has
/// at least this many, so that two thirds or more of it stay hidden.
pub const MASK_MIN_CHARS: usize = 12;
/// The characters a masked secret or header value keeps, at its end.
pub const MASK_TAIL: usize = 4;

/// Header names the node sets on every request itself (compared case-insensitively).
pub const RESERVED_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
    "traceparent",
    "tracestate",
];
/// Header name prefixes the node keeps for itself (`webhook-id`, `rebound-attempt`, ...).
pub const RESERVED_HEADER_PREFIXES: &[&str] = &["webhook-", "rebound-"];

/// Validates an admin call's target. `Err(Error::InvalidArgument)` names the field
/// (`target.url`, `target.timeout`, `target.headers["X-Foo"]`, `target.signing_secrets[1]`,
/// `target.max_concurrent`) and the limit. Returns the target as stored: the URL normalized
/// (as the `url` crate serializes it), timeout and max_concurrent filled with their defaults,
/// secrets as given, `updated_at` unset (the caller sets it).
pub fn validate(t: Option<&pb::PushTarget>) -> Result<pb::PushTarget, Error> {
    let t = t.ok_or_else(|| Error::invalid("target", "is required"))?;
    let url = url("target.url", &t.url)?;
    let timeout = timeout("target.timeout", t.timeout.as_ref())?;
    headers("target.headers", &t.headers)?;
    secrets("target.signing_secrets", &t.signing_secrets)?;
    let max_concurrent = match t.max_concurrent {
        None => DEFAULT_MAX_CONCURRENT,
        Some(n) if (1..=MAX_CONCURRENT).contains(&n) => n,
        Some(n) => {
            return Err(Error::invalid(
                "target.max_concurrent",
                format!("must be between 1 and {MAX_CONCURRENT}, got {n}"),
            ))
        }
    };
    Ok(pb::PushTarget {
        url,
        timeout: Some(dur(timeout)),
        headers: t.headers.clone(),
        signing_secrets: t.signing_secrets.clone(),
        max_concurrent: Some(max_concurrent),
        updated_at: None,
    })
}

/// The raw key bytes of a signing secret: the `whsec_` prefix is optional, then standard
/// base64 (padding optional), 24-64 bytes once decoded. The error reads after the field name
/// and never repeats the secret.
pub fn secret_key(s: &str) -> Result<Vec<u8>, String> {
    let encoded = s.strip_prefix(SECRET_PREFIX).unwrap_or(s);
    if encoded.is_empty() {
        return Err(format!(
            "is required: {SECRET_PREFIX} and the base64 of {MIN_SECRET_BYTES}-{MAX_SECRET_BYTES} \
             random bytes"
        ));
    }
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let key = engine.decode(encoded).map_err(|_| {
        format!(
            "must be {SECRET_PREFIX} followed by standard base64 (A-Z, a-z, 0-9, + and /, \
             = padding optional)"
        )
    })?;
    if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
        return Err(format!(
            "must decode to {MIN_SECRET_BYTES}-{MAX_SECRET_BYTES} bytes, got {}",
            key.len()
        ));
    }
    Ok(key)
}

/// The form of a target every answer gives (GetPushTarget, SetPushTarget, ServiceInfo, so
/// the CLI and the dashboard too): each secret as `whsec_…` and its last 4 characters, each
/// header value masked by [`mask_value`].
pub fn mask(t: &pb::PushTarget) -> pb::PushTarget {
    pb::PushTarget {
        signing_secrets: t.signing_secrets.iter().map(|s| mask_secret(s)).collect(),
        headers: t
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), mask_value(v)))
            .collect(),
        ..t.clone()
    }
}

fn mask_secret(s: &str) -> String {
    format!("{SECRET_PREFIX}{MASK}{}", tail(s))
}

/// A header value as the API answers it: `…` and its last 4 characters when it has at least
/// [`MASK_MIN_CHARS`] characters (`Bearer eyJhbGciOiJIUzI1NiJ9` reads `…NiJ9`), `…` alone when
/// it is shorter, and an empty value stays empty (it hides nothing).
pub fn mask_value(v: &str) -> String {
    if v.is_empty() {
        String::new()
    } else if v.chars().count() >= MASK_MIN_CHARS {
        format!("{MASK}{}", tail(v))
    } else {
        MASK.to_string()
    }
}

/// The last [`MASK_TAIL`] characters of `s`.
fn tail(s: &str) -> String {
    let tail: Vec<char> = s.chars().rev().take(MASK_TAIL).collect();
    tail.into_iter().rev().collect()
}

fn url(field: &str, v: &str) -> Result<String, Error> {
    if v.is_empty() {
        return Err(Error::invalid(field, "is required"));
    }
    let chars = v.chars().count();
    if chars > MAX_URL_CHARS {
        return Err(Error::invalid(
            field,
            format!("must be at most {MAX_URL_CHARS} characters, got {chars}"),
        ));
    }
    let u = url::Url::parse(v)
        .map_err(|e| Error::invalid(field, format!("must be an absolute http(s) URL ({e})")))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(Error::invalid(
            field,
            format!(
                "must be an http:// or https:// URL, got scheme {}",
                show(u.scheme())
            ),
        ));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid(field, "must name a host"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(Error::invalid(
            field,
            "must not carry a user name or password (a URL with credentials): send them in a \
             header instead",
        ));
    }
    if u.fragment().is_some() {
        return Err(Error::invalid(
            field,
            "must not have a fragment (#...): it is never sent",
        ));
    }
    let stored = String::from(u);
    let chars = stored.chars().count();
    if chars > MAX_URL_CHARS {
        return Err(Error::invalid(
            field,
            format!("must be at most {MAX_URL_CHARS} characters once normalized, got {chars}"),
        ));
    }
    Ok(stored)
}

fn timeout(field: &str, d: Option<&prost_types::Duration>) -> Result<Duration, Error> {
    let Some(d) = d else {
        return Ok(DEFAULT_TIMEOUT);
    };
    let t = validate::duration(field, d)?;
    if !(MIN_TIMEOUT..=MAX_TIMEOUT).contains(&t) {
        return Err(Error::invalid(
            field,
            format!(
                "must be between {}s and {}s ({} min), got {}s",
                MIN_TIMEOUT.as_secs(),
                MAX_TIMEOUT.as_secs(),
                MAX_TIMEOUT.as_secs() / 60,
                t.as_secs_f64()
            ),
        ));
    }
    Ok(t)
}

/// RFC 9110's `tchar`: what an HTTP token (a field name) is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn headers(field: &str, headers: &std::collections::HashMap<String, String>) -> Result<(), Error> {
    if headers.len() > MAX_HEADERS {
        return Err(Error::invalid(
            field,
            format!(
                "must be at most {MAX_HEADERS} headers, got {}",
                headers.len()
            ),
        ));
    }
    // In name order, so that the same request is always refused for the same header.
    let sorted: BTreeMap<&str, &str> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut total = 0usize;
    let mut seen = std::collections::HashSet::new();
    for (name, value) in sorted {
        let f = format!("{field}[{}]", show(name));
        if name.is_empty() {
            return Err(Error::invalid(f, "a header name is required"));
        }
        if !name.bytes().all(is_tchar) {
            return Err(Error::invalid(
                f,
                "the name must be an HTTP token: letters, digits and !#$%&'*+-.^_`|~",
            ));
        }
        let lower = name.to_ascii_lowercase();
        if !seen.insert(lower.clone()) {
            return Err(Error::invalid(
                f,
                "repeats a header name given already (names are case-insensitive)",
            ));
        }
        if RESERVED_HEADERS.contains(&lower.as_str())
            || RESERVED_HEADER_PREFIXES
                .iter()
                .any(|p| lower.starts_with(p))
        {
            return Err(Error::invalid(
                f,
                format!(
                    "is set by the node itself (refused: {}, and names starting with {})",
                    RESERVED_HEADERS.join(", "),
                    RESERVED_HEADER_PREFIXES.join(" or ")
                ),
            ));
        }
        if value.contains(MASK) {
            return Err(Error::invalid(
                f,
                format!(
                    "is a masked value ({MASK} stands for its hidden part, as the node answers \
                     header values): give the value itself"
                ),
            ));
        }
        if !value
            .bytes()
            .all(|b| b.is_ascii_graphic() || b == b' ' || b == b'\t')
        {
            return Err(Error::invalid(
                f,
                "the value must be visible ASCII, spaces and tabs (no line breaks or other \
                 control characters)",
            ));
        }
        total += name.len() + value.len();
    }
    if total > MAX_HEADER_BYTES {
        return Err(Error::invalid(
            field,
            format!(
                "names and values must be at most {MAX_HEADER_BYTES} bytes in all, got {total}"
            ),
        ));
    }
    Ok(())
}

fn secrets(field: &str, secrets: &[String]) -> Result<(), Error> {
    if secrets.is_empty() {
        return Err(Error::invalid(
            field,
            format!(
                "at least one is required: {SECRET_PREFIX} and the base64 of \
                 {MIN_SECRET_BYTES}-{MAX_SECRET_BYTES} random bytes"
            ),
        ));
    }
    if secrets.len() > MAX_SECRETS {
        return Err(Error::invalid(
            field,
            format!(
                "must be at most {MAX_SECRETS} (two while rotating), got {}",
                secrets.len()
            ),
        ));
    }
    for (i, s) in secrets.iter().enumerate() {
        if s.contains(MASK) {
            return Err(Error::invalid(
                format!("{field}[{i}]"),
                format!(
                    "is a masked secret ({SECRET_PREFIX}{MASK} and its last characters, as the \
                     node answers secrets): give the secret itself"
                ),
            ));
        }
        secret_key(s).map_err(|m| Error::invalid(format!("{field}[{i}]"), m))?;
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn secret(n: usize) -> String {
        let bytes: Vec<u8> = (0..n).map(|i| i as u8).collect();
        format!(
            "{SECRET_PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    }

    /// A target every check accepts (`push_address`'s tests build on it too).
    pub(in crate::services) fn good() -> pb::PushTarget {
        pb::PushTarget {
            url: "https://hooks.example.com/rebound?tenant=7".into(),
            timeout: None,
            headers: HashMap::from([("X-Api-Key".to_string(), "k 1\tz".to_string())]),
            signing_secrets: vec![secret(32)],
            max_concurrent: None,
            updated_at: None,
        }
    }

    /// The field an input is refused on.
    fn refused(t: pb::PushTarget) -> (String, String) {
        match validate(Some(&t)) {
            Err(Error::InvalidArgument { field, message }) => (field, message),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_good_target_is_stored_with_its_defaults() {
        let mut t = good();
        t.updated_at = Some(prost_types::Timestamp {
            seconds: 5,
            nanos: 0,
        });
        let v = validate(Some(&t)).unwrap();
        assert_eq!(v.url, "https://hooks.example.com/rebound?tenant=7");
        assert_eq!(v.timeout, Some(dur(DEFAULT_TIMEOUT)));
        assert_eq!(v.max_concurrent, Some(DEFAULT_MAX_CONCURRENT));
        assert_eq!(v.headers, t.headers);
        assert_eq!(v.signing_secrets, t.signing_secrets);
        assert_eq!(v.updated_at, None, "the caller sets it");
        // Validating the stored form again changes nothing.
        assert_eq!(validate(Some(&v)).unwrap(), v);
        // The URL is stored normalized.
        let v = validate(Some(&pb::PushTarget {
            url: "HTTP://Hooks.Example.COM:80".into(),
            ..good()
        }))
        .unwrap();
        assert_eq!(v.url, "http://hooks.example.com/");
        // The limits themselves are allowed.
        let v = validate(Some(&pb::PushTarget {
            timeout: Some(dur(MAX_TIMEOUT)),
            max_concurrent: Some(MAX_CONCURRENT),
            signing_secrets: vec![secret(MIN_SECRET_BYTES), secret(MAX_SECRET_BYTES)],
            ..good()
        }))
        .unwrap();
        assert_eq!(v.timeout, Some(dur(MAX_TIMEOUT)));
        validate(Some(&pb::PushTarget {
            timeout: Some(dur(MIN_TIMEOUT)),
            max_concurrent: Some(1),
            headers: HashMap::new(),
            ..good()
        }))
        .unwrap();
    }

    #[test]
    fn a_missing_target_is_refused() {
        assert!(matches!(
            validate(None),
            Err(Error::InvalidArgument { field, .. }) if field == "target"
        ));
    }

    #[test]
    fn url_refusals() {
        let with_url = |u: &str| pb::PushTarget {
            url: u.into(),
            ..good()
        };
        let (f, m) = refused(with_url("https://user:hunter2@hooks.example.com/"));
        assert_eq!(f, "target.url");
        assert!(m.contains("a URL with credentials"), "{m}");
        assert!(!m.contains("hunter2"), "{m}");
        let (f, m) = refused(with_url("https://user@hooks.example.com/"));
        assert_eq!(
            (f.as_str(), m.contains("credentials")),
            ("target.url", true)
        );
        let (f, m) = refused(with_url("ftp://files.example.com/in"));
        assert_eq!(f, "target.url");
        assert!(
            m.contains("http:// or https://") && m.contains("\"ftp\""),
            "{m}"
        );
        for bad in [
            "",
            "hooks.example.com/path",
            "/relative",
            "https://hooks.example.com/#frag",
            "file:///etc/passwd",
            "unix:/run/x.sock",
            "http://",
            "https://[::1",
        ] {
            assert_eq!(refused(with_url(bad)).0, "target.url", "{bad:?}");
        }
        let long = format!("https://hooks.example.com/{}", "a".repeat(MAX_URL_CHARS));
        let (_, m) = refused(with_url(&long));
        assert!(m.contains("at most 2048 characters"), "{m}");
        // Exactly at the limit is fine.
        let prefix = "https://hooks.example.com/";
        let at = format!("{prefix}{}", "a".repeat(MAX_URL_CHARS - prefix.len()));
        validate(Some(&with_url(&at))).unwrap();
    }

    #[test]
    fn timeout_refusals() {
        let with = |d: prost_types::Duration| pb::PushTarget {
            timeout: Some(d),
            ..good()
        };
        let (f, m) = refused(with(prost_types::Duration::default()));
        assert_eq!(f, "target.timeout");
        assert!(m.contains("between 1s and 1800s"), "{m}");
        let (f, _) = refused(with(dur(Duration::from_secs(31 * 60))));
        assert_eq!(f, "target.timeout");
        let (f, _) = refused(with(dur(Duration::from_millis(999))));
        assert_eq!(f, "target.timeout");
        let (f, _) = refused(with(prost_types::Duration {
            seconds: -5,
            nanos: 0,
        }));
        assert_eq!(f, "target.timeout");
        let (f, _) = refused(with(prost_types::Duration {
            seconds: 5,
            nanos: 1_000_000_000,
        }));
        assert_eq!(f, "target.timeout");
        let (f, _) = refused(with(dur(MAX_TIMEOUT + Duration::from_nanos(1))));
        assert_eq!(f, "target.timeout");
    }

    #[test]
    fn secret_refusals() {
        let with = |s: Vec<String>| pb::PushTarget {
            signing_secrets: s,
            ..good()
        };
        let (f, m) = refused(with(vec![secret(32), secret(23)]));
        assert_eq!(f, "target.signing_secrets[1]");
        assert!(m.contains("24-64 bytes, got 23"), "{m}");
        let (f, m) = refused(with(vec![secret(65)]));
        assert_eq!(f, "target.signing_secrets[0]");
        assert!(m.contains("got 65"), "{m}");
        let (f, m) = refused(with(vec![secret(32), secret(33), secret(34)]));
        assert_eq!(f, "target.signing_secrets");
        assert!(m.contains("at most 2"), "{m}");
        let (f, m) = refused(with(vec![]));
        assert_eq!(f, "target.signing_secrets");
        assert!(m.contains("at least one"), "{m}");
        for bad in [
            "",
            "whsec_",
            "whsec_not base64!",
            "whsec_ AAAA",
            "whsec_-_-_",
        ] {
            let (f, m) = refused(with(vec![bad.to_string()]));
            assert_eq!(f, "target.signing_secrets[0]", "{bad:?}");
            if bad.len() > SECRET_PREFIX.len() {
                assert!(!m.contains(&bad[SECRET_PREFIX.len()..]), "{m}");
            }
        }
    }

    #[test]
    fn secret_keys_decode_with_or_without_prefix_and_padding() {
        let bytes: Vec<u8> = (100..132).collect();
        let padded = base64::engine::general_purpose::STANDARD.encode(&bytes[..25]);
        assert!(padded.ends_with('='), "{padded}");
        assert_eq!(
            secret_key(&format!("whsec_{padded}")).unwrap(),
            &bytes[..25]
        );
        assert_eq!(secret_key(&padded).unwrap(), &bytes[..25]);
        let unpadded = padded.trim_end_matches('=');
        assert_eq!(
            secret_key(&format!("whsec_{unpadded}")).unwrap(),
            &bytes[..25]
        );
        // URL-safe base64 is not the standard alphabet.
        let url_safe = base64::engine::general_purpose::URL_SAFE.encode([0xfb; 30]);
        assert!(url_safe.contains('-') || url_safe.contains('_'));
        assert!(secret_key(&url_safe).is_err());
    }

    #[test]
    fn header_refusals() {
        let with = |k: &str, v: &str| pb::PushTarget {
            headers: HashMap::from([(k.to_string(), v.to_string())]),
            ..good()
        };
        for reserved in [
            "Content-Type",
            "content-length",
            "HOST",
            "Transfer-Encoding",
            "connection",
            "traceparent",
            "TraceState",
            "webhook-id",
            "Webhook-Signature",
            "rebound-attempt",
            "REBOUND-X",
        ] {
            let (f, m) = refused(with(reserved, "x"));
            assert_eq!(f, format!("target.headers[{reserved:?}]"));
            assert!(m.contains("set by the node"), "{m}");
        }
        let (f, m) = refused(with("X Foo", "x"));
        assert_eq!(f, "target.headers[\"X Foo\"]");
        assert!(m.contains("HTTP token"), "{m}");
        assert_eq!(refused(with("", "x")).0, "target.headers[\"\"]");
        assert_eq!(refused(with("X-Ä", "x")).0, "target.headers[\"X-Ä\"]");
        for bad in ["a\r\nInjected: 1", "a\nb", "nul\0", "é", "\x7f"] {
            let (f, m) = refused(with("X-Foo", bad));
            assert_eq!(f, "target.headers[\"X-Foo\"]", "{bad:?}");
            assert!(m.contains("visible ASCII"), "{m}");
        }
        // Names are case-insensitive: one header may not be given twice.
        let (f, m) = refused(pb::PushTarget {
            headers: HashMap::from([
                ("X-Foo".to_string(), "1".to_string()),
                ("x-foo".to_string(), "2".to_string()),
            ]),
            ..good()
        });
        assert_eq!(f, "target.headers[\"x-foo\"]");
        assert!(m.contains("case-insensitive"), "{m}");
        // Allowed: tokens, and values with spaces and tabs.
        validate(Some(&with("X-Weird!#$%&'*+.^_`|~1", " a b\t~ "))).unwrap();
        // Counts and total size.
        let many: HashMap<String, String> =
            (0..33).map(|i| (format!("X-H{i}"), "v".into())).collect();
        let (f, m) = refused(pb::PushTarget {
            headers: many,
            ..good()
        });
        assert_eq!(f, "target.headers");
        assert!(m.contains("at most 32"), "{m}");
        let big: HashMap<String, String> = (0..3)
            .map(|i| (format!("X-H{i}"), "v".repeat(3000)))
            .collect();
        let (f, m) = refused(pb::PushTarget {
            headers: big,
            ..good()
        });
        assert_eq!(f, "target.headers");
        assert!(m.contains("8192 bytes"), "{m}");
        let fits: HashMap<String, String> = (0..2)
            .map(|i| (format!("X-H{i}"), "v".repeat(4096 - 4)))
            .collect();
        validate(Some(&pb::PushTarget {
            headers: fits,
            ..good()
        }))
        .unwrap();
    }

    #[test]
    fn max_concurrent_refusals() {
        for n in [0, MAX_CONCURRENT + 1, u32::MAX] {
            let (f, m) = refused(pb::PushTarget {
                max_concurrent: Some(n),
                ..good()
            });
            assert_eq!(f, "target.max_concurrent");
            assert!(m.contains("between 1 and 1000"), "{m}");
        }
    }

    #[test]
    fn masking_keeps_the_last_four_characters() {
        let t = pb::PushTarget {
            signing_secrets: vec![secret(32), "abc".into()],
            ..good()
        };
        let m = mask(&t);
        let first = &t.signing_secrets[0];
        assert_eq!(
            m.signing_secrets[0],
            format!("whsec_…{}", &first[first.len() - 4..])
        );
        assert_eq!(m.signing_secrets[1], "whsec_…abc");
        assert_eq!(m.url, t.url);
        assert_eq!(m.headers, HashMap::from([("X-Api-Key".into(), "…".into())]));
        assert!(!m.signing_secrets[0].contains(&first[6..first.len() - 4]));
    }

    #[test]
    fn header_values_are_masked_like_secrets() {
        assert_eq!(mask_value(""), "");
        assert_eq!(mask_value("7"), "…");
        assert_eq!(mask_value("payments"), "…");
        assert_eq!(
            mask_value("Bearer abc1"),
            "…",
            "11 characters: nothing shown"
        );
        assert_eq!(
            mask_value("Bearer abc12"),
            "…bc12",
            "12 characters: the last 4"
        );
        assert_eq!(mask_value("ééééééééééé€"), "…ééé€", "characters, not bytes");
        assert_eq!(mask_value("Bearer eyJhbGciOiJIUzI1NiJ9"), "…NiJ9");
        let t = pb::PushTarget {
            headers: HashMap::from([
                ("Authorization".into(), "Bearer eyJhbGciOiJIUzI1NiJ9".into()),
                ("X-Team".into(), "payments".into()),
                ("X-Empty".into(), String::new()),
            ]),
            ..good()
        };
        let m = mask(&t);
        assert_eq!(
            m.headers,
            HashMap::from([
                ("Authorization".into(), "…NiJ9".into()),
                ("X-Team".into(), "…".into()),
                ("X-Empty".into(), String::new()),
            ])
        );
        assert_eq!(
            (m.url, m.timeout, m.max_concurrent),
            (t.url, t.timeout, t.max_concurrent)
        );
    }

    #[test]
    fn a_masked_target_sent_back_is_refused() {
        let stored = validate(Some(&pb::PushTarget {
            headers: HashMap::from([(
                "Authorization".into(),
                "Bearer eyJhbGciOiJIUzI1NiJ9".into(),
            )]),
            ..good()
        }))
        .unwrap();
        // As an "edit" would send it back: every field as answered.
        let (f, m) = refused(mask(&stored));
        assert_eq!(f, "target.headers[\"Authorization\"]");
        assert!(
            m.contains("masked value") && m.contains("give the value itself"),
            "{m}"
        );
        assert!(!m.contains("NiJ9"), "{m}");
        // The real header values again, the secrets still masked.
        let (f, m) = refused(pb::PushTarget {
            headers: stored.headers.clone(),
            ..mask(&stored)
        });
        assert_eq!(f, "target.signing_secrets[0]");
        assert!(
            m.contains("masked secret") && m.contains("give the secret itself"),
            "{m}"
        );
        // A masked short value, and the mask alone, are refused the same way.
        for v in ["…", "…ents", "x…"] {
            let (f, m) = refused(pb::PushTarget {
                headers: HashMap::from([("X-Team".into(), v.into())]),
                ..good()
            });
            assert_eq!(f, "target.headers[\"X-Team\"]", "{v}");
            assert!(m.contains("masked value"), "{m}");
        }
        // With everything given in clear again it is stored.
        assert_eq!(validate(Some(&stored)).unwrap(), stored);
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "(https?|ftp|HTTP|file|unix|data)?:?/{0,3}([a-z0-9.:@\\[\\]%-]{0,30})(/[ -~]{0,40})?(\\?[ -~]{0,20})?(#[ -~]{0,5})?",
            "[ -~]{0,60}",
            "(https?|HTTPS?)://([a-zA-Z0-9-]{1,12}\\.){0,3}[a-z]{1,8}(:[0-9]{1,6})?(/[ -~]{0,30}){0,3}(\\?[ -~]{0,20})?",
            prop::collection::vec(any::<u8>(), 0..80)
                .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        ]
    }

    fn secret_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "(whsec_)?[A-Za-z0-9+/=_ -]{0,100}",
            prop::collection::vec(any::<u8>(), 0..70).prop_map(|b| format!(
                "whsec_{}",
                base64::engine::general_purpose::STANDARD.encode(b)
            )),
        ]
    }

    fn target() -> impl Strategy<Value = pb::PushTarget> {
        (
            text(),
            prop::option::of((any::<i64>(), any::<i32>())),
            prop::collection::hash_map(text(), text(), 0..40),
            prop::collection::vec(secret_text(), 0..4),
            prop::option::of(any::<u32>()),
        )
            .prop_map(|(url, timeout, headers, signing_secrets, max_concurrent)| {
                pb::PushTarget {
                    url,
                    timeout: timeout
                        .map(|(seconds, nanos)| prost_types::Duration { seconds, nanos }),
                    headers,
                    signing_secrets,
                    max_concurrent,
                    updated_at: None,
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Total on any input; what it accepts is stored with its defaults, validates again to
        /// itself, and every secret of it has a key.
        #[test]
        fn validate_is_total(t in target()) {
            match validate(Some(&t)) {
                Ok(v) => {
                    prop_assert!(v.timeout.is_some() && v.max_concurrent.is_some());
                    prop_assert!(v.url.chars().count() <= MAX_URL_CHARS);
                    prop_assert_eq!(validate(Some(&v)).unwrap(), v.clone());
                    for s in &v.signing_secrets {
                        prop_assert!(secret_key(s).is_ok());
                    }
                    let m = mask(&v);
                    prop_assert_eq!(m.signing_secrets.len(), v.signing_secrets.len());
                    prop_assert_eq!(m.headers.len(), v.headers.len());
                    for (k, value) in &v.headers {
                        let masked = &m.headers[k];
                        if value.is_empty() {
                            prop_assert!(masked.is_empty());
                        } else {
                            // Never in clear: the mask, then at most the last 4 characters.
                            prop_assert!(masked.starts_with(MASK), "{}", masked);
                            let shown = masked.trim_start_matches(MASK);
                            prop_assert!(shown.chars().count() <= MASK_TAIL);
                            prop_assert!(value.ends_with(shown));
                            prop_assert!(
                                value.chars().count() >= MASK_MIN_CHARS || shown.is_empty()
                            );
                        }
                    }
                    // The masked form sent back is never stored.
                    let refused = matches!(
                        validate(Some(&m)),
                        Err(Error::InvalidArgument { field, message })
                            if field.starts_with("target.") && message.contains("masked")
                    );
                    prop_assert!(refused);
                }
                Err(Error::InvalidArgument { field, .. }) => {
                    prop_assert!(field.starts_with("target."), "{}", field);
                }
                Err(e) => prop_assert!(false, "not INVALID_ARGUMENT: {e:?}"),
            }
        }

        /// Any URL alone (the rest of the target good).
        #[test]
        fn urls_are_total(url in text()) {
            let t = pb::PushTarget { url, ..good() };
            match validate(Some(&t)) {
                // The stored (normalized) URL is stored as it is when validated again.
                Ok(v) => prop_assert_eq!(validate(Some(&v)).unwrap(), v),
                Err(e) => prop_assert!(matches!(&e, Error::InvalidArgument { field, .. } if field == "target.url"), "{e:?}"),
            }
        }

        /// Any one header alone.
        #[test]
        fn headers_are_total(name in text(), value in text()) {
            let t = pb::PushTarget { headers: HashMap::from([(name, value)]), ..good() };
            if let Err(e) = validate(Some(&t)) {
                prop_assert!(matches!(&e, Error::InvalidArgument { field, .. } if field.starts_with("target.headers[")), "{e:?}");
            }
        }

        #[test]
        fn secret_keys_are_total(s in secret_text()) {
            if let Ok(key) = secret_key(&s) {
                prop_assert!((MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()));
            }
            let _ = mask(&pb::PushTarget { signing_secrets: vec![s], ..good() });
        }

        /// Every key of 24-64 bytes round-trips, with or without prefix and padding.
        #[test]
        fn secret_keys_round_trip(key in prop::collection::vec(any::<u8>(), MIN_SECRET_BYTES..=MAX_SECRET_BYTES)) {
            let b = base64::engine::general_purpose::STANDARD.encode(&key);
            prop_assert_eq!(secret_key(&format!("whsec_{b}")).unwrap(), key.clone());
            prop_assert_eq!(secret_key(b.trim_end_matches('=')).unwrap(), key);
        }
    }
}
