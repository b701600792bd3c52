//! Delivery ids and the rest of an ack (Ack, AckBatch, ExtendDeadline): every input is an
//! outcome or an INVALID_ARGUMENT naming the field; every id the node issues is valid.
#![no_main]

use libfuzzer_sys::{
    arbitrary::{self, Arbitrary, Unstructured},
    fuzz_target,
};
use rebound_proto::v1 as pb;
use rebound_engine::{dispatch::hub, error::Error, validate};

fn ack(u: &mut Unstructured<'_>) -> arbitrary::Result<pb::AckRequest> {
    Ok(pb::AckRequest {
        delivery_id: String::arbitrary(u)?,
        outcome: i32::arbitrary(u)?,
        retry_after: Option::<(i64, i32)>::arbitrary(u)?
            .map(|(seconds, nanos)| prost_types::Duration { seconds, nanos }),
        error: String::arbitrary(u)?,
        snooze: bool::arbitrary(u)?,
        error_class: String::arbitrary(u)?,
        hold: None,
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err(e) = validate::delivery_id("delivery_id", &text) {
        assert!(matches!(e, Error::InvalidArgument { ref field, .. } if field == "delivery_id"));
    }
    let mut u = Unstructured::new(data);
    if let Ok((epoch, seq, nonce)) = <(i64, u64, u32)>::arbitrary(&mut u) {
        let id = hub::delivery_id_text(epoch, seq, nonce);
        assert!(validate::delivery_id("delivery_id", &id).is_ok(), "{id}");
    }
    if let Ok(r) = ack(&mut u) {
        let max_delay = std::time::Duration::from_secs(30 * 86_400);
        match validate::ack_outcome(&r, max_delay, "acks[0].") {
            Ok(_) => {}
            Err(Error::InvalidArgument { field, .. }) => assert!(field.starts_with("acks[0].")),
            Err(e) => panic!("not INVALID_ARGUMENT: {e:?}"),
        }
    }
});
