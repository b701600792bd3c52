//! `rebound-server`: runs a Rebound node (`serve`, the default) or applies the schema
//! (`migrate`). Configuration: defaults, `--config` TOML, `REBOUND_*` environment, flags.

use std::{path::PathBuf, process::ExitCode, sync::Arc};

use clap::{Parser, Subcommand};
use rebound_server::{
    clock::{SharedClock, SkewedClock, SystemClock},
    config::{Config, Overrides},
    node::{run_migrations, Node},
    telemetry,
};

/// mimalloc instead of glibc's malloc: under load the node spent about a third of its CPU in
/// glibc's allocator (malloc, free, consolidation), measured with perf during a drain.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    name = "rebound-server",
    version,
    about = "Rebound node: retry-as-a-service over Apache Cassandra"
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
    /// Create the keyspace if needed and apply missing schema migrations, then exit.
    Migrate,
    /// Validate the configuration and print it, then exit.
    CheckConfig,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let env: std::collections::HashMap<String, String> = std::env::vars().collect();
    let overrides = Overrides {
        listen: cli.listen.clone(),
        keyspace: cli.keyspace.clone(),
        node_id: cli.node_id.clone(),
        contact_points: cli.contact_points.clone(),
    };
    let config = match Config::load(cli.config.as_deref(), &env, &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rebound-server: {e}");
            return ExitCode::from(2);
        }
    };
    telemetry::init(config.log_format);
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
        match cli.command.unwrap_or(Command::Serve) {
            Command::Serve => serve(config, clock).await,
            Command::Migrate => {
                let applied = run_migrations(&config, &clock).await?;
                println!(
                    "keyspace {}: applied {:?} ({} migration(s) were already applied)",
                    config.keyspace,
                    applied,
                    rebound_server::store::migrate::MIGRATIONS.len() - applied.len()
                );
                Ok(())
            }
            Command::CheckConfig => {
                println!("{config:#?}");
                Ok(())
            }
        }
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
    let mut node = Node::start(config, clock).await?;
    tokio::select! {
        r = node.wait() => r,
        _ = shutdown_signal() => {
            tracing::info!("shutdown requested");
            node.shutdown().await?;
            tracing::info!("stopped");
            Ok(())
        }
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
