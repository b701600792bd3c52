//! The secrets key file (`REBOUND_SECRETS_KEY_FILE`) and the sealed values of a stored push
//! target: any text is keys or an error message, and any stored value opens, reads as clear
//! or is refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rebound_engine::services::seal::{open, Keyring, SEALED_PREFIX};

const KEY: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(ring) = Keyring::parse(&text) {
        assert!(!ring.ids().is_empty());
    }
    let ring = Keyring::parse(KEY).expect("a good key");
    for stored in [text.to_string(), format!("{SEALED_PREFIX}{text}")] {
        for r in [None, Some(&ring)] {
            if let Err(e) = open(r, "orders", "signing_secrets[0]", &stored) {
                assert!(!e.to_string().is_empty());
            }
        }
    }
});
