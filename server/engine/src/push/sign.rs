//! The Standard Webhooks signature of one push request (docs/architecture.md, "Push
//! delivery"): the receiver checks `webhook-signature` against the HMAC-SHA256 of
//! `{webhook-id}.{webhook-timestamp}.{body}` under the target's secret. During a rotation the
//! target has two secrets and the header carries one `v1,<signature>` entry for each, so a
//! receiver that knows either accepts the request.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The message id: unique per delivery, the same on every try of it (receivers dedupe on it).
pub const ID_HEADER: &str = "webhook-id";
/// When the request was signed: integer seconds since the epoch, in decimal.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// Space-separated `v1,<base64 signature>` entries, one per secret.
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// The `webhook-signature` value for `body` sent as `msg_id` at `timestamp_s`: one
/// `v1,<signature>` entry per key, in the order of `keys`, separated by a space. The signature
/// is the standard base64 (with padding) of HMAC-SHA256(key, `{msg_id}.{timestamp_s}.{body}`).
///
/// `keys` are raw key bytes (already base64-decoded from `whsec_...`).
pub fn signature(keys: &[Vec<u8>], msg_id: &str, timestamp_s: i64, body: &[u8]) -> String {
    let prefix = format!("{msg_id}.{timestamp_s}.");
    let entries: Vec<String> = keys
        .iter()
        .map(|key| {
            let mut mac = hmac_sha256(key);
            mac.update(prefix.as_bytes());
            mac.update(body);
            let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
            format!("v1,{sig}")
        })
        .collect();
    entries.join(" ")
}

/// HMAC takes a key of any length (a longer one is hashed first), so this cannot fail.
fn hmac_sha256(key: &[u8]) -> Hmac<Sha256> {
    match <Hmac<Sha256> as Mac>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whsec(s: &str) -> Vec<u8> {
        let b64 = s.strip_prefix("whsec_").expect("whsec_ prefix");
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("base64 secret")
    }

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const MSG_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const EXPECTED: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn standard_webhooks_reference_vector() {
        assert_eq!(
            signature(&[whsec(SECRET)], MSG_ID, TIMESTAMP, BODY),
            EXPECTED
        );
    }

    #[test]
    fn two_keys_give_two_entries_in_order() {
        let other = b"another secret of some length".to_vec();
        let sig = signature(&[whsec(SECRET), other.clone()], MSG_ID, TIMESTAMP, BODY);
        let entries: Vec<&str> = sig.split(' ').collect();
        assert_eq!(entries.len(), 2, "{sig}");
        assert_eq!(entries[0], EXPECTED);
        assert_eq!(entries[1], signature(&[other], MSG_ID, TIMESTAMP, BODY));
        assert_ne!(entries[0], entries[1]);
    }

    #[test]
    fn every_part_of_the_signed_content_counts() {
        let keys = [whsec(SECRET)];
        for other in [
            signature(&keys, "msg_other", TIMESTAMP, BODY),
            signature(&keys, MSG_ID, TIMESTAMP + 1, BODY),
            signature(&keys, MSG_ID, TIMESTAMP, br#"{"test": 2432232315}"#),
            signature(&[b"other key".to_vec()], MSG_ID, TIMESTAMP, BODY),
        ] {
            assert_ne!(other, EXPECTED);
            assert!(other.starts_with("v1,"), "{other}");
        }
    }

    #[test]
    fn no_keys_no_entries() {
        assert_eq!(signature(&[], MSG_ID, TIMESTAMP, BODY), "");
    }
}
