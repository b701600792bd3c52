//! Durations, timestamps, days and retry policies from requests: each is a value or an
//! INVALID_ARGUMENT naming the field; a policy that passes gives backoffs without panicking.
#![no_main]

use libfuzzer_sys::{
    arbitrary::{self, Arbitrary, Unstructured},
    fuzz_target,
};
use rebound_proto::v1 as pb;
use rebound_engine::{error::Error, validate};
use rebound_engine::policy::Rules as _;
use rebound_store::policy::RetryPolicy;

fn field(r: Result<impl Sized, Error>, name: &str) {
    match r {
        Ok(_) => {}
        Err(Error::InvalidArgument { field, .. }) => assert!(field.starts_with(name), "{field}"),
        Err(e) => panic!("not INVALID_ARGUMENT: {e:?}"),
    }
}

fn duration(u: &mut Unstructured<'_>) -> arbitrary::Result<prost_types::Duration> {
    let (seconds, nanos) = <(i64, i32)>::arbitrary(u)?;
    Ok(prost_types::Duration { seconds, nanos })
}

fn policy(u: &mut Unstructured<'_>) -> arbitrary::Result<pb::RetryPolicy> {
    let mut d = || -> arbitrary::Result<Option<prost_types::Duration>> {
        Ok(if bool::arbitrary(u)? {
            Some(duration(u)?)
        } else {
            None
        })
    };
    let (initial_backoff, max_backoff, max_retry_duration, ack_timeout) = (d()?, d()?, d()?, d()?);
    Ok(pb::RetryPolicy {
        max_attempts: Arbitrary::arbitrary(u)?,
        unlimited_attempts: Arbitrary::arbitrary(u)?,
        non_retryable_error_classes: Arbitrary::arbitrary(u)?,
        initial_backoff,
        max_backoff,
        multiplier: Arbitrary::arbitrary(u)?,
        jitter: Arbitrary::arbitrary(u)?,
        max_retry_duration,
        ack_timeout,
        max_deliveries_per_attempt: Arbitrary::arbitrary(u)?,
    })
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let d = duration(u)?;
    field(validate::duration("delay", &d), "delay");
    field(validate::extension("extension", Some(&d)), "extension");
    let t = prost_types::Timestamp {
        seconds: d.seconds,
        nanos: d.nanos,
    };
    field(validate::timestamp_ms("due_time", &t), "due_time");
    field(validate::day("day", &String::arbitrary(u)?), "day");
    let p = policy(u)?;
    let (attempts, unit) = <(u32, f64)>::arbitrary(u)?;
    match validate::policy("policy", Some(&p)) {
        Ok(o) => {
            let effective = RetryPolicy::default().apply(&o);
            if effective.validate().is_ok() {
                assert!(effective.backoff(attempts, unit) <= effective.max_backoff);
            }
        }
        Err(e) => field(Err::<(), _>(e), "policy."),
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
