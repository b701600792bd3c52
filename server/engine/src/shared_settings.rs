//! The settings every node of a namespace must share (docs/architecture.md, "Settings every
//! node shares"): the window size, the ring's slots and the lanes. The first node to start
//! records them in the store; every later start compares its own with what is recorded and
//! refuses to start on any difference, naming both values. A node with another window size
//! would read windows the others never close, or deliver before invariant 1 allows; another
//! slot count splits the ring elsewhere, so ranges go unread or are read twice.

use std::time::Duration;

use rebound_store::{MigrationStore, StoreError};

/// One shared setting: its name in the store, the variable that sets it, and this node's
/// value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedSetting {
    pub name: &'static str,
    pub variable: &'static str,
    pub value: String,
}

impl SharedSetting {
    pub fn new(name: &'static str, variable: &'static str, value: impl ToString) -> Self {
        Self {
            name,
            variable,
            value: value.to_string(),
        }
    }
}

/// Records `mine` where nothing is recorded yet and checks every one against what is, retrying
/// a store that is unavailable or too slow until `wait` has passed (a start during a Cassandra
/// pause waits, as connecting does). The error names each setting that differs, its variable,
/// and both values.
pub async fn check(
    store: &dyn MigrationStore,
    node_id: &str,
    namespace: &str,
    mine: &[SharedSetting],
    wait: Duration,
) -> Result<(), String> {
    let pairs: Vec<(String, String)> = mine
        .iter()
        .map(|s| (s.name.to_string(), s.value.clone()))
        .collect();
    let deadline = tokio::time::Instant::now() + wait;
    let recorded = loop {
        match store.record_settings(node_id, &pairs).await {
            Ok(r) => break r,
            Err(e @ (StoreError::Unavailable(_) | StoreError::Timeout(_)))
                if tokio::time::Instant::now() < deadline =>
            {
                tracing::warn!(error = %e, "could not record the shared settings yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(format!("recording the shared settings of {namespace}: {e}")),
        }
    };
    compare(namespace, mine, &recorded)
}

/// The differences between this node's settings and the recorded ones, as one message.
pub fn compare(namespace: &str, mine: &[SharedSetting], recorded: &[String]) -> Result<(), String> {
    let differ: Vec<String> = mine
        .iter()
        .zip(recorded)
        .filter(|(s, r)| s.value != **r)
        .map(|(s, r)| {
            format!(
                "{} is {} on this node but {r} in {namespace}, as its first node recorded it",
                s.variable, s.value
            )
        })
        .collect();
    if differ.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}: every node of a namespace must use the same window size, slots and lanes; start this node with the recorded values, or on another keyspace or REBOUND_CLUSTER",
        differ.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_store_embedded::EmbeddedStore;

    fn mine(window: u32, slots: u32, lanes: u32) -> Vec<SharedSetting> {
        vec![
            SharedSetting::new("window_seconds", "REBOUND_WINDOW_SECONDS", window),
            SharedSetting::new("slots", "REBOUND_SLOTS", slots),
            SharedSetting::new("lanes", "REBOUND_LANES", lanes),
        ]
    }

    #[test]
    fn a_difference_names_the_variable_and_both_values() {
        let recorded = ["60".to_string(), "64".to_string(), "8".to_string()];
        assert_eq!(compare("ks", &mine(60, 64, 8), &recorded), Ok(()));
        let e = compare("ks", &mine(30, 64, 4), &recorded).unwrap_err();
        assert!(
            e.starts_with(
                "REBOUND_WINDOW_SECONDS is 30 on this node but 60 in ks, as its first node recorded it; REBOUND_LANES is 4 on this node but 8 in ks"
            ),
            "{e}"
        );
        assert!(!e.contains("REBOUND_SLOTS"), "{e}");
    }

    #[tokio::test]
    async fn the_first_start_records_and_a_later_one_with_other_values_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let clock: rebound_store::clock::SharedClock =
            std::sync::Arc::new(rebound_store::clock::ManualClock::new(1_000_000));
        let store = EmbeddedStore::open(dir.path(), "r", "c", clock).unwrap();
        store.migrate(0).await.unwrap();
        let wait = Duration::from_secs(1);
        check(&store, "n1", "ns", &mine(60, 64, 8), wait)
            .await
            .unwrap();
        check(&store, "n2", "ns", &mine(60, 64, 8), wait)
            .await
            .unwrap();
        let e = check(&store, "n2", "ns", &mine(2, 64, 8), wait)
            .await
            .unwrap_err();
        assert!(
            e.contains("REBOUND_WINDOW_SECONDS is 2 on this node but 60"),
            "{e}"
        );
        // The refused start recorded nothing: the first values stand.
        check(&store, "n1", "ns", &mine(60, 64, 8), wait)
            .await
            .unwrap();
    }
}
