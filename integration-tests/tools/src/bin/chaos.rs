//! The chaos history checker (see `rebound_tools::chaos`).
//!
//! usage: chaos [--seed S] [--minutes M | --seconds S] [--ops N] [--nodes 3] [--keep]
//!              [--fault-every SECONDS] [--drain-timeout SECONDS] [--max-skew-ms MS] [--no-push]
//! Prints the seed first, the summary at the end; exit 1 on any violation, 2 on a harness error.

use std::time::Duration;

use rebound_tools::chaos;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seed: Option<u64> = None;
    let mut secs = 60.0f64;
    let mut ops = None;
    let mut nodes = 3usize;
    let mut keep = false;
    let mut push = true;
    let mut fault_every = None;
    let mut drain = None;
    let mut max_skew = None;
    let mut i = 0;
    let usage = "usage: chaos [--seed S] [--minutes M | --seconds S] [--ops N] [--nodes 3] [--keep] [--fault-every S] [--drain-timeout S] [--max-skew-ms MS] [--no-push]";
    while i < args.len() {
        let val = |i: usize| -> String {
            args.get(i + 1).cloned().unwrap_or_else(|| {
                eprintln!("{usage}");
                std::process::exit(2)
            })
        };
        let num = |s: String| -> f64 {
            s.parse().unwrap_or_else(|_| {
                eprintln!("not a number: {s}\n{usage}");
                std::process::exit(2)
            })
        };
        match args[i].as_str() {
            "--seed" => seed = Some(num(val(i)) as u64),
            "--minutes" => secs = num(val(i)) * 60.0,
            "--seconds" => secs = num(val(i)),
            "--ops" => ops = Some(num(val(i)) as usize),
            "--nodes" => nodes = num(val(i)) as usize,
            "--fault-every" => fault_every = Some(num(val(i))),
            "--drain-timeout" => drain = Some(num(val(i))),
            "--max-skew-ms" => max_skew = Some(num(val(i)) as i64),
            "--inspect" => {
                // Leftover pointers of a kept keyspace, with their state rows.
                let ks = val(i);
                let rt = tokio::runtime::Runtime::new().expect("runtime");
                rt.block_on(async move {
                    let cql =
                        chaos::directory::session(&rebound_integration_tests::contact_point())
                            .await
                            .expect("cassandra");
                    for (s, t, what) in chaos::directory::leftover_pointers(&cql, &ks).await {
                        println!("{s}/{t}: {what}");
                    }
                    match chaos::directory::read(&cql, &ks).await {
                        Ok(t) => println!("{t:#?}"),
                        Err(e) => println!("cannot read the directory: {e}"),
                    }
                    let lw = cql
                        .query_unpaged(format!("SELECT JSON * FROM {ks}.window_low_water"), ())
                        .await
                        .ok()
                        .and_then(|r| r.into_rows_result().ok())
                        .map(|r| {
                            r.rows::<(String,)>()
                                .map(|it| {
                                    it.filter_map(Result::ok).map(|x| x.0).collect::<Vec<_>>()
                                })
                                .unwrap_or_default()
                        });
                    println!("window_low_water: {lw:?}");
                });
                return std::process::ExitCode::SUCCESS;
            }
            "--no-push" => {
                push = false;
                i += 1;
                continue;
            }
            "--keep" => {
                keep = true;
                i += 1;
                continue;
            }
            "-h" | "--help" => {
                println!("{usage}");
                return std::process::ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other}\n{usage}");
                return std::process::ExitCode::from(2);
            }
        }
        i += 2;
    }
    let seed = seed.unwrap_or_else(|| u64::from(rand::random::<u16>()));
    let mut o = chaos::Options::new(seed, Duration::from_secs_f64(secs.max(10.0)));
    o.ops = ops;
    o.nodes = nodes.max(1);
    o.keep_keyspace = keep;
    o.push = push;
    if let Some(m) = max_skew {
        o.max_skew_ms = m;
    }
    if let Some(f) = fault_every {
        o.fault_every = Duration::from_secs_f64(f.max(1.0));
    }
    if let Some(d) = drain {
        o.drain_timeout = Duration::from_secs_f64(d);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let result = rt.block_on(async move {
        chaos::cluster::install_signal_cleanup();
        let r = chaos::run(o).await;
        chaos::cluster::emergency_cleanup_cassandra();
        r
    });
    match result {
        Ok(report) => {
            print!("{}", report.text);
            if report.violations == 0 {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(1)
            }
        }
        Err(e) => {
            chaos::cluster::emergency_cleanup();
            eprintln!("chaos: harness error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
