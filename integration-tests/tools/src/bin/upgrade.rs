//! The upgrade check of `scripts/upgrade-check`: proves with the previous release's binary
//! that the current build takes over what it wrote.
//!
//! - A, the drain after an upgrade ([`drain`]): an old node takes 2,000 retries with no
//!   executor and is SIGKILLed; a new node with the same node id drains the keyspace. Each
//!   must be delivered exactly once and end SUCCEEDED, and the directory must end empty.
//! - B, the rolling upgrade ([`rolling`]): an old and a new node take enqueues in turn while
//!   executors ack on both; halfway the old one is SIGTERMed and, after `--down-seconds`
//!   (6: past the 2 s lease TTL, so that its slots move to the other node and back), started
//!   again as the new build. Nothing may be lost; duplicates are printed (a failure past two
//!   per id).
//!
//! Neither depends on the due time a build answers (the old build answers the end of the
//! window after the current one, the new one the time asked for).
//!
//! usage: upgrade --old-bin PATH [--new-bin PATH] [--old-rev R] [--new-rev R] [--items 2000]
//!                [--down-seconds 6] [--only a|b] [--seed S] [--keep]
//! `--new-bin` defaults to `REBOUND_SERVER_BIN` or the rebound-server beside this binary;
//! the revs only label the output. Exit 0: every scenario passed; 1: one failed (a loss, or
//! as its module says); 2: harness error.

#[path = "upgrade/common.rs"]
mod common;
#[path = "upgrade/drain.rs"]
mod drain;
#[path = "upgrade/rolling.rs"]
mod rolling;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use rebound_tools::chaos::{cluster, directory, history};

use common::{Build, Ctx, Verdict};

const USAGE: &str = "usage: upgrade --old-bin PATH [--new-bin PATH] [--old-rev R] [--new-rev R] [--items N] [--down-seconds S] [--only a|b] [--seed S] [--keep]";

/// The command line.
struct Args {
    old: Build,
    new: Build,
    items: usize,
    /// How long scenario B leaves n0 down between the old build and the new.
    down: Duration,
    only: Option<char>,
    seed: u64,
    keep: bool,
}

fn parse() -> Result<Args, String> {
    let mut old_bin = None;
    let mut new_bin = None;
    let mut old_rev = "unknown".to_string();
    let mut new_rev = "unknown".to_string();
    let mut items = 2_000;
    let mut down = Duration::from_secs(6);
    let mut only = None;
    let mut seed = u64::from(rand::random::<u16>());
    let mut keep = false;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let k = args[i].as_str();
        match k {
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--keep" => {
                keep = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        let v = args.get(i + 1).ok_or(format!("{k} needs a value"))?.clone();
        let num = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| format!("{k}: not a number: {s}"))
        };
        match k {
            "--old-bin" => old_bin = Some(PathBuf::from(v)),
            "--new-bin" => new_bin = Some(PathBuf::from(v)),
            "--old-rev" => old_rev = v,
            "--new-rev" => new_rev = v,
            "--items" => items = num(&v)?.max(1) as usize,
            "--seed" => seed = num(&v)?,
            "--down-seconds" => {
                down = v
                    .parse::<f64>()
                    .ok()
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .ok_or(format!("{k}: not a number of seconds: {v}"))?
            }
            "--only" => match v.to_ascii_lowercase().as_str() {
                "a" => only = Some('a'),
                "b" => only = Some('b'),
                _ => return Err("--only must be a or b".into()),
            },
            _ => return Err(format!("unknown argument {k}")),
        }
        i += 2;
    }
    let old_bin = old_bin.ok_or("--old-bin is required")?;
    let new_bin = match new_bin {
        Some(b) => b,
        None => cluster::server_bin().map_err(|e| e.to_string())?,
    };
    for b in [&old_bin, &new_bin] {
        if !b.is_file() {
            return Err(format!("no binary at {}", b.display()));
        }
    }
    Ok(Args {
        old: Build {
            bin: old_bin,
            rev: old_rev,
        },
        new: Build {
            bin: new_bin,
            rev: new_rev,
        },
        items,
        down,
        only,
        seed,
        keep,
    })
}

fn main() -> std::process::ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("upgrade: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let result = rt.block_on(async move {
        cluster::install_signal_cleanup();
        run(args).await
    });
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            cluster::emergency_cleanup();
            eprintln!("upgrade: harness error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Runs the scenarios asked for and prints the summary. True when every one passed.
async fn run(a: Args) -> anyhow::Result<bool> {
    let started = Instant::now();
    let ctx = Ctx {
        contact_point: rebound_integration_tests::contact_point(),
        log_dir: std::env::temp_dir().join(format!("rebound-upgrade-{}", std::process::id())),
        old: a.old,
        new: a.new,
        keep: a.keep,
        seed: a.seed,
    };
    std::fs::create_dir_all(&ctx.log_dir)?;
    let cql = directory::session(&ctx.contact_point).await?;
    let (offset, err) = directory::clock_offset(&cql).await?;
    history::set_offset_ms(offset);
    println!(
        "upgrade: old build {} ({}), new build {} ({}); seed {}; node logs in {}; Cassandra's clock - ours = {offset} ms (± {err})",
        ctx.old.rev,
        ctx.old.bin.display(),
        ctx.new.rev,
        ctx.new.bin.display(),
        ctx.seed,
        ctx.log_dir.display()
    );
    let mut verdicts: Vec<Verdict> = Vec::new();
    if a.only != Some('b') {
        verdicts.push(drain::run(&ctx, a.items).await?);
    }
    if a.only != Some('a') {
        verdicts.push(rolling::run(&ctx, a.down).await?);
    }
    println!(
        "== upgrade check summary (old {} -> new {}, seed {})",
        ctx.old.rev, ctx.new.rev, ctx.seed
    );
    for v in &verdicts {
        let result = if v.failures.is_empty() {
            "PASS"
        } else {
            "FAIL"
        };
        println!("{}: {}: {result}", v.name, v.counts);
        for f in &v.failures {
            println!("  {f}");
        }
    }
    println!("run: {:.0} s", started.elapsed().as_secs_f64());
    Ok(verdicts.iter().all(|v| v.failures.is_empty()))
}
