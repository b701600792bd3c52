//! The dashboard API's query strings and JSON bodies, read totally: any bytes give a value or
//! an `Error::InvalidArgument` naming the parameter or field (the body's fields by their
//! path, `policy.multiplier`, `letters[3].dead_at`). Unknown parameters and fields are
//! refused. Times are RFC 3339, durations numbers of seconds (`rebound_proto::json`).
//!
//! A push target's signing secrets and header values never appear in a message here (as in
//! `services::push_target`): a wrong JSON type is named by its kind, a header line by its number.

use std::collections::{BTreeMap, HashMap};

use rebound_proto::{
    json::{self as pj, FieldError, Fields},
    v1 as pb,
};
use serde_json::Value;

use rebound_engine::admin::redrive::{LetterKey, MAX_SELECTED_LETTERS};
use rebound_engine::{error::Error, names::show};

/// The largest request body read.
pub const MAX_BODY_BYTES: usize = 64 << 10;

/// A body field error as the API's error, its field as a path under `prefix`.
fn field(prefix: &str, (f, m): FieldError) -> Error {
    let path = pj::join_field(prefix, &f);
    Error::invalid(if path.is_empty() { "body" } else { &path }, m)
}

/// The value of one `%XX`-escaped query component (`+` is a space); None when an escape is
/// broken or the bytes are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b.get(i + 1..i + 3)?;
                let hi = (hex[0] as char).to_digit(16)?;
                let lo = (hex[1] as char).to_digit(16)?;
                out.push((hi * 16 + lo) as u8);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// A query string's parameters, each at most once and each one of the allowed names.
#[derive(Debug, Default)]
pub struct Query {
    pairs: BTreeMap<String, String>,
}

impl Query {
    pub fn parse(raw: Option<&str>, allowed: &[&str]) -> Result<Query, Error> {
        let mut pairs = BTreeMap::new();
        for part in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            let key = percent_decode(k).ok_or_else(|| {
                Error::invalid(
                    "query",
                    "has a parameter name that is not UTF-8 or badly escaped",
                )
            })?;
            let value = percent_decode(v)
                .ok_or_else(|| Error::invalid(&key, "is not UTF-8 or is badly escaped"))?;
            if !allowed.contains(&key.as_str()) {
                return Err(Error::invalid(
                    &key,
                    format!("is not a known parameter (known: {})", allowed.join(", ")),
                ));
            }
            if pairs.insert(key.clone(), value).is_some() {
                return Err(Error::invalid(&key, "is given more than once"));
            }
        }
        Ok(Query { pairs })
    }

    /// The parameter's value; an empty one reads as absent.
    pub fn str(&self, name: &str) -> Option<&str> {
        self.pairs
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    pub fn time(&self, name: &str) -> Result<Option<prost_types::Timestamp>, Error> {
        self.str(name)
            .map(|v| pj::time_from_text(v).map_err(|m| Error::invalid(name, m)))
            .transpose()
    }

    pub fn u32(&self, name: &str) -> Result<Option<u32>, Error> {
        self.str(name)
            .map(|v| {
                v.parse::<u32>().map_err(|_| {
                    Error::invalid(
                        name,
                        format!("must be a whole number between 0 and 4294967295, got {v:?}"),
                    )
                })
            })
            .transpose()
    }

    /// A JSON object of strings (`{"customer":"42"}`); absent or empty: none.
    pub fn string_map(
        &self,
        name: &str,
    ) -> Result<std::collections::HashMap<String, String>, Error> {
        self.str(name).map_or(Ok(Default::default()), |v| {
            serde_json::from_str(v).map_err(|_| {
                Error::invalid(
                    name,
                    "must be a JSON object of strings, such as {\"customer\":\"42\"}",
                )
            })
        })
    }

    pub fn bool(&self, name: &str) -> Result<bool, Error> {
        match self.str(name) {
            None | Some("false") | Some("0") => Ok(false),
            Some("true") | Some("1") => Ok(true),
            Some(v) => Err(Error::invalid(
                name,
                format!("must be true or false, got {v:?}"),
            )),
        }
    }
}

/// The body as a JSON object (`{}` when there is nothing to send).
pub fn body(bytes: &[u8]) -> Result<Value, Error> {
    if bytes.len() > MAX_BODY_BYTES {
        return Err(too_large());
    }
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        Error::invalid(
            "body",
            format!("is not JSON ({e}); send a JSON object, {{}} when there is nothing to send"),
        )
    })?;
    if !v.is_object() {
        return Err(Error::invalid("body", "must be a JSON object"));
    }
    Ok(v)
}

pub fn too_large() -> Error {
    Error::invalid("body", format!("must be at most {MAX_BODY_BYTES} bytes"))
}

/// `{}`.
pub fn empty(v: &Value) -> Result<(), Error> {
    Fields::new(v, &[]).map(|_| ()).map_err(|e| field("", e))
}

/// `{"policy": {...} or null}`: the policy to store (None: every field to the default).
pub fn policy(v: &Value) -> Result<Option<pb::RetryPolicy>, Error> {
    let f = Fields::new(v, &["policy"]).map_err(|e| field("", e))?;
    f.get("policy")
        .map(|p| pj::policy_from_json(p).map_err(|e| field("policy", e)))
        .transpose()
}

/// `{"limits": {...} or null}`.
pub fn limits(v: &Value) -> Result<Option<pb::ServiceLimits>, Error> {
    let f = Fields::new(v, &["limits"]).map_err(|e| field("", e))?;
    f.get("limits")
        .map(|l| pj::limits_from_json(l).map_err(|e| field("limits", e)))
        .transpose()
}

/// The JSON type of a value, for messages that must not repeat it.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

const PUSH_TARGET_FIELDS: &[&str] = &[
    "url",
    "timeout",
    "headers",
    "signing_secrets",
    "max_concurrent",
];

/// `{"target": {"url", "timeout", "headers", "signing_secrets", "max_concurrent"}}`:
/// SetPushTarget's target, its values checked for their JSON types only (the node validates
/// them, `services::push_target`, naming `target.url` and so on). `timeout` is seconds; `headers` an
/// object of name: value strings or a text of `Name: value` lines ([`header_lines`]);
/// `signing_secrets` an array of strings. None (`{}`, `{"target": null}`): no target, which
/// the node refuses as required.
pub fn push_target(v: &Value) -> Result<Option<pb::PushTarget>, Error> {
    let f = Fields::new(v, &["target"]).map_err(|e| field("", e))?;
    let Some(t) = f.get("target") else {
        return Ok(None);
    };
    let t = Fields::new(t, PUSH_TARGET_FIELDS).map_err(|e| field("target", e))?;
    let headers = match t.get("headers") {
        None => HashMap::new(),
        Some(Value::String(text)) => header_lines("target.headers", text)?,
        Some(Value::Object(map)) => map
            .iter()
            .map(|(name, value)| match value {
                Value::String(s) => Ok((name.clone(), s.clone())),
                other => Err(Error::invalid(
                    format!("target.headers[{}]", show(name)),
                    format!("must be a string, got {}", kind(other)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(Error::invalid(
                "target.headers",
                format!(
                    "must be an object of name: value strings or a text of Name: value lines, \
                     got {}",
                    kind(other)
                ),
            ))
        }
    };
    let signing_secrets = match t.get("signing_secrets") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str().map(str::to_string).ok_or_else(|| {
                    Error::invalid(
                        format!("target.signing_secrets[{i}]"),
                        format!("must be a string, got {}", kind(item)),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(Error::invalid(
                "target.signing_secrets",
                format!(
                    "must be an array of one or two strings (whsec_...), got {}",
                    kind(other)
                ),
            ))
        }
    };
    Ok(Some(pb::PushTarget {
        url: t
            .str("url")
            .map_err(|e| field("target", e))?
            .unwrap_or("")
            .to_string(),
        timeout: t.duration("timeout").map_err(|e| field("target", e))?,
        headers,
        signing_secrets,
        max_concurrent: t.u32("max_concurrent").map_err(|e| field("target", e))?,
        updated_at: None,
    }))
}

/// Headers written one a line as `Name: value` (the page's text area): blank lines are
/// skipped, a line ends at `\n` (a `\r` before it is dropped), the name is what comes before
/// the first colon and the value what follows it, each without surrounding spaces and tabs.
/// Whether names and values are allowed is the node's check (`services::push_target`); here a line
/// without a colon, or a name given twice, is refused, naming the line (never its text: a
/// value may be a token).
pub fn header_lines(field: &str, text: &str) -> Result<HashMap<String, String>, Error> {
    let mut headers = HashMap::new();
    let mut lines: HashMap<String, usize> = HashMap::new();
    for (i, line) in text.split('\n').enumerate() {
        let n = i + 1;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim_matches([' ', '\t']).is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Error::invalid(
                field,
                format!("line {n} has no colon: write one header a line, as Name: value"),
            ));
        };
        let name = name.trim_matches([' ', '\t']);
        if let Some(first) = lines.insert(name.to_string(), n) {
            return Err(Error::invalid(
                format!("{field}[{}]", show(name)),
                format!("is given twice (lines {first} and {n})"),
            ));
        }
        headers.insert(
            name.to_string(),
            value.trim_matches([' ', '\t']).to_string(),
        );
    }
    Ok(headers)
}

/// `{"before": time or null, "max_buckets": n}`.
pub fn purge(service: &str, v: &Value) -> Result<pb::PurgeServiceRequest, Error> {
    let f = Fields::new(v, &["before", "max_buckets"]).map_err(|e| field("", e))?;
    Ok(pb::PurgeServiceRequest {
        service: service.to_string(),
        before: f.time("before").map_err(|e| field("", e))?,
        max_buckets: f.u32("max_buckets").map_err(|e| field("", e))?.unwrap_or(0),
    })
}

/// `{"from", "to"}`.
pub fn purge_dead_letters(service: &str, v: &Value) -> Result<pb::PurgeDeadLettersRequest, Error> {
    let f = Fields::new(v, &["from", "to"]).map_err(|e| field("", e))?;
    Ok(pb::PurgeDeadLettersRequest {
        service: service.to_string(),
        from: f.time("from").map_err(|e| field("", e))?,
        to: f.time("to").map_err(|e| field("", e))?,
    })
}

/// What a redrive body asks for.
#[derive(Debug, PartialEq)]
pub enum Redrive {
    /// RedriveDeadLetters: the letters matching a filter, one call's worth.
    Filter(pb::RedriveDeadLettersRequest),
    /// Exactly these letters.
    Letters {
        letters: Vec<LetterKey>,
        delay: Option<prost_types::Duration>,
        max_per_second: u32,
    },
}

const REDRIVE_FIELDS: &[&str] = &[
    "from",
    "to",
    "error_contains",
    "delay",
    "max_items",
    "max_per_second",
    "letters",
];

/// `{"from", "to", "error_contains", "delay", "max_items", "max_per_second"}` or
/// `{"letters": [{"transaction_id", "dead_at"}], "delay", "max_per_second"}`.
pub fn redrive(service: &str, v: &Value) -> Result<Redrive, Error> {
    let f = Fields::new(v, REDRIVE_FIELDS).map_err(|e| field("", e))?;
    let delay = f.duration("delay").map_err(|e| field("", e))?;
    let max_per_second = f
        .u32("max_per_second")
        .map_err(|e| field("", e))?
        .unwrap_or(0);
    let Some(items) = f.array("letters").map_err(|e| field("", e))? else {
        return Ok(Redrive::Filter(pb::RedriveDeadLettersRequest {
            service: service.to_string(),
            from: f.time("from").map_err(|e| field("", e))?,
            to: f.time("to").map_err(|e| field("", e))?,
            error_contains: f
                .str("error_contains")
                .map_err(|e| field("", e))?
                .unwrap_or("")
                .to_string(),
            delay,
            max_items: f.u32("max_items").map_err(|e| field("", e))?.unwrap_or(0),
            max_per_second,
        }));
    };
    for other in ["from", "to", "error_contains", "max_items"] {
        if f.get(other).is_some() {
            return Err(Error::invalid(
                other,
                "cannot be combined with letters (a filter and a selection are two kinds of redrive)",
            ));
        }
    }
    if items.len() > MAX_SELECTED_LETTERS {
        return Err(Error::invalid(
            "letters",
            format!(
                "must name 1 to {MAX_SELECTED_LETTERS} dead letters, got {}",
                items.len()
            ),
        ));
    }
    let letters = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let at = format!("letters[{i}]");
            let l = Fields::new(item, &["transaction_id", "dead_at"]).map_err(|e| field(&at, e))?;
            Ok(LetterKey {
                transaction_id: l
                    .str("transaction_id")
                    .map_err(|e| field(&at, e))?
                    .unwrap_or("")
                    .to_string(),
                dead_at: l.time("dead_at").map_err(|e| field(&at, e))?,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Redrive::Letters {
        letters,
        delay,
        max_per_second,
    })
}

const ACT_FIELDS: &[&str] = &[
    "action",
    "due_time",
    "transaction_ids",
    "due_after",
    "due_before",
    "attributes",
    "dependency",
    "error_contains",
    "saga_transaction_id",
    "page_token",
    "max_items",
    "max_per_second",
    "reason",
];

/// `{"action": "RUN_NOW" | "RESCHEDULE" | "CANCEL" | "DEAD_LETTER", "due_time",
/// "transaction_ids": [...], "reason", "max_items", "max_per_second"}` with the retries
/// page's filters (`due_after`, `due_before`, `attributes` as an object of strings,
/// `dependency`, `error_contains`, `saga_transaction_id`) and its `page_token`: an
/// ActOnRetries request of `service`'s SCHEDULED retries.
pub fn act(service: &str, v: &Value) -> Result<pb::ActOnRetriesRequest, Error> {
    let f = Fields::new(v, ACT_FIELDS).map_err(|e| field("", e))?;
    let text = |name: &str| -> Result<String, Error> {
        Ok(f.str(name)
            .map_err(|e| field("", e))?
            .unwrap_or("")
            .to_string())
    };
    let name = text("action")?;
    let action =
        pb::RetryAction::from_str_name(&format!("RETRY_ACTION_{}", name.to_ascii_uppercase()))
            .filter(|a| *a != pb::RetryAction::Unspecified)
            .ok_or_else(|| {
                Error::invalid(
                    "action",
                    format!(
                        "must be RUN_NOW, RESCHEDULE, CANCEL or DEAD_LETTER, got {}",
                        show(&name)
                    ),
                )
            })?;
    let attributes = match f.get("attributes") {
        None => HashMap::new(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(Error::invalid(
                    format!("attributes[{}]", show(k)),
                    format!("must be a string, got {}", kind(other)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(Error::invalid(
                "attributes",
                format!("must be an object of strings, got {}", kind(other)),
            ))
        }
    };
    let selection = pb::ListRetriesRequest {
        service: service.to_string(),
        statuses: Vec::new(),
        due_after: f.time("due_after").map_err(|e| field("", e))?,
        due_before: f.time("due_before").map_err(|e| field("", e))?,
        attributes,
        dependency: text("dependency")?,
        error_contains: text("error_contains")?,
        saga_transaction_id: text("saga_transaction_id")?,
        page_size: 0,
        page_token: text("page_token")?,
        local_only: false,
    };
    Ok(pb::ActOnRetriesRequest {
        selection: Some(selection),
        transaction_ids: f.strings("transaction_ids").map_err(|e| field("", e))?,
        action: action as i32,
        due_time: f.time("due_time").map_err(|e| field("", e))?,
        max_items: f.u32("max_items").map_err(|e| field("", e))?.unwrap_or(0),
        max_per_second: f
            .u32("max_per_second")
            .map_err(|e| field("", e))?
            .unwrap_or(0),
        reason: text("reason")?,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn field_of(e: Error) -> String {
        match e {
            Error::InvalidArgument { field, .. } => field,
            e => panic!("not INVALID_ARGUMENT: {e:?}"),
        }
    }

    #[test]
    fn queries_decode_and_refuse_what_they_do_not_know() {
        let q = Query::parse(
            Some("from=2026-11-30T06%3A10%3A00Z&error_contains=a+b%21&page_size=5&x="),
            &["from", "error_contains", "page_size", "x"],
        )
        .unwrap();
        assert_eq!(q.time("from").unwrap().unwrap().seconds, 1_796_019_000);
        assert_eq!(q.str("error_contains"), Some("a b!"));
        assert_eq!(q.u32("page_size").unwrap(), Some(5));
        assert_eq!(q.str("x"), None);
        assert_eq!(
            field_of(Query::parse(Some("nope=1"), &["a"]).unwrap_err()),
            "nope"
        );
        assert_eq!(
            field_of(Query::parse(Some("a=1&a=2"), &["a"]).unwrap_err()),
            "a"
        );
        assert_eq!(
            field_of(Query::parse(Some("a=%ff"), &["a"]).unwrap_err()),
            "a"
        );
        assert_eq!(
            field_of(Query::parse(Some("a=%f"), &["a"]).unwrap_err()),
            "a"
        );
        let q = Query::parse(Some("a=-1&b=maybe"), &["a", "b"]).unwrap();
        assert_eq!(field_of(q.u32("a").unwrap_err()), "a");
        assert_eq!(field_of(q.bool("b").unwrap_err()), "b");
    }

    #[test]
    fn bodies_name_the_field_at_fault() {
        assert_eq!(field_of(body(b"").unwrap_err()), "body");
        assert_eq!(field_of(body(b"[1]").unwrap_err()), "body");
        assert_eq!(
            field_of(body(&vec![b' '; MAX_BODY_BYTES + 1]).unwrap_err()),
            "body"
        );
        assert_eq!(field_of(empty(&json!({"x": 1})).unwrap_err()), "x");
        assert_eq!(
            field_of(policy(&json!({"policy": {"multiplier": "x"}})).unwrap_err()),
            "policy.multiplier"
        );
        assert_eq!(
            field_of(policy(&json!({"policy": 3})).unwrap_err()),
            "policy"
        );
        assert_eq!(policy(&json!({"policy": null})).unwrap(), None);
        assert_eq!(
            field_of(limits(&json!({"limits": {"burst": 1}})).unwrap_err()),
            "limits.burst"
        );
        assert_eq!(
            field_of(purge("s", &json!({"before": "soon"})).unwrap_err()),
            "before"
        );
        let r = redrive(
            "s",
            &json!({"letters": [{"transaction_id": "t", "dead_at": "2026-11-30T06:10:00.250Z"}], "delay": 1.5}),
        )
        .unwrap();
        let Redrive::Letters { letters, delay, .. } = r else {
            panic!("{r:?}")
        };
        assert_eq!(letters[0].transaction_id, "t");
        assert_eq!(letters[0].dead_at.unwrap().nanos, 250_000_000);
        assert_eq!(delay.unwrap().nanos, 500_000_000);
        assert_eq!(
            field_of(redrive("s", &json!({"letters": [{"dead_at": 1}]})).unwrap_err()),
            "letters[0].dead_at"
        );
        assert_eq!(
            field_of(
                redrive("s", &json!({"letters": [], "from": "2026-11-30T06:10:00Z"})).unwrap_err()
            ),
            "from"
        );
        assert!(matches!(
            redrive("s", &json!({"max_items": 10})).unwrap(),
            Redrive::Filter(pb::RedriveDeadLettersRequest { max_items: 10, .. })
        ));
    }

    #[test]
    fn push_targets_read_their_json_types_and_header_lines() {
        let t = push_target(&json!({"target": {
            "url": "https://hooks.example.com/r",
            "timeout": 2.5,
            "headers": "X-Team: payments\r\n\n  Authorization :  Bearer a:b \t\n",
            "signing_secrets": ["whsec_a", "whsec_b"],
            "max_concurrent": 8,
        }}))
        .unwrap()
        .unwrap();
        assert_eq!(t.url, "https://hooks.example.com/r");
        assert_eq!(t.timeout.unwrap().seconds, 2);
        assert_eq!(t.timeout.unwrap().nanos, 500_000_000);
        assert_eq!(
            t.headers,
            HashMap::from([
                ("X-Team".to_string(), "payments".to_string()),
                ("Authorization".to_string(), "Bearer a:b".to_string()),
            ])
        );
        assert_eq!(t.signing_secrets, ["whsec_a", "whsec_b"]);
        assert_eq!(t.max_concurrent, Some(8));
        // Headers as an object, as the answer shows them; the rest left to the node.
        let t = push_target(&json!({"target": {"headers": {"X-A": "1"}}}))
            .unwrap()
            .unwrap();
        assert_eq!(t.headers, HashMap::from([("X-A".into(), "1".into())]));
        assert_eq!(
            (t.url.as_str(), t.timeout, t.max_concurrent),
            ("", None, None)
        );
        assert!(t.signing_secrets.is_empty());
        assert_eq!(push_target(&json!({})).unwrap(), None);
        assert_eq!(push_target(&json!({"target": null})).unwrap(), None);

        let refused = |v: Value| match push_target(&v).unwrap_err() {
            Error::InvalidArgument { field, message } => (field, message),
            e => panic!("not INVALID_ARGUMENT: {e:?}"),
        };
        assert_eq!(refused(json!({"tarjet": {}})).0, "tarjet");
        assert_eq!(refused(json!({"target": 1})).0, "target");
        assert_eq!(
            refused(json!({"target": {"secret": "x"}})).0,
            "target.secret"
        );
        assert_eq!(refused(json!({"target": {"url": 5}})).0, "target.url");
        assert_eq!(
            refused(json!({"target": {"timeout": -1}})).0,
            "target.timeout"
        );
        assert_eq!(
            refused(json!({"target": {"max_concurrent": 1.5}})).0,
            "target.max_concurrent"
        );
        assert_eq!(
            refused(json!({"target": {"headers": [["X-A", "1"]]}})).0,
            "target.headers"
        );
        assert_eq!(
            refused(json!({"target": {"headers": {"X-A": 1}}})).0,
            "target.headers[\"X-A\"]"
        );
        // A secret or a header value given with the wrong type is not repeated.
        let (f, m) = refused(json!({"target": {"signing_secrets": "whsec_SECRETVALUE"}}));
        assert_eq!(f, "target.signing_secrets");
        assert!(
            m.ends_with("got a string") && !m.contains("SECRETVALUE"),
            "{m}"
        );
        let (f, m) = refused(json!({"target": {"signing_secrets": ["whsec_x", 7]}}));
        assert_eq!(f, "target.signing_secrets[1]");
        assert!(m.ends_with("got a number"), "{m}");
        // Header lines: a line without a colon, a name given twice; never the line's text.
        let (f, m) = refused(json!({"target": {"headers": "X-A: 1\nBearer TOKENVALUE"}}));
        assert_eq!(f, "target.headers");
        assert!(
            m.starts_with("line 2 has no colon") && !m.contains("TOKENVALUE"),
            "{m}"
        );
        let (f, m) = refused(json!({"target": {"headers": "X-A: 1\n\nX-A: TOKENVALUE"}}));
        assert_eq!(f, "target.headers[\"X-A\"]");
        assert!(
            m.contains("lines 1 and 3") && !m.contains("TOKENVALUE"),
            "{m}"
        );
        // Names differing in case both reach the node, which refuses the second.
        let t = header_lines("h", "X-A: 1\nx-a: 2").unwrap();
        assert_eq!(t.len(), 2);
        assert!(header_lines("h", "").unwrap().is_empty());
        assert!(header_lines("h", " \r\n\t\n").unwrap().is_empty());
        assert_eq!(
            header_lines("h", ": v").unwrap(),
            HashMap::from([(String::new(), "v".into())])
        );
    }

    mod props {
        use proptest::prelude::*;

        use super::*;

        fn json_like() -> impl Strategy<Value = String> {
            prop_oneof![
                "(?s).{0,80}",
                "\\{(\"(letters|policy|limits|before|max_buckets|from|to|delay|max_per_second|transaction_id|dead_at|multiplier|target|url|timeout|headers|signing_secrets|max_concurrent)\": ?(null|-?[0-9.e]{1,8}|\"[^\"]{0,12}\"|\\[\\{?\\}?\\]|\\{\\}|true),?){0,4}\\}",
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn queries_are_total(raw in "(?s).{0,60}", pct in "([a-z_]{1,6}=(%[0-9a-fA-F]{0,2}|[+a-z0-9:-]){0,8}&?){0,4}") {
                let allowed = ["from", "to", "error_contains", "page_size", "page_token", "include_redriven", "service"];
                for s in [raw.as_str(), pct.as_str()] {
                    if let Ok(q) = Query::parse(Some(s), &allowed) {
                        for name in allowed {
                            let _ = q.time(name);
                            let _ = q.u32(name);
                            let _ = q.bool(name);
                            let _ = q.string_map(name);
                        }
                    }
                }
            }

            #[test]
            fn bodies_are_total(text in json_like()) {
                if let Ok(v) = body(text.as_bytes()) {
                    let _ = empty(&v);
                    let _ = policy(&v);
                    let _ = limits(&v);
                    let _ = purge("s", &v);
                    let _ = purge_dead_letters("s", &v);
                    let _ = redrive("s", &v);
                    let _ = act("s", &v);
                    let _ = push_target(&v);
                    if let Some(t) = v.get("target") {
                        let _ = push_target(&serde_json::json!({"target": t.clone()}));
                    }
                }
            }

            #[test]
            fn bodies_of_bytes_are_total(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
                if let Ok(v) = body(&bytes) {
                    let _ = redrive("s", &v);
                    let _ = act("s", &v);
                    let _ = policy(&v);
                    let _ = push_target(&v);
                }
            }

            /// Push target bodies of every shape: an answer, INVALID_ARGUMENT naming a field
            /// under `target` (or the body's own), never a panic.
            #[test]
            fn push_target_bodies_are_total(target in push_json()) {
                let v = serde_json::json!({"target": target});
                match push_target(&v) {
                    Ok(Some(_)) => {}
                    Ok(None) => prop_assert!(v["target"].is_null()),
                    Err(Error::InvalidArgument { field, .. }) => {
                        prop_assert!(field == "target" || field.starts_with("target."), "{}", field);
                    }
                    Err(e) => prop_assert!(false, "not INVALID_ARGUMENT: {e:?}"),
                }
            }

            /// Any text: headers, or INVALID_ARGUMENT naming the field or one header.
            #[test]
            fn header_lines_are_total(text in header_text()) {
                match header_lines("target.headers", &text) {
                    Ok(headers) => {
                        for (name, value) in &headers {
                            prop_assert!(!name.contains(':') && !name.contains('\n'), "{:?}", name);
                            prop_assert!(!value.contains('\n'), "{:?}", value);
                            prop_assert_eq!(name.trim_matches([' ', '\t']), name.as_str());
                            prop_assert_eq!(value.trim_matches([' ', '\t']), value.as_str());
                        }
                        let lines = text.split('\n').filter(|l| l.contains(':')).count();
                        prop_assert_eq!(headers.len(), lines);
                    }
                    Err(Error::InvalidArgument { field, .. }) => {
                        prop_assert!(field.starts_with("target.headers"), "{}", field);
                    }
                    Err(e) => prop_assert!(false, "not INVALID_ARGUMENT: {e:?}"),
                }
            }

            /// Headers written as lines read back as themselves, in any order, with any
            /// spacing and line ends.
            #[test]
            fn header_lines_round_trip(
                headers in prop::collection::btree_map("[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}", "[!-~]([ -~]{0,20}[!-~])?", 0..8),
                pad in "[ \t]{0,2}",
                crlf in any::<bool>(),
            ) {
                let end = if crlf { "\r\n" } else { "\n" };
                let text: String = headers
                    .iter()
                    .map(|(k, v)| format!("{pad}{k}{pad}:{pad}{v}{pad}{end}"))
                    .collect();
                let got = header_lines("h", &text).unwrap();
                let want: HashMap<String, String> = headers.into_iter().collect();
                prop_assert_eq!(got, want);
            }
        }

        fn header_text() -> impl Strategy<Value = String> {
            prop_oneof![
                "(?s).{0,80}",
                "([ \t]{0,2}[A-Za-z:-]{0,8}[ \t]{0,2}:?[ \t]{0,2}[ -~]{0,8}\r?\n?){0,6}",
                prop::collection::vec(any::<u8>(), 0..80)
                    .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            ]
        }

        /// JSON values shaped like a push target, and anything else.
        fn push_json() -> impl Strategy<Value = Value> {
            let scalar = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<f64>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                "(?s).{0,30}".prop_map(Value::from),
                header_text().prop_map(Value::from),
            ];
            let any_json = scalar.clone().prop_recursive(2, 12, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                    prop::collection::btree_map("[A-Za-z-]{0,6}", inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            });
            let field = prop_oneof![
                Just("url"),
                Just("timeout"),
                Just("headers"),
                Just("signing_secrets"),
                Just("max_concurrent"),
                Just("other"),
            ];
            prop_oneof![
                any_json.clone(),
                prop::collection::btree_map(field, any_json, 0..6).prop_map(|m| {
                    Value::Object(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        }
    }
}
