//! The CQL consistency levels a node can be configured with (`REBOUND_CONSISTENCY`,
//! `REBOUND_SERIAL_CONSISTENCY`), by name only: the configuration is checked without the
//! Cassandra store, which maps them to its driver's levels.

/// A consistency level for reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    One,
    Two,
    Three,
    Quorum,
    All,
    LocalQuorum,
    EachQuorum,
    LocalOne,
}

impl Level {
    /// The level `s` names, in any case.
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s.to_ascii_uppercase().as_str() {
            "ONE" => Level::One,
            "TWO" => Level::Two,
            "THREE" => Level::Three,
            "QUORUM" => Level::Quorum,
            "ALL" => Level::All,
            "LOCAL_QUORUM" => Level::LocalQuorum,
            "EACH_QUORUM" => Level::EachQuorum,
            "LOCAL_ONE" => Level::LocalOne,
            _ => return None,
        })
    }

    /// Whether `s` names a level; the error says why not.
    pub fn check(s: &str) -> Result<(), String> {
        Level::parse(s)
            .map(|_| ())
            .ok_or_else(|| format!("unknown consistency level {s:?}"))
    }
}

/// The consistency level of the Paxos phase of lightweight transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Serial {
    Serial,
    LocalSerial,
}

impl Serial {
    pub fn parse(s: &str) -> Option<Serial> {
        match s.to_ascii_uppercase().as_str() {
            "SERIAL" => Some(Serial::Serial),
            "LOCAL_SERIAL" => Some(Serial::LocalSerial),
            _ => None,
        }
    }

    pub fn check(s: &str) -> Result<(), String> {
        Serial::parse(s)
            .map(|_| ())
            .ok_or_else(|| "must be SERIAL or LOCAL_SERIAL".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_in_any_case_and_others_are_refused() {
        assert_eq!(Level::parse("local_quorum"), Some(Level::LocalQuorum));
        assert_eq!(Level::parse("ONE"), Some(Level::One));
        assert!(Level::check("QUORUMS").is_err());
        assert_eq!(Serial::parse("local_serial"), Some(Serial::LocalSerial));
        assert!(Serial::check("QUORUM").is_err());
    }
}
