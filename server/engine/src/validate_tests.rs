//! Table-driven tests of `validate::enqueue`: each row is one bad field of an otherwise good
//! request, the field the refusal must name and a fragment of its message. These are the
//! context-free rules of the bad-input end-to-end test
//! (integration-tests/tests/enqueue_bad_input.rs), which keeps one of them over gRPC and the
//! rules that need the node's configuration or clock.

use rebound_proto::v1 as pb;

use super::enqueue;

/// The payload cap the rows are checked against (the end-to-end test's node uses the same).
const MAX_PAYLOAD: usize = 1_000;

type Mutation = fn(&mut pb::EnqueueRetryRequest);

struct Row {
    input: &'static str,
    mutate: Mutation,
    field: &'static str,
    fragment: &'static str,
}

const fn row(
    input: &'static str,
    mutate: Mutation,
    field: &'static str,
    fragment: &'static str,
) -> Row {
    Row {
        input,
        mutate,
        field,
        fragment,
    }
}

fn good() -> pb::EnqueueRetryRequest {
    pb::EnqueueRetryRequest {
        service: "svc".into(),
        transaction_id: "tx-bad".into(),
        payload: b"payload".to_vec(),
        schedule: Some(pb::enqueue_retry_request::Schedule::Delay(secs(0))),
        attempt: 1,
        last_error: "503 from downstream".into(),
        ..Default::default()
    }
}

fn secs(s: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: s,
        nanos: 0,
    }
}

fn delay(r: &mut pb::EnqueueRetryRequest, d: prost_types::Duration) {
    r.schedule = Some(pb::enqueue_retry_request::Schedule::Delay(d));
}

fn due(r: &mut pb::EnqueueRetryRequest, seconds: i64, nanos: i32) {
    r.schedule = Some(pb::enqueue_retry_request::Schedule::DueTime(
        prost_types::Timestamp { seconds, nanos },
    ));
}

fn policy(r: &mut pb::EnqueueRetryRequest) -> &mut pb::RetryPolicy {
    r.policy.get_or_insert_with(Default::default)
}

const ROWS: &[Row] = &[
    row(
        "empty service",
        |r| r.service.clear(),
        "service",
        "is required",
    ),
    row(
        "space in service",
        |r| r.service = "my service".into(),
        "service",
        "[A-Za-z0-9._-]",
    ),
    row(
        "unicode service",
        |r| r.service = "sérvice".into(),
        "service",
        "got \"sérvice\"",
    ),
    row(
        "slash in service",
        |r| r.service = "a/b".into(),
        "service",
        "got \"a/b\"",
    ),
    row(
        "service starting with a dash",
        |r| r.service = "-lead".into(),
        "service",
        "starting with a letter or digit",
    ),
    row(
        "long service",
        |r| r.service = "s".repeat(65),
        "service",
        "1-64 characters",
    ),
    row(
        "empty transaction",
        |r| r.transaction_id.clear(),
        "transaction_id",
        "is required",
    ),
    row(
        "long transaction",
        |r| r.transaction_id = "t".repeat(300),
        "transaction_id",
        "at most 256 bytes, got 300",
    ),
    row(
        "control char",
        |r| r.transaction_id = "a\u{0}b".into(),
        "transaction_id",
        "control characters",
    ),
    row(
        "payload over cap",
        |r| r.payload = vec![7; MAX_PAYLOAD + 1],
        "payload",
        "1001 bytes, over the limit of 1000 bytes (REBOUND_MAX_PAYLOAD_BYTES)",
    ),
    row(
        "too many attributes",
        |r| {
            for i in 0..65 {
                r.attributes.insert(format!("k{i}"), "v".into());
            }
        },
        "attributes",
        "has 65 entries, over the limit of 64",
    ),
    row(
        "empty attribute key",
        |r| {
            r.attributes.insert(String::new(), "v".into());
        },
        "attributes",
        "must be 1-128 bytes",
    ),
    row(
        "long attribute value",
        |r| {
            r.attributes.insert("k".into(), "v".repeat(4097));
        },
        "attributes",
        "4097 bytes, over the limit of 4096",
    ),
    row(
        "huge last error",
        |r| r.last_error = "x".repeat(9_000),
        "last_error",
        "9000 bytes, over the limit of 8192 bytes",
    ),
    row(
        "negative delay",
        |r| delay(r, secs(-5)),
        "delay",
        "non-negative duration, got -5s 0ns",
    ),
    row(
        "delay nanos out of range",
        |r| {
            delay(
                r,
                prost_types::Duration {
                    seconds: 1,
                    nanos: 1_000_000_000,
                },
            )
        },
        "delay",
        "non-negative duration",
    ),
    row(
        "negative due-time nanos",
        |r| due(r, 0, -5),
        "due_time",
        "valid timestamp",
    ),
    row(
        "due time after 9999",
        |r| due(r, 253_402_300_800, 0),
        "due_time",
        "9999-12-31",
    ),
    row(
        "zero attempts",
        |r| policy(r).max_attempts = Some(0),
        "policy.max_attempts",
        "at least 1, got 0",
    ),
    row(
        "max attempts with unlimited attempts",
        |r| {
            policy(r).max_attempts = Some(3);
            policy(r).unlimited_attempts = Some(true);
        },
        "policy.max_attempts",
        "must be unset when unlimited_attempts is true, got 3",
    ),
    row(
        "negative backoff",
        |r| policy(r).initial_backoff = Some(secs(-1)),
        "policy.initial_backoff",
        "non-negative",
    ),
    row(
        "negative max backoff",
        |r| policy(r).max_backoff = Some(secs(-1)),
        "policy.max_backoff",
        "non-negative",
    ),
    row(
        "negative max retry duration",
        |r| policy(r).max_retry_duration = Some(secs(-1)),
        "policy.max_retry_duration",
        "non-negative",
    ),
    row(
        "negative ack timeout",
        |r| policy(r).ack_timeout = Some(secs(-1)),
        "policy.ack_timeout",
        "non-negative",
    ),
    row(
        "zero deliveries per attempt",
        |r| policy(r).max_deliveries_per_attempt = Some(0),
        "policy.max_deliveries_per_attempt",
        "at least 1, got 0",
    ),
    row(
        "too many error classes",
        |r| {
            policy(r).non_retryable_error_classes = (0..=crate::policy::MAX_ERROR_CLASSES)
                .map(|i| format!("c{i}"))
                .collect()
        },
        "policy.non_retryable_error_classes",
        "at most 32 classes, got 33",
    ),
    row(
        "space in an error class",
        |r| policy(r).non_retryable_error_classes = vec!["not found".into()],
        "policy.non_retryable_error_classes",
        "got \"not found\"",
    ),
];

/// Runs every row with `prefix` before the field names (as a batch item's are).
fn check(prefix: &str) {
    assert!(
        enqueue(prefix, good(), MAX_PAYLOAD).is_ok(),
        "the base row is good"
    );
    for row in ROWS {
        let mut r = good();
        (row.mutate)(&mut r);
        let err = match enqueue(prefix, r, MAX_PAYLOAD) {
            Err(e) => e,
            Ok(i) => panic!("{}: accepted as {i:?}", row.input),
        };
        assert_eq!(
            err.code(),
            tonic::Code::InvalidArgument,
            "{}: {err:?}",
            row.input
        );
        // The message is "<field>: <what is wrong>".
        let text = err.to_string();
        let field = format!("{prefix}{}", row.field);
        assert!(
            text.starts_with(&format!("{field}: ")),
            "{}: {text:?} does not name {field:?} first",
            row.input
        );
        assert!(
            text.contains(row.fragment),
            "{}: {text:?} lacks {:?}",
            row.input,
            row.fragment
        );
    }
}

#[test]
fn each_bad_field_is_refused_by_name() {
    check("");
}

#[test]
fn a_batch_item_is_refused_by_its_path() {
    check("requests[3].");
}
