//! The credentials file (`REBOUND_CREDENTIALS_FILE`) and the `authorization` metadata: any
//! text is credentials or an error message, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rebound_server::auth::{bearer_token, Auth};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(auth) = Auth::parse(&text) {
        assert!(auth.is_on());
    }
    if let Some(t) = bearer_token(&text) {
        assert!(!t.is_empty());
    }
});
