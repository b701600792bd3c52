//! `rebound-server`: runs a Rebound node (`serve`, the default), a zero-dependency node on
//! the embedded store (`dev`), or applies the schema (`migrate`). Configuration: defaults,
//! `--config` TOML, `REBOUND_*` environment, flags.

use std::{path::PathBuf, process::ExitCode, sync::Arc};

use clap::{Parser, Subcommand};
use rebound_server::{
    config::{Config, Overrides, StoreKind},
    node::{run_migrations, Node},
    telemetry,
};
use rebound_store::clock::{SharedClock, SkewedClock, SystemClock};

/// mimalloc instead of glibc's malloc: under load the node spent about a third of its CPU in
/// glibc's allocator (malloc, free, consolidation), measured with perf during a drain.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Transparent huge pages off for this process, before anything else allocates (and mimalloc
/// built with `no_thp`, so that it does not ask for them): a 2 MiB page counts whole in the
/// resident set however little of it is used. Measured with `bench rebound` at 20,000 items
/// against the build before (2026-12-04, two runs each): idle 25 MB instead of 46-52 MB, 50-51
/// MB after the enqueue phases instead of 78-91, a peak of 68-81 MB instead of 89-94, and 14-15
/// µs of node CPU per batch-enqueued item instead of 21-32 (single enqueues and the drain
/// unchanged within the runs' spread). When the kernel refuses, the node runs as before.
fn without_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

#[derive(Parser, Debug)]
#[command(
    name = "rebound-server",
    version,
    about = "Rebound node: retry-as-a-service over Apache Cassandra (or, for one node, an embedded store)"
)]
struct Cli {
    /// TOML configuration file (keys are the REBOUND_* names, lower case, without the prefix).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// gRPC listen address (overrides REBOUND_LISTEN).
    #[arg(long, global = true)]
    listen: Option<String>,
    /// Keyspace (overrides REBOUND_KEYSPACE).
    #[arg(long, global = true)]
    keyspace: Option<String>,
    /// Node id (overrides REBOUND_NODE_ID).
    #[arg(long, global = true)]
    node_id: Option<String>,
    /// Comma-separated Cassandra host:port list (overrides REBOUND_CASSANDRA_CONTACT_POINTS).
    #[arg(long, global = true)]
    contact_points: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the node (the default).
    Serve,
    /// Run a single node with no database to install: the embedded store (in a temporary
    /// directory, deleted on exit, unless --data-dir), 1 s windows and a short skew margin,
    /// so retries fire promptly. For trying Rebound and for testing code that uses it.
    Dev {
        /// Keep the data in this directory (created if missing) instead of a temporary one.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Create the keyspace if needed and apply missing schema migrations, then exit.
    Migrate,
    /// Validate the configuration and print it, then exit.
    CheckConfig,
}

fn main() -> ExitCode {
    without_huge_pages();
    let cli = Cli::parse();
    let env: std::collections::HashMap<String, String> = std::env::vars().collect();
    let overrides = Overrides {
        listen: cli.listen.clone(),
        keyspace: cli.keyspace.clone(),
        node_id: cli.node_id.clone(),
        contact_points: cli.contact_points.clone(),
    };
    // `dev` keeps its data where --data-dir or REBOUND_DATA_DIR says, else in a temporary
    // directory that lives until the process ends.
    let dev = match &cli.command {
        Some(Command::Dev { data_dir }) => {
            match data_dir.clone().or_else(|| {
                env.get("REBOUND_DATA_DIR")
                    .filter(|d| !d.is_empty())
                    .map(PathBuf::from)
            }) {
                Some(dir) => Some((dir, None)),
                None => match tempfile::Builder::new().prefix("rebound-dev-").tempdir() {
                    Ok(t) => Some((t.path().to_path_buf(), Some(t))),
                    Err(e) => {
                        eprintln!("rebound-server: cannot create a temporary data directory: {e}");
                        return ExitCode::FAILURE;
                    }
                },
            }
        }
        _ => None,
    };
    let base = match &dev {
        Some((dir, _)) => dev_defaults(dir.clone()),
        None => Config::default(),
    };
    let config = match Config::load_over(base, cli.config.as_deref(), &env, &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rebound-server: {e}");
            return ExitCode::from(2);
        }
    };
    let otel = match telemetry::OtelSettings::from_env(&env) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rebound-server: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rebound-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The exporter's channel is made on the runtime.
    let telemetry = {
        let _on_runtime = runtime.enter();
        let logs = if dev.is_some() {
            telemetry::Logs::Dev
        } else {
            telemetry::Logs::Node
        };
        match telemetry::init(config.log_format, logs, &otel, &config.node_id) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("rebound-server: {e:#}");
                return ExitCode::from(2);
            }
        }
    };
    let clock: SharedClock = match config.test_clock_skew_ms {
        0 => Arc::new(SystemClock),
        skew_ms => {
            tracing::warn!(
                skew_ms,
                "REBOUND_TEST_CLOCK_SKEW_MS: this node's clock is moved on purpose"
            );
            Arc::new(SkewedClock {
                base: Arc::new(SystemClock),
                skew_ms,
            })
        }
    };
    let result = runtime.block_on(async move {
        let result = match cli.command.unwrap_or(Command::Serve) {
            Command::Serve => serve(config, clock).await,
            Command::Dev { .. } => {
                let (dir, temp) = dev.expect("a dev directory");
                let result = run_dev(config, dir, temp.is_some(), clock).await;
                drop(temp);
                result
            }
            Command::Migrate => {
                let applied = run_migrations(&config, &clock).await?;
                if config.store == StoreKind::Embedded {
                    println!(
                        "embedded store in {:?}: applied {applied:?}",
                        config
                            .data_dir
                            .as_deref()
                            .unwrap_or(std::path::Path::new(""))
                    );
                    return Ok(());
                }
                println!(
                    "keyspace {}: applied {:?} ({} migration(s) were already applied)",
                    config.keyspace,
                    applied,
                    rebound_store_cassandra::migrate::MIGRATIONS.len() - applied.len()
                );
                Ok(())
            }
            Command::CheckConfig => {
                println!("{config:#?}");
                println!("{otel:#?}");
                Ok(())
            }
        };
        // The spans still queued go out before the process ends.
        telemetry.shutdown().await;
        result
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "rebound-server failed");
            eprintln!("rebound-server: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config, clock: SharedClock) -> anyhow::Result<()> {
    serve_node(Node::start(config, clock).await?).await
}

/// Runs `node` until it fails or a shutdown signal arrives; SIGHUP reloads its certificates,
/// credentials and secrets keys.
async fn serve_node(mut node: Node) -> anyhow::Result<()> {
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .expect("SIGHUP handler");
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        #[cfg(unix)]
        let reload = hangup.recv();
        #[cfg(not(unix))]
        let reload = std::future::pending::<Option<()>>();
        tokio::select! {
            r = node.wait() => return r,
            _ = &mut shutdown => {
                tracing::info!("shutdown requested");
                node.shutdown().await?;
                tracing::info!("stopped");
                return Ok(());
            }
            _ = reload => match node.reload() {
                Ok(()) => tracing::info!("SIGHUP: certificates, credentials and secrets keys reloaded"),
                Err(e) => tracing::error!(error = %format!("{e:#}"), "SIGHUP: reload failed; serving with what was loaded before"),
            },
        }
    }
}

/// The defaults of `rebound-server dev`, under the file, the environment and the flags:
/// the embedded store in `dir`, 1 s windows, a short margin, short leases, fast scans.
fn dev_defaults(dir: PathBuf) -> Config {
    Config {
        store: StoreKind::Embedded,
        data_dir: Some(dir),
        window_seconds: 1,
        skew_margin_ms: 250,
        scan_interval_ms: 100,
        compaction_interval_ms: 1_000,
        // A restarted dev node waits for its last run's leases to lapse: keep that short.
        lease_ttl_ms: 2_000,
        node_id: "dev".into(),
        // One node on its own clock: there is no database clock to follow.
        clock_sync: false,
        ..Config::default()
    }
}

async fn run_dev(
    mut config: Config,
    dir: PathBuf,
    temporary: bool,
    clock: SharedClock,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    // Whatever the file or the environment say, dev is the embedded store in its directory.
    config.store = StoreKind::Embedded;
    config.data_dir = Some(dir.clone());
    let windows = config.window_seconds;
    let node = Node::start(config, clock).await?;
    let addr = node.local_addr();
    let http = match node.http_addr() {
        Some(a) => format!("; metrics and probes on http://{a}"),
        None => String::new(),
    };
    let kept = if temporary {
        "a temporary directory, deleted on exit"
    } else {
        "kept on exit"
    };
    println!(
        "rebound dev: serving on {addr} in {} ms (embedded store in {}, {kept}; {windows} s windows{http})",
        started.elapsed().as_millis(),
        dir.display()
    );
    let cli = cli_command(&addr.to_string());
    println!("try: {cli} enqueue orders order-42 --delay 2s && {cli} subscribe orders --count 1");
    println!(" or: grpcurl -plaintext -d '{{\"service\": \"orders\", \"transaction_id\": \"order-42\", \"delay\": \"2s\"}}' {addr} rebound.v1.RetryService/EnqueueRetry");
    serve_node(node).await
}

/// How to call the `rebound` CLI at `addr`: the binary beside this one when it is there (as
/// in `target/release` and the image), by its path relative to the working directory.
fn cli_command(addr: &str) -> String {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("rebound")))
        .filter(|p| p.is_file());
    let path = match beside {
        Some(p) => {
            let cwd = std::env::current_dir().unwrap_or_default();
            match p.strip_prefix(&cwd) {
                Ok(rel) if rel.components().count() == 1 => format!("./{}", rel.display()),
                Ok(rel) => rel.display().to_string(),
                Err(_) => p.display().to_string(),
            }
        }
        None => "rebound".into(),
    };
    if addr == "127.0.0.1:50051" {
        path
    } else {
        format!("{path} --addr {addr}")
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
