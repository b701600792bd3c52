//! Node configuration from the environment and the TOML file: any values give a
//! configuration or a `ConfigError` naming the key, never a panic. (`Config::from_sources`
//! reads no file, so a fuzzed `credentials_file` path is never opened.)
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::{
    arbitrary::{self, Arbitrary, Unstructured},
    fuzz_target,
};
use rebound_server::config::{Config, Overrides, ENV_KEYS};

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let mut env = HashMap::new();
    for _ in 0..u.int_in_range(0..=6)? {
        let key = *u.choose(ENV_KEYS)?;
        env.insert(key.to_string(), String::arbitrary(u)?);
    }
    let file: Option<String> = Arbitrary::arbitrary(u)?;
    let flags = Overrides {
        listen: Arbitrary::arbitrary(u)?,
        keyspace: Arbitrary::arbitrary(u)?,
        node_id: Arbitrary::arbitrary(u)?,
        contact_points: Arbitrary::arbitrary(u)?,
    };
    if let Err(e) = Config::from_sources(file.as_deref(), &env, &flags) {
        assert!(!e.key.is_empty());
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
