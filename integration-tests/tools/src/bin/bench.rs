//! The Rust half of `scripts/bench` (issue 6): Rebound through its gRPC API, and two
//! baselines straight on Cassandra with the same driver: raw inserts of Rebound's pointer row
//! (the ceiling of the write path) and the naive single-table queue that Rebound's layout
//! avoids. Each writes one JSON result in the shape `bench/report.py` reads.
//!
//! usage:
//!   bench rebound --addr http://127.0.0.1:50090 --pid PID --keyspace KS --n N --out F
//!       [--steady-rate R (500)] [--steady-seconds S (30)] [--lead-ms L (3000)]
//!   bench rebound-steady --addr ... --pid PID --window-seconds W (60) --skew-margin-ms M
//!       (2000) --out F   (the steady phase alone, on a node at those settings)
//!   bench rebound-push --addr ... --pid PID --metrics M --n N [--items I (N + min(N, 20000))]
//!       [--max-concurrent C (500)] --out F   (push drain to a receiver in this process; the
//!       node needs REBOUND_PUSH_ALLOW=127.0.0.1)
//!   bench raw --n N [--singles S (min(N, 20000))] --out F
//!   bench naive --n N --out F
//!   bench costs --cassandra-pid PID --n N --out F   (Cassandra CPU per state-row operation)
//!   bench ring --addrs A,B --metrics M,N --slots S --n N --out F   (per-node ring and scan cost)
//! common: --concurrency C (32) --cassandra HOST:PORT (127.0.0.1:9042)

use std::collections::HashMap;

use anyhow::{bail, Context};

#[path = "bench/cassandra.rs"]
mod cassandra;
#[path = "bench/common.rs"]
mod common;
#[path = "bench/costs.rs"]
mod costs;
#[path = "bench/otlp.rs"]
mod otlp;
#[path = "bench/push.rs"]
mod push;
#[path = "bench/rebound.rs"]
mod rebound;
#[path = "bench/ring.rs"]
mod ring;

use cassandra::{naive, raw, session};
use common::*;
use costs::{costs, quiesce, Meter};
use otlp::otlp_sink;
use push::rebound_push;
use rebound::{rebound, rebound_steady};

pub(crate) struct Args {
    map: HashMap<String, String>,
}

impl Args {
    pub(crate) fn get<T: std::str::FromStr>(&self, k: &str, default: T) -> anyhow::Result<T> {
        match self.map.get(k) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| anyhow::anyhow!("--{k}: cannot parse {v:?}")),
        }
    }
    pub(crate) fn text(&self, k: &str, default: &str) -> String {
        self.map.get(k).cloned().unwrap_or_else(|| default.into())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = argv.first().cloned() else {
        bail!("usage: bench rebound|rebound-push|raw|naive [--key value]...");
    };
    let mut map = HashMap::new();
    let mut it = argv.into_iter().skip(1);
    while let Some(k) = it.next() {
        let Some(k) = k.strip_prefix("--") else {
            bail!("expected --key value, got {k:?}");
        };
        let v = it.next().with_context(|| format!("--{k} needs a value"))?;
        map.insert(k.to_string(), v);
    }
    let a = Args { map };
    let out = a.text("out", &format!("target/bench/{cmd}.json"));
    let result = match cmd.as_str() {
        "rebound" => rebound(&a).await?,
        "rebound-steady" => rebound_steady(&a).await?,
        "rebound-push" => rebound_push(&a).await?,
        "otlp-sink" => return otlp_sink(&a).await,
        "raw" => raw(&a).await?,
        "costs" => costs(&a).await?,
        "ring" => ring::ring(&a).await?,
        "naive" => naive(&a).await?,
        "cleanup" => {
            // Drops the keyspaces earlier runs left behind (`--prefix`, default "bench_").
            let s = session(&a).await?;
            let prefix = a.text("prefix", "bench_");
            let rows = s
                .query_unpaged("SELECT keyspace_name FROM system_schema.keyspaces", ())
                .await?
                .into_rows_result()?;
            let names: Vec<String> = rows
                .rows::<(String,)>()?
                .filter_map(|r| r.ok().map(|r| r.0))
                .filter(|k| k.starts_with(&prefix))
                .collect();
            for k in &names {
                s.query_unpaged(format!("DROP KEYSPACE IF EXISTS {k}"), ())
                    .await?;
            }
            eprintln!("dropped {} keyspaces", names.len());
            return Ok(());
        }
        other => bail!("unknown benchmark {other:?}"),
    };
    let text = result.render();
    if let Some(dir) = std::path::Path::new(&out).parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, format!("{text}\n")).with_context(|| format!("writing {out}"))?;
    println!("{text}");
    Ok(())
}
