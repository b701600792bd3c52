//! The binary refuses a bad configuration at start, naming the key, before it touches
//! Cassandra.

use std::process::Command;

fn run(env: &[(&str, &str)], args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rebound-server"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run rebound-server");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_configuration_exits_naming_the_key() {
    for (key, value) in [
        ("REBOUND_WINDOW_SECONDS", "7"),
        ("REBOUND_BUCKET_SIZE", "zero"),
        ("REBOUND_LISTEN", "not-an-address"),
        ("REBOUND_LEASE_TTL_MS", "1"),
        ("REBOUND_KEYSPACE", "no-dashes"),
        (
            "REBOUND_TRACE_URL_TEMPLATE",
            "localhost:16686/trace/{trace_id}",
        ),
        (
            "REBOUND_TRACE_URL_TEMPLATE",
            "http://localhost:16686/trace/",
        ),
    ] {
        let (code, stderr) = run(&[(key, value)], &["check-config"]);
        assert_eq!(code, 2, "{key}={value}: {stderr}");
        assert!(stderr.contains(key), "{key}={value}: {stderr}");
    }
}

#[test]
fn bad_toml_key_exits_naming_it() {
    let dir = std::env::temp_dir().join(format!("rebound-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "window_secondz = 5\n").unwrap();
    let (code, stderr) = run(&[], &["--config", file.to_str().unwrap(), "check-config"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("window_secondz"), "{stderr}");
}

#[test]
fn good_configuration_is_printed() {
    let (code, stderr) = run(&[("REBOUND_WINDOW_SECONDS", "5")], &["check-config"]);
    assert_eq!(code, 0, "{stderr}");
}
