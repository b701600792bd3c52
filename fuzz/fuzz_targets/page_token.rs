//! `ListDeadLetters.page_token`: any text is a cursor or a `page_token` error, and whatever
//! decodes encodes back to the same cursor.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rebound_engine::admin::Cursor;
use rebound_engine::error::Error;

fn check(token: &str) {
    match Cursor::decode(token) {
        Ok(c) => assert_eq!(Cursor::decode(&c.encode()).unwrap(), c),
        Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "page_token"),
        Err(e) => panic!("not INVALID_ARGUMENT: {e:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    check(&text);
    // The fuzzer rarely finds the prefix by itself.
    check(&format!("v1.{text}"));
    check(&format!("v1.0.0.{text}"));
});
