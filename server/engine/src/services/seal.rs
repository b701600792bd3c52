//! Sealing a push target's secrets at rest (docs/architecture.md, "Push delivery"): the signing
//! secrets and the header values of a `PushTarget` are stored sealed with AES-256-GCM when the
//! node has keys (`REBOUND_SECRETS_KEY_FILE`), in clear as given when it has none.
//!
//! - **Keys.** A `Keyring` is parsed from the key file's text (`Keyring::parse`): one key a
//!   line, `<id> <base64 of 32 bytes>`, blank lines and `#` comments ignored. The first key
//!   seals every new value; every key opens. `Secrets` holds the node's current keyring and is
//!   swapped whole when the file is read again (SIGHUP); the node reads the file, the engine
//!   never does.
//! - **A sealed value** is text in place of the clear one, in the same protobuf field:
//!   `SEALED_PREFIX`, the key id, `:`, then the standard base64 of the random 12-byte nonce, the
//!   ciphertext and the 16-byte tag. The prefix starts with a NUL character, which no clear
//!   value can hold (a secret is base64, a header value visible ASCII), so a stored value is
//!   either clear or sealed, never both. The store sees only the encoded target: it learns
//!   nothing of keys.
//! - **Bound to its place.** The associated data is the service name and the field
//!   (`signing_secrets[0]`, `headers[X-Api-Key]`): a sealed value copied to another service or
//!   field does not open.
//! - **Clear values still read.** A value stored in clear (before the node had keys) is read as
//!   it is; the next SetPushTarget seals it.
//! - **A value the node cannot open** (its key is not in the file, or it was altered) makes the
//!   whole target unusable (`Unopened`): the error names the key id and
//!   `REBOUND_SECRETS_KEY_FILE`, and no request is sent with the target (`push::pusher`
//!   postpones the service's deliveries instead).
//!
//! Every function here is total: any stored text opens, is read as clear, or is refused, and
//! no message repeats a secret or a key.

use std::sync::{Arc, RwLock};

use aws_lc_rs::aead::{Aad, Nonce, RandomizedNonceKey, AES_256_GCM, NONCE_LEN};
use base64::Engine as _;
use rebound_proto::v1 as pb;

use crate::error::Error;

/// What a sealed value starts with. The NUL keeps it apart from every clear value.
pub const SEALED_PREFIX: &str = "\0rebound-sealed:v1:";
/// The setting that names the key file, as messages name it.
pub const KEY_FILE_SETTING: &str = "REBOUND_SECRETS_KEY_FILE";
/// Bytes of one key, after base64 decoding (AES-256).
pub const KEY_BYTES: usize = 32;
/// Characters of a key id: 1 to this many of `[A-Za-z0-9._-]`.
pub const MAX_KEY_ID_CHARS: usize = 64;
/// Keys in one file.
pub const MAX_KEYS: usize = 64;
const TAG_BYTES: usize = 16;
/// The domain of the associated data, so that no other use of the keys can open these values.
const AAD_DOMAIN: &[u8] = b"rebound push target v1\0";

/// The keys of the key file, in file order: the first seals, every one opens.
pub struct Keyring {
    keys: Vec<(String, RandomizedNonceKey)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring").field("ids", &self.ids()).finish()
    }
}

fn base64_engine() -> base64::engine::GeneralPurpose {
    base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    )
}

fn is_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.chars().count() <= MAX_KEY_ID_CHARS
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

impl Keyring {
    /// Parses a key file: one key a line, `<id> <base64 of 32 random bytes>` (padding
    /// optional), `#` starting a comment line, blank lines ignored; at least one key, at most
    /// `MAX_KEYS`, ids unique. The error names the line and never repeats a key.
    pub fn parse(text: &str) -> Result<Keyring, String> {
        let mut keys: Vec<(String, RandomizedNonceKey)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = i + 1;
            let words: Vec<&str> = line.split_whitespace().collect();
            let [id, key] = words.as_slice() else {
                return Err(format!(
                    "line {at}: must be a key id and its key, separated by a space \
                     (`<id> <base64 of {KEY_BYTES} bytes>`), got {} words",
                    words.len()
                ));
            };
            if !is_key_id(id) {
                return Err(format!(
                    "line {at}: the key id must be 1-{MAX_KEY_ID_CHARS} characters of \
                     [A-Za-z0-9._-]"
                ));
            }
            if keys.iter().any(|(k, _)| k == id) {
                return Err(format!("line {at}: key id {id:?} is given twice"));
            }
            let bytes = base64_engine().decode(key).map_err(|_| {
                format!("line {at}: the key of {id:?} must be standard base64 (openssl rand -base64 {KEY_BYTES})")
            })?;
            if bytes.len() != KEY_BYTES {
                return Err(format!(
                    "line {at}: the key of {id:?} must decode to {KEY_BYTES} bytes, got {}",
                    bytes.len()
                ));
            }
            if keys.len() == MAX_KEYS {
                return Err(format!("line {at}: at most {MAX_KEYS} keys"));
            }
            let k = RandomizedNonceKey::new(&AES_256_GCM, &bytes)
                .map_err(|_| format!("line {at}: the key of {id:?} is not an AES-256 key"))?;
            keys.push((id.to_string(), k));
        }
        if keys.is_empty() {
            return Err(format!(
                "holds no key: add a line `<id> <base64 of {KEY_BYTES} bytes>`, e.g. \
                 printf 'k1 %s\\n' \"$(openssl rand -base64 {KEY_BYTES})\""
            ));
        }
        Ok(Keyring { keys })
    }

    /// The key ids, in file order.
    pub fn ids(&self) -> Vec<&str> {
        self.keys.iter().map(|(id, _)| id.as_str()).collect()
    }

    /// The id of the key that seals new values.
    pub fn sealing_id(&self) -> &str {
        &self.keys[0].0
    }

    fn key(&self, id: &str) -> Option<&RandomizedNonceKey> {
        self.keys.iter().find(|(k, _)| k == id).map(|(_, k)| k)
    }
}

/// The node's current keyring (None: no key file, values are stored in clear), swapped whole
/// when the key file is read again.
#[derive(Debug, Default)]
pub struct Secrets {
    ring: RwLock<Option<Arc<Keyring>>>,
}

impl Secrets {
    /// Uses `ring` from now on (a write seals with its first key, a read opens with any).
    pub fn set(&self, ring: Option<Keyring>) {
        *self.ring.write().expect("secrets lock") = ring.map(Arc::new);
    }

    pub fn keyring(&self) -> Option<Arc<Keyring>> {
        self.ring.read().expect("secrets lock").clone()
    }
}

/// Why a stored value does not open; the target holding it is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unopened {
    /// Sealed with a key the node does not hold.
    MissingKey {
        field: String,
        id: String,
        /// The ids the node holds (empty: no key file).
        loaded: Vec<String>,
    },
    /// Sealed with a key the node holds, but it does not open: altered, or copied from
    /// another service or field.
    Refused { field: String, id: String },
    /// Starts as a sealed value but is not one.
    Malformed { field: String },
}

impl std::fmt::Display for Unopened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unopened::MissingKey { field, id, loaded } if loaded.is_empty() => write!(
                f,
                "{field} is sealed with key {id:?}, but no {KEY_FILE_SETTING} is set: set it to \
                 a file holding that key and restart, or set the target again"
            ),
            Unopened::MissingKey { field, id, loaded } => write!(
                f,
                "{field} is sealed with key {id:?}, which {KEY_FILE_SETTING} does not hold \
                 (it holds {loaded:?}): add the key back to the file and send SIGHUP, or set \
                 the target again"
            ),
            Unopened::Refused { field, id } => write!(
                f,
                "{field} is sealed with key {id:?} of {KEY_FILE_SETTING} but does not open \
                 with it (altered, or copied from another service or field): set the target \
                 again"
            ),
            Unopened::Malformed { field } => write!(
                f,
                "{field} holds a sealed value that does not parse: set the target again"
            ),
        }
    }
}

/// The associated data of one value: the domain, the service and the field, NUL-separated
/// (neither a service name nor a field holds a NUL).
fn aad(service: &str, field: &str) -> Vec<u8> {
    let mut a = Vec::with_capacity(AAD_DOMAIN.len() + service.len() + field.len() + 1);
    a.extend_from_slice(AAD_DOMAIN);
    a.extend_from_slice(service.as_bytes());
    a.push(0);
    a.extend_from_slice(field.as_bytes());
    a
}

/// Whether a stored value is sealed (else it is clear).
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(SEALED_PREFIX)
}

/// `clear` as stored: sealed with the first key of `ring` for `field` of `service`, or clear
/// when there is no keyring.
pub fn seal(
    ring: Option<&Keyring>,
    service: &str,
    field: &str,
    clear: &str,
) -> Result<String, Error> {
    let Some(ring) = ring else {
        return Ok(clear.to_string());
    };
    let (id, key) = &ring.keys[0];
    let mut data = clear.as_bytes().to_vec();
    let nonce = key
        .seal_in_place_append_tag(Aad::from(aad(service, field)), &mut data)
        .map_err(|_| Error::Internal(format!("sealing {field} with key {id:?} failed")))?;
    let mut out = nonce.as_ref().to_vec();
    out.extend_from_slice(&data);
    Ok(format!(
        "{SEALED_PREFIX}{id}:{}",
        base64::engine::general_purpose::STANDARD.encode(out)
    ))
}

/// A stored value as it was given: opened with the key it names when it is sealed, as it is
/// when it is clear.
pub fn open(
    ring: Option<&Keyring>,
    service: &str,
    field: &str,
    stored: &str,
) -> Result<String, Unopened> {
    let Some(rest) = stored.strip_prefix(SEALED_PREFIX) else {
        return Ok(stored.to_string());
    };
    let malformed = || Unopened::Malformed {
        field: field.to_string(),
    };
    let (id, sealed) = rest.split_once(':').ok_or_else(malformed)?;
    if !is_key_id(id) {
        return Err(malformed());
    }
    let bytes = base64_engine().decode(sealed).map_err(|_| malformed())?;
    if bytes.len() < NONCE_LEN + TAG_BYTES {
        return Err(malformed());
    }
    let Some(key) = ring.and_then(|r| r.key(id)) else {
        return Err(Unopened::MissingKey {
            field: field.to_string(),
            id: id.to_string(),
            loaded: ring
                .map(|r| r.ids().into_iter().map(String::from).collect())
                .unwrap_or_default(),
        });
    };
    let refused = || Unopened::Refused {
        field: field.to_string(),
        id: id.to_string(),
    };
    let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| malformed())?;
    let mut data = ciphertext.to_vec();
    let clear = key
        .open_in_place(nonce, Aad::from(aad(service, field)), &mut data)
        .map_err(|_| refused())?;
    String::from_utf8(clear.to_vec()).map_err(|_| refused())
}

fn secret_field(i: usize) -> String {
    format!("signing_secrets[{i}]")
}

fn header_field(name: &str) -> String {
    format!("headers[{name}]")
}

/// A validated target as stored: its signing secrets and header values sealed for `service`
/// with the first key of `ring` (as they are without a keyring); the rest unchanged.
pub fn seal_target(
    ring: Option<&Keyring>,
    service: &str,
    t: &pb::PushTarget,
) -> Result<pb::PushTarget, Error> {
    let signing_secrets = t
        .signing_secrets
        .iter()
        .enumerate()
        .map(|(i, s)| seal(ring, service, &secret_field(i), s))
        .collect::<Result<_, _>>()?;
    let headers = t
        .headers
        .iter()
        .map(|(k, v)| Ok((k.clone(), seal(ring, service, &header_field(k), v)?)))
        .collect::<Result<_, Error>>()?;
    Ok(pb::PushTarget {
        signing_secrets,
        headers,
        ..t.clone()
    })
}

/// A stored target as it was given: every sealed value opened (clear ones as they are), or
/// why one does not open, the first in field order (secrets, then headers by name).
pub fn open_target(
    ring: Option<&Keyring>,
    service: &str,
    stored: &pb::PushTarget,
) -> Result<pb::PushTarget, Unopened> {
    let signing_secrets = stored
        .signing_secrets
        .iter()
        .enumerate()
        .map(|(i, s)| open(ring, service, &secret_field(i), s))
        .collect::<Result<_, _>>()?;
    let mut names: Vec<&String> = stored.headers.keys().collect();
    names.sort();
    let mut headers = std::collections::HashMap::with_capacity(names.len());
    for k in names {
        let v = open(ring, service, &header_field(k), &stored.headers[k])?;
        headers.insert(k.clone(), v);
    }
    Ok(pb::PushTarget {
        signing_secrets,
        headers,
        ..stored.clone()
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    const K1: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "k2 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn ring(text: &str) -> Keyring {
        Keyring::parse(text).unwrap()
    }

    fn target() -> pb::PushTarget {
        pb::PushTarget {
            url: "https://hooks.example.com/in".into(),
            headers: HashMap::from([
                ("X-Api-Key".to_string(), "key-of-the-receiver".to_string()),
                ("X-Team".to_string(), "payments".to_string()),
            ]),
            signing_secrets: vec![SECRET.into(), format!("whsec_{}", "B".repeat(32))],
            max_concurrent: Some(3),
            ..Default::default()
        }
    }

    #[test]
    fn a_sealed_value_opens_to_itself_and_holds_nothing_of_it() {
        let r = ring(K1);
        let sealed = seal(Some(&r), "orders", "signing_secrets[0]", SECRET).unwrap();
        assert!(is_sealed(&sealed));
        assert!(
            sealed.starts_with(&format!("{SEALED_PREFIX}k1:")),
            "{sealed:?}"
        );
        assert!(!sealed.contains("MfKQ9r8G"), "{sealed:?}");
        assert_eq!(
            open(Some(&r), "orders", "signing_secrets[0]", &sealed).unwrap(),
            SECRET
        );
        // Random nonces: the same value seals differently each time.
        let again = seal(Some(&r), "orders", "signing_secrets[0]", SECRET).unwrap();
        assert_ne!(sealed, again);
        // The empty value too.
        let empty = seal(Some(&r), "orders", "headers[X-A]", "").unwrap();
        assert_eq!(
            open(Some(&r), "orders", "headers[X-A]", &empty).unwrap(),
            ""
        );
    }

    #[test]
    fn without_keys_values_are_stored_and_read_in_clear() {
        assert_eq!(
            seal(None, "orders", "signing_secrets[0]", SECRET).unwrap(),
            SECRET
        );
        assert_eq!(
            open(None, "orders", "signing_secrets[0]", SECRET).unwrap(),
            SECRET
        );
        // A clear value stored before the node had keys still reads with keys.
        let r = ring(K1);
        assert_eq!(
            open(Some(&r), "orders", "signing_secrets[0]", SECRET).unwrap(),
            SECRET
        );
        let t = target();
        assert_eq!(seal_target(None, "orders", &t).unwrap(), t);
        assert_eq!(open_target(Some(&r), "orders", &t).unwrap(), t);
    }

    #[test]
    fn a_value_moved_to_another_service_or_field_does_not_open() {
        let r = ring(K1);
        let sealed = seal(Some(&r), "orders", "signing_secrets[0]", SECRET).unwrap();
        let refused = |service: &str, field: &str| {
            assert_eq!(
                open(Some(&r), service, field, &sealed),
                Err(Unopened::Refused {
                    field: field.into(),
                    id: "k1".into()
                }),
                "{service} {field}"
            );
        };
        refused("billing", "signing_secrets[0]");
        refused("orders", "signing_secrets[1]");
        refused("orders", "headers[X-Api-Key]");
        // A header's value bound to its name.
        let h = seal(Some(&r), "orders", "headers[X-Api-Key]", "v").unwrap();
        assert!(open(Some(&r), "orders", "headers[X-Other]", &h).is_err());
        // Within a whole target: swapping the two secrets makes it unusable.
        let mut stored = seal_target(Some(&r), "orders", &target()).unwrap();
        stored.signing_secrets.swap(0, 1);
        let e = open_target(Some(&r), "orders", &stored).unwrap_err();
        assert!(
            matches!(&e, Unopened::Refused { field, .. } if field == "signing_secrets[0]"),
            "{e:?}"
        );
        let stored = seal_target(Some(&r), "orders", &target()).unwrap();
        assert!(open_target(Some(&r), "billing", &stored).is_err());
    }

    #[test]
    fn a_tampered_value_does_not_open() {
        let r = ring(K1);
        let sealed = seal(Some(&r), "orders", "headers[X-Api-Key]", "secret-value").unwrap();
        let body = sealed.rsplit(':').next().unwrap();
        let mut bytes = base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap();
        for i in [0, NONCE_LEN, bytes.len() - 1] {
            bytes[i] ^= 1;
            let altered = format!(
                "{SEALED_PREFIX}k1:{}",
                base64::engine::general_purpose::STANDARD.encode(&bytes)
            );
            assert!(
                matches!(
                    open(Some(&r), "orders", "headers[X-Api-Key]", &altered),
                    Err(Unopened::Refused { .. })
                ),
                "byte {i}"
            );
            bytes[i] ^= 1;
        }
        // Cut short, or not base64.
        for bad in [
            format!("{SEALED_PREFIX}k1:"),
            format!("{SEALED_PREFIX}k1:AAAA"),
            format!("{SEALED_PREFIX}k1:not base64!"),
            format!("{SEALED_PREFIX}k1"),
            format!("{SEALED_PREFIX}bad id:{body}"),
        ] {
            assert!(
                matches!(
                    open(Some(&r), "orders", "headers[X-Api-Key]", &bad),
                    Err(Unopened::Malformed { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn rotation_seals_with_the_first_key_and_opens_with_every_key() {
        let old = ring(K1);
        let t = target();
        let sealed_old = seal_target(Some(&old), "orders", &t).unwrap();
        // A new key first in the file: old values still open, new writes use the new key.
        let rotated = ring(&format!("# rotated\n{K2}\n{K1}\n"));
        assert_eq!(rotated.sealing_id(), "k2");
        assert_eq!(
            open_target(Some(&rotated), "orders", &sealed_old).unwrap(),
            t
        );
        let sealed_new = seal_target(Some(&rotated), "orders", &t).unwrap();
        for s in sealed_new
            .signing_secrets
            .iter()
            .chain(sealed_new.headers.values())
        {
            assert!(s.starts_with(&format!("{SEALED_PREFIX}k2:")), "{s:?}");
        }
        assert_eq!(
            open_target(Some(&rotated), "orders", &sealed_new).unwrap(),
            t
        );
        // Once the old key is removed, what it sealed no longer opens, and the error names
        // the key and the setting.
        let only_new = ring(K2);
        assert_eq!(
            open_target(Some(&only_new), "orders", &sealed_new).unwrap(),
            t
        );
        let e = open_target(Some(&only_new), "orders", &sealed_old).unwrap_err();
        assert_eq!(
            e,
            Unopened::MissingKey {
                field: "signing_secrets[0]".into(),
                id: "k1".into(),
                loaded: vec!["k2".into()]
            }
        );
        let m = e.to_string();
        assert!(
            m.contains("\"k1\"") && m.contains(KEY_FILE_SETTING) && m.contains("[\"k2\"]"),
            "{m}"
        );
        assert!(!m.contains("MfKQ9r8G"), "{m}");
        // No key file at all.
        let m = open_target(None, "orders", &sealed_old)
            .unwrap_err()
            .to_string();
        assert!(
            m.contains("\"k1\"") && m.contains(&format!("no {KEY_FILE_SETTING} is set")),
            "{m}"
        );
    }

    #[test]
    fn the_current_keys_are_swapped_whole() {
        let s = Secrets::default();
        assert!(s.keyring().is_none());
        s.set(Some(ring(K1)));
        assert_eq!(s.keyring().unwrap().ids(), vec!["k1"]);
        s.set(Some(ring(&format!("{K2}\n{K1}"))));
        assert_eq!(s.keyring().unwrap().ids(), vec!["k2", "k1"]);
        s.set(None);
        assert!(s.keyring().is_none());
    }

    #[test]
    fn key_files_are_checked_line_by_line() {
        let r = ring(&format!("# keys\n\n  {K1}  \n\t# old\n{K2}\n"));
        assert_eq!(r.ids(), vec!["k1", "k2"]);
        assert_eq!(
            ring("a.b_c-1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8").ids(),
            vec!["a.b_c-1"],
            "padding is optional"
        );
        let refused = |text: &str, want: &str| {
            let e = Keyring::parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
            // Never the key itself.
            assert!(!e.contains("AAECAwQF"), "{e}");
        };
        refused("", "holds no key");
        refused("# only a comment\n", "openssl rand -base64 32");
        refused("k1\n", "line 1: must be a key id and its key");
        refused(&format!("{K1} extra"), "got 3 words");
        refused(
            "k/1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            "line 1: the key id",
        );
        refused(
            &format!("{K1}\n{K1}"),
            "line 2: key id \"k1\" is given twice",
        );
        refused("k1 AAECAwQF!!", "standard base64");
        refused("k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==", "got 31");
        let long = format!(
            "{} AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            "i".repeat(65)
        );
        refused(&long, "the key id must be 1-64");
        let many: String = (0..=MAX_KEYS)
            .map(|i| format!("k{i} AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"))
            .collect();
        refused(&many, "at most 64 keys");
    }

    #[test]
    fn a_keyring_shows_its_ids_only() {
        let shown = format!("{:?}", ring(K1));
        assert_eq!(shown, "Keyring { ids: [\"k1\"] }");
    }

    fn stored_text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[ -~]{0,40}".prop_map(|s| format!("{SEALED_PREFIX}{s}")),
            ("[a-z0-9._:-]{0,10}", "[A-Za-z0-9+/=]{0,80}")
                .prop_map(|(id, b)| format!("{SEALED_PREFIX}{id}:{b}")),
            prop::collection::vec(any::<u8>(), 0..80).prop_map(|b| format!(
                "{SEALED_PREFIX}k1:{}",
                base64::engine::general_purpose::STANDARD.encode(b)
            )),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Opening any stored text never panics: it opens, reads as clear, or is refused.
        #[test]
        fn opening_any_stored_text_is_total(s in stored_text(), field in "[ -~]{0,20}") {
            let r = ring(&format!("{K1}\n{K2}"));
            for ring in [None, Some(&r)] {
                match open(ring, "orders", &field, &s) {
                    Ok(clear) => prop_assert!(is_sealed(&s) || clear == s),
                    Err(e) => {
                        prop_assert!(is_sealed(&s));
                        prop_assert!(!e.to_string().is_empty());
                    }
                }
            }
        }

        /// Every value round-trips, under every field.
        #[test]
        fn every_value_round_trips(v in any::<String>(), field in "[ -~]{0,20}", service in "[a-z]{1,10}") {
            let r = ring(K1);
            let sealed = seal(Some(&r), &service, &field, &v).unwrap();
            prop_assert!(is_sealed(&sealed));
            prop_assert_eq!(open(Some(&r), &service, &field, &sealed).unwrap(), v);
        }

        /// Any key file text parses or is refused, and never echoes a key.
        #[test]
        fn key_files_are_total(text in prop_oneof![
            any::<String>(),
            prop::collection::vec("(#.*|[a-z0-9]{0,6} [A-Za-z0-9+/=]{0,50}| *)", 0..5)
                .prop_map(|l| l.join("\n")),
        ]) {
            let _ = Keyring::parse(&text);
        }
    }
}
