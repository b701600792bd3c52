//! What the CLI tests share: running the `rebound` binary against a node and reading its
//! output.

#![allow(dead_code)]

use std::{process::Stdio, time::Duration};

use chrono::{DateTime, Utc};
use rebound_integration_tests::TestNode;
use serde_json::Value;

/// One run of the binary.
#[derive(Debug)]
pub struct Run {
    pub args: Vec<String>,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts exit code 0 and returns the run.
    pub fn ok(self) -> Self {
        assert_eq!(self.code, 0, "rebound {}: {self:#?}", self.args.join(" "));
        self
    }

    /// Asserts the exit code and returns the run.
    pub fn exits(self, code: i32) -> Self {
        assert_eq!(
            self.code,
            code,
            "rebound {}: {self:#?}",
            self.args.join(" ")
        );
        self
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {self:#?}"))
    }
}

/// Runs `rebound --addr ADDR ARGS...` with a one-minute limit.
pub async fn rebound(addr: &str, args: &[&str]) -> Run {
    let mut all = vec!["--addr".to_string(), addr.to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_rebound"));
    cmd.args(&all)
        .env_remove("REBOUND_ADDR")
        .env_remove("REBOUND_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("rebound {all:?} did not finish within 60 s"))
        .expect("the rebound binary runs");
    Run {
        args: all,
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The node's address as people type it: `host:port`, no scheme.
pub fn addr(n: &TestNode) -> String {
    n.node.as_ref().expect("running").local_addr().to_string()
}

pub fn time(v: &Value) -> DateTime<Utc> {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("{v} is not a time string"));
    DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("{s:?} is not RFC 3339: {e}"))
        .with_timezone(&Utc)
}

/// The entry of `service` in a `services --json` document.
pub fn service_entry(doc: &Value, service: &str) -> Value {
    doc["services"]
        .as_array()
        .expect("a services array")
        .iter()
        .find(|s| s["service"] == service)
        .unwrap_or_else(|| panic!("{service} not listed: {doc:#}"))
        .clone()
}

pub async fn status_of(a: &str, service: &str, txid: &str) -> String {
    let doc = rebound(a, &["--json", "get", service, txid])
        .await
        .ok()
        .json();
    doc["status"].as_str().expect("a status").to_string()
}
