//! `rebound`, the operator command line for Rebound.
//!
//! It talks gRPC to one Rebound node (`--addr`, `REBOUND_ADDR`, default
//! `http://127.0.0.1:50051`; a bare `host:port` means plain-text HTTP/2) through the generated
//! `rebound.v1` clients: `RetryService` for `enqueue`, `get` and `cancel`, `ExecutorService` for
//! `subscribe` (a stand-in executor) and `ring`, and `AdminService` for everything else. Output
//! is aligned tables by default; with `--json` every command prints exactly one JSON document on
//! stdout (timestamps as RFC 3339 strings, durations as seconds, enums by name such as
//! `"SCHEDULED"`, 64-bit identifiers such as generations and tokens as decimal strings, counts
//! as numbers, unset values as `null`).
//!
//! # Exit codes
//!
//! Scripts can rely on these:
//!
//! | code | meaning |
//! | ---- | ------- |
//! | 0 | success |
//! | 1 | unexpected or internal error (`INTERNAL`, `UNKNOWN`, `DATA_LOSS`, ...) |
//! | 2 | usage error: bad flags or arguments (from clap), or a refused confirmation (`--yes` missing) |
//! | 3 | `NOT_FOUND`: no such retry or service |
//! | 4 | `INVALID_ARGUMENT` / `OUT_OF_RANGE`: the node refused the input; the message names the field |
//! | 5 | `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`, or the node cannot be reached: safe to retry |
//! | 6 | `ALREADY_EXISTS` / `FAILED_PRECONDITION`: the state does not allow it (e.g. the transaction already succeeded) |
//! | 7 | `UNIMPLEMENTED`: the node does not offer this call |
//!
//! Errors are printed to stderr as `rebound: <CODE>: <message>`; with `--json` stdout also
//! gets `{"error": {"code": "<CODE>", "message": "..."}}`. Usage errors found by the argument
//! parser keep clap's own message on stderr, and with `--json` add the same document with code
//! `USAGE`, so a script that passes `--json` always gets one JSON document.

mod args;
mod commands;
mod error;
mod render;
mod table;

use std::process::ExitCode;

use clap::Parser;

use crate::args::Cli;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let e = error::CliError::internal(format!("cannot start the async runtime: {e}"));
            e.report(cli.json);
            return ExitCode::from(e.exit_code());
        }
    };
    match runtime.block_on(commands::run(&cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            e.report(cli.json);
            ExitCode::from(e.exit_code())
        }
    }
}

/// clap's own message on stderr (exit code 2; 0 for `--help` and `--version`) and, when
/// `--json` was given, a `USAGE` error document on stdout so that scripts always get JSON.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let informational = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if !informational && std::env::args_os().any(|a| a == "--json") {
        let message = if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            "a command is required (see rebound --help)".to_string()
        } else {
            let rendered = e.render().to_string();
            // The first paragraph, without the usage lines after it.
            rendered
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
                .trim_start_matches("error: ")
                .to_string()
        };
        let doc = serde_json::json!({ "error": { "code": "USAGE", "message": message } });
        println!("{doc}");
    }
    let _ = e.print();
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(error::EXIT_USAGE))
}
