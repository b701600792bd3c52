//! Names and ids from requests (service, transaction id, executor id, error class, attribute
//! keys) and a whole EnqueueRetry request: each is accepted or refused by field name.
#![no_main]

use libfuzzer_sys::{
    arbitrary::{self, Arbitrary, Unstructured},
    fuzz_target,
};
use rebound_proto::v1 as pb;
use rebound_engine::{error::Error, validate};

fn field(r: Result<impl Sized, Error>, name: &str) {
    match r {
        Ok(_) => {}
        Err(Error::InvalidArgument { field, .. }) => assert!(field.starts_with(name), "{field}"),
        Err(e) => panic!("not INVALID_ARGUMENT: {e:?}"),
    }
}

fn run(data: &[u8]) -> arbitrary::Result<()> {
    let text = String::from_utf8_lossy(data);
    field(validate::service("service", &text), "service");
    field(
        validate::transaction_id("transaction_id", &text),
        "transaction_id",
    );
    field(validate::executor_id("executor_id", &text), "executor_id");
    let _ = rebound_engine::policy::error_class_ok(&text);
    let mut u = Unstructured::new(data);
    let r = pb::EnqueueRetryRequest {
        service: String::arbitrary(&mut u)?,
        transaction_id: String::arbitrary(&mut u)?,
        attributes: Arbitrary::arbitrary(&mut u)?,
        last_error: String::arbitrary(&mut u)?,
        payload: Arbitrary::arbitrary(&mut u)?,
        attempt: u32::arbitrary(&mut u)?,
        ..Default::default()
    };
    field(validate::enqueue("requests[3].", r, 64), "requests[3].");
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
