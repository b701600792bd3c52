//! The secrets key file (`REBOUND_SECRETS_KEY_FILE`, docs/configuration.md): the keys that
//! seal push targets' signing secrets and header values in the `services` row
//! (`services::seal`, docs/architecture.md, "Push delivery"). One key a line,
//! `<id> <base64 of 32 bytes>`, `#` comment lines; the first key seals new writes, every key
//! opens.
//!
//! The file is read when the node starts (a bad file stops it, `Config::validate`) and again
//! on SIGHUP (`KeyFile::reload`), like the TLS files: a good file replaces the keys at once
//! (targets stored with them open at the next settings refresh), a bad one keeps the keys as
//! they were and says why.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use rebound_engine::services::seal::{Keyring, Secrets};

/// Reads and parses a key file; the error names the file and the line, never a key.
pub fn read(path: &Path) -> Result<Keyring, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Keyring::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The key file a node was started with, and the engine's keys it fills.
#[derive(Debug)]
pub struct KeyFile {
    path: PathBuf,
    secrets: Arc<Secrets>,
}

impl KeyFile {
    /// Reads `path` into `secrets`.
    pub fn load(path: &Path, secrets: Arc<Secrets>) -> Result<KeyFile, String> {
        secrets.set(Some(read(path)?));
        Ok(KeyFile {
            path: path.to_path_buf(),
            secrets,
        })
    }

    /// Reads the file again and, if it is good, uses its keys from now on; if not, keeps the
    /// keys as they are and says why.
    pub fn reload(&self) -> Result<(), String> {
        let ring = read(&self.path)?;
        tracing::info!(keys = ?ring.ids(), sealing = ring.sealing_id(), "secrets keys reloaded");
        self.secrets.set(Some(ring));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n";
    const K2: &str = "k2 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n";

    #[test]
    fn a_reload_that_fails_keeps_the_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.keys");
        std::fs::write(&path, K1).unwrap();
        let secrets = Arc::new(Secrets::default());
        let file = KeyFile::load(&path, secrets.clone()).unwrap();
        assert_eq!(secrets.keyring().unwrap().ids(), vec!["k1"]);
        // Rotation: a new key first.
        std::fs::write(&path, format!("{K2}{K1}")).unwrap();
        file.reload().unwrap();
        assert_eq!(secrets.keyring().unwrap().ids(), vec!["k2", "k1"]);
        // A bad file: the error names the file and the line; the keys stay.
        std::fs::write(&path, format!("{K2}k3 short\n")).unwrap();
        let e = file.reload().unwrap_err();
        assert!(e.contains("secrets.keys") && e.contains("line 2"), "{e}");
        assert!(!e.contains("ICEiIyQl"), "{e}");
        assert_eq!(secrets.keyring().unwrap().ids(), vec!["k2", "k1"]);
        std::fs::remove_file(&path).unwrap();
        assert!(file.reload().unwrap_err().contains("cannot read"));
        assert_eq!(secrets.keyring().unwrap().ids(), vec!["k2", "k1"]);
    }
}
