//! The TLS settings' checks (which files come together) and the listeners' TLS files.

use super::{bad, Config, ConfigError};

impl Config {
    /// TLS files come in pairs, and the CAs only with what they verify. Their contents are
    /// read when the node starts (`tls`).
    pub(super) fn check_tls(&self) -> Result<(), ConfigError> {
        both_or_neither(
            (
                "REBOUND_TLS_CERT_FILE",
                self.tls_cert_file.is_some(),
                Some("the certificate chain, PEM"),
            ),
            (
                "REBOUND_TLS_KEY_FILE",
                self.tls_key_file.is_some(),
                Some("the certificate's private key, PEM"),
            ),
        )?;
        if self.tls_cert_file.is_none() {
            for (key, set) in [
                (
                    "REBOUND_TLS_CLIENT_CA_FILE",
                    self.tls_client_ca_file.is_some(),
                ),
                ("REBOUND_TLS_PEER_CA_FILE", self.tls_peer_ca_file.is_some()),
            ] {
                if set {
                    return Err(bad(
                        key,
                        "needs TLS on: set REBOUND_TLS_CERT_FILE and REBOUND_TLS_KEY_FILE too",
                    ));
                }
            }
        }
        both_or_neither(
            (
                "REBOUND_CASSANDRA_TLS_CERT_FILE",
                self.cassandra_tls_cert_file.is_some(),
                None,
            ),
            (
                "REBOUND_CASSANDRA_TLS_KEY_FILE",
                self.cassandra_tls_key_file.is_some(),
                None,
            ),
        )?;
        if self.cassandra_tls_cert_file.is_some() && self.cassandra_tls_ca_file.is_none() {
            return Err(bad(
                "REBOUND_CASSANDRA_TLS_CA_FILE",
                "is required with a Cassandra client certificate (the CA of Cassandra's nodes)",
            ));
        }
        Ok(())
    }

    /// The listeners' TLS files (None: TLS off).
    pub fn tls_files(&self) -> Option<crate::tls::TlsFiles> {
        Some(crate::tls::TlsFiles {
            cert: self.tls_cert_file.clone()?,
            key: self.tls_key_file.clone()?,
            client_ca: self.tls_client_ca_file.clone(),
            peer_ca: self.tls_peer_ca_file.clone(),
        })
    }
}

/// One file of a pair: its key, whether it is set, and what it holds (for the message).
type PairFile<'a> = (&'a str, bool, Option<&'a str>);

/// Two files that only work together (a certificate and its key): each is required with the
/// other. The error names the missing one.
fn both_or_neither(a: PairFile, b: PairFile) -> Result<(), ConfigError> {
    let missing = |(key, _, what): PairFile, with: &str| {
        let what = what.map(|w| format!(" ({w})")).unwrap_or_default();
        Err(bad(key, format!("is required with {with}{what}")))
    };
    match (a.1, b.1) {
        (true, false) => missing(b, a.0),
        (false, true) => missing(a, b.0),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use crate::config::{Config, Overrides};

    fn check(pairs: &[(&str, &str)]) -> Result<(), (String, String)> {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_sources(None, &env, &Overrides::default())
            .map(|_| ())
            .map_err(|e| (e.key, e.message))
    }

    #[test]
    fn tls_files_come_in_pairs() {
        let err = |k: &str, m: &str| Err((k.to_string(), m.to_string()));
        assert_eq!(
            check(&[("REBOUND_TLS_CERT_FILE", "c.pem")]),
            err(
                "REBOUND_TLS_KEY_FILE",
                "is required with REBOUND_TLS_CERT_FILE (the certificate's private key, PEM)"
            )
        );
        assert_eq!(
            check(&[("REBOUND_TLS_KEY_FILE", "k.pem")]),
            err(
                "REBOUND_TLS_CERT_FILE",
                "is required with REBOUND_TLS_KEY_FILE (the certificate chain, PEM)"
            )
        );
        assert_eq!(
            check(&[
                ("REBOUND_TLS_CERT_FILE", "c"),
                ("REBOUND_TLS_KEY_FILE", "k")
            ]),
            Ok(())
        );
        assert_eq!(
            check(&[("REBOUND_TLS_PEER_CA_FILE", "ca")]),
            err(
                "REBOUND_TLS_PEER_CA_FILE",
                "needs TLS on: set REBOUND_TLS_CERT_FILE and REBOUND_TLS_KEY_FILE too"
            )
        );
        assert_eq!(
            check(&[("REBOUND_CASSANDRA_TLS_CERT_FILE", "c")]),
            err(
                "REBOUND_CASSANDRA_TLS_KEY_FILE",
                "is required with REBOUND_CASSANDRA_TLS_CERT_FILE"
            )
        );
        assert_eq!(
            check(&[("REBOUND_CASSANDRA_TLS_KEY_FILE", "k")]),
            err(
                "REBOUND_CASSANDRA_TLS_CERT_FILE",
                "is required with REBOUND_CASSANDRA_TLS_KEY_FILE"
            )
        );
        let both = [
            ("REBOUND_CASSANDRA_TLS_CERT_FILE", "c"),
            ("REBOUND_CASSANDRA_TLS_KEY_FILE", "k"),
        ];
        assert_eq!(
            check(&both),
            err(
                "REBOUND_CASSANDRA_TLS_CA_FILE",
                "is required with a Cassandra client certificate (the CA of Cassandra's nodes)"
            )
        );
        let all = [both[0], both[1], ("REBOUND_CASSANDRA_TLS_CA_FILE", "ca")];
        assert_eq!(check(&all), Ok(()));
    }
}
