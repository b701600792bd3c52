//! The soak (see `rebound_tools::chaos::soak`).
//!
//! usage: soak --minutes M | --seconds S [--seed S] [--fault-every SECONDS] [--rate OPS]
//!             [--nodes 3] [--keep] [--out DIR] [--recovery SECONDS] [--drain-timeout SECONDS]
//! Prints the seed first, the summary and each criterion with its figure at the end; exit 1
//! when a criterion fails, 2 on a harness error.

use std::time::Duration;

use rebound_tools::chaos::{self, soak};

const USAGE: &str = "usage: soak --minutes M | --seconds S [--seed S] [--fault-every SECONDS] [--rate OPS] [--nodes 3] [--keep] [--out DIR] [--recovery SECONDS] [--drain-timeout SECONDS]";

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seed: Option<u64> = None;
    let mut secs: Option<f64> = None;
    let mut fault_every = None;
    let mut rate = None;
    let mut nodes = 3usize;
    let mut keep = false;
    let mut out = None;
    let mut recovery = None;
    let mut drain = None;
    let mut i = 0;
    while i < args.len() {
        let val = |i: usize| -> String {
            args.get(i + 1).cloned().unwrap_or_else(|| {
                eprintln!("{USAGE}");
                std::process::exit(2)
            })
        };
        let num = |s: String| -> f64 {
            match s.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => v,
                _ => {
                    eprintln!("not a number: {s}\n{USAGE}");
                    std::process::exit(2)
                }
            }
        };
        match args[i].as_str() {
            "--minutes" => secs = Some(num(val(i)) * 60.0),
            "--seconds" => secs = Some(num(val(i))),
            "--seed" => seed = Some(num(val(i)) as u64),
            "--fault-every" => fault_every = Some(num(val(i))),
            "--rate" => rate = Some(num(val(i))),
            "--nodes" => nodes = num(val(i)) as usize,
            "--out" => out = Some(std::path::PathBuf::from(val(i))),
            "--recovery" => recovery = Some(num(val(i))),
            "--drain-timeout" => drain = Some(num(val(i))),
            "--keep" => {
                keep = true;
                i += 1;
                continue;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return std::process::ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other}\n{USAGE}");
                return std::process::ExitCode::from(2);
            }
        }
        i += 2;
    }
    let Some(secs) = secs else {
        eprintln!("--minutes is required\n{USAGE}");
        return std::process::ExitCode::from(2);
    };
    let seed = seed.unwrap_or_else(|| u64::from(rand::random::<u16>()));
    let mut o = soak::SoakOptions::new(seed, Duration::from_secs_f64(secs.max(30.0)));
    o.base.nodes = nodes.max(1);
    o.base.keep_keyspace = keep;
    o.out_dir = out;
    if let Some(f) = fault_every {
        o.base.fault_every = Duration::from_secs_f64(f);
    }
    if let Some(r) = rate {
        o.rate = r.max(0.1);
    }
    if let Some(r) = recovery {
        o.recovery = Duration::from_secs_f64(r);
    }
    if let Some(d) = drain {
        o.base.drain_timeout = Duration::from_secs_f64(d);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let result = rt.block_on(async move {
        chaos::cluster::install_signal_cleanup();
        let r = soak::run(o).await;
        chaos::cluster::emergency_cleanup_cassandra();
        r
    });
    match result {
        Ok(report) => {
            print!("{}", report.text);
            println!(
                "soak: samples, summary and node logs in {}",
                report.dir.display()
            );
            if report.passed {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(1)
            }
        }
        Err(e) => {
            chaos::cluster::emergency_cleanup();
            eprintln!("soak: harness error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
