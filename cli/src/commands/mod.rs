//! What each command does: the calls it makes and what it prints.

//!
//! - `conn`: the connection and the per-call context;
//! - `retry`: enqueue, get, cancel (RetryService);
//! - `subscribe`: a stand-in executor (ExecutorService Subscribe and Ack);
//! - `service`: stats, services, pause/resume, policy, limits, purge;
//! - `push`: push targets (set, get, clear);
//! - `dlq`: dead letters (list, redrive, purge);
//! - `cluster`: the ring and window inspection.

use std::{io::Write, time::Duration};

use rebound_proto::v1 as pb;
use serde_json::Value;

use crate::{
    args::{
        Cli, Command, DlqCommand, HoldsCommand, LimitsCommand, PolicyCommand, PushTargetCommand,
    },
    error::CliError,
};

mod cluster;
mod conn;
mod dlq;
mod holds;
mod push;
mod retry;
mod service;
mod subscribe;

use cluster::{inspect_window, ring};
use conn::{connect, tls, Ctx};
use dlq::{dlq_list, dlq_purge, dlq_redrive};
use holds::{holds_list, holds_release, holds_set};
use push::{push_target_clear, push_target_get, push_target_set};
use retry::{act, cancel, enqueue, get, history, list};
use service::{limits_get, limits_set, pause, policy_get, policy_set, purge, services, stats};
use subscribe::subscribe;

/// What a command prints: the JSON document for `--json`, the text otherwise.
struct Out {
    pub(super) json: Value,
    pub(super) text: String,
}

impl Out {
    fn new(json: Value, text: impl Into<String>) -> Self {
        Out {
            json,
            text: text.into(),
        }
    }
}

/// Runs the command line's command against its node.
pub async fn run(cli: &Cli) -> Result<(), CliError> {
    confirm(&cli.command)?;
    let authorization = match &cli.token {
        None => None,
        Some(t) => {
            let mut v: tonic::metadata::AsciiMetadataValue =
                format!("Bearer {t}").parse().map_err(|_| {
                    CliError::usage("--token must be printable ASCII without line breaks")
                })?;
            v.set_sensitive(true);
            Some(v)
        }
    };
    let ctx = Ctx {
        channel: connect(&cli.addr, cli.timeout, tls(cli)?).await?,
        timeout: cli.timeout,
        json: cli.json,
        authorization,
    };
    let out = match &cli.command {
        Command::Enqueue(a) => enqueue(&ctx, a).await?,
        Command::Get(a) => get(&ctx, &a.service, &a.transaction_id).await?,
        Command::History(a) => history(&ctx, &a.service, &a.transaction_id).await?,
        Command::List(a) => list(&ctx, a).await?,
        Command::Act(a) => act(&ctx, a).await?,
        Command::Cancel(a) => cancel(&ctx, &a.service, &a.transaction_id).await?,
        Command::Subscribe(a) => subscribe(&ctx, a).await?,
        Command::Stats { service } => stats(&ctx, service.as_deref()).await?,
        Command::Services => services(&ctx).await?,
        Command::Pause { service } => pause(&ctx, service, true).await?,
        Command::Resume { service } => pause(&ctx, service, false).await?,
        Command::Policy(PolicyCommand::Get { service }) => policy_get(&ctx, service).await?,
        Command::Policy(PolicyCommand::Set { service, policy }) => {
            policy_set(&ctx, service, policy.to_proto()).await?
        }
        Command::Limits(LimitsCommand::Get { service }) => limits_get(&ctx, service).await?,
        Command::Limits(LimitsCommand::Set {
            service,
            rate,
            burst,
            max_concurrent,
        }) => {
            let limits = pb::ServiceLimits {
                max_dispatch_per_second: *rate,
                dispatch_burst: *burst,
                max_concurrent: *max_concurrent,
            };
            limits_set(&ctx, service, limits).await?
        }
        Command::PushTarget(PushTargetCommand::Set(a)) => push_target_set(&ctx, a).await?,
        Command::PushTarget(PushTargetCommand::Get { service }) => {
            push_target_get(&ctx, service).await?
        }
        Command::PushTarget(PushTargetCommand::Clear { service }) => {
            push_target_clear(&ctx, service).await?
        }
        Command::Holds(HoldsCommand::List) => holds_list(&ctx).await?,
        Command::Holds(HoldsCommand::Set {
            dependency,
            duration,
            reason,
        }) => holds_set(&ctx, dependency, *duration, reason.as_deref()).await?,
        Command::Holds(HoldsCommand::Release { dependency }) => {
            holds_release(&ctx, dependency).await?
        }
        Command::Purge(a) => purge(&ctx, a).await?,
        Command::Dlq(DlqCommand::List {
            filter,
            limit,
            include_redriven,
            page_token,
        }) => dlq_list(&ctx, filter, *limit, *include_redriven, page_token.clone()).await?,
        Command::Dlq(DlqCommand::Redrive {
            filter,
            delay,
            rate,
            batch,
        }) => dlq_redrive(&ctx, filter, *delay, *rate, *batch).await?,
        Command::Dlq(DlqCommand::Purge {
            service, from, to, ..
        }) => dlq_purge(&ctx, service, *from, *to).await?,
        Command::Ring => ring(&ctx).await?,
        Command::InspectWindow { day, window } => inspect_window(&ctx, day, *window).await?,
    };
    if cli.json {
        let doc = serde_json::to_string_pretty(&out.json)
            .map_err(|e| CliError::internal(format!("cannot encode the output: {e}")))?;
        emit(&format!("{doc}\n"))
    } else {
        emit(&out.text)
    }
}

/// Destructive commands need `--yes`; refused before anything is sent (exit code 2).
fn confirm(command: &Command) -> Result<(), CliError> {
    match command {
        Command::Act(a)
            if !a.yes
                && matches!(
                    a.action,
                    crate::args::ActionArg::Cancel | crate::args::ActionArg::DeadLetter
                ) =>
        {
            let what = if a.action == crate::args::ActionArg::Cancel {
                "cancelling"
            } else {
                "moving to the dead letters"
            };
            Err(CliError::usage(format!(
                "{what} the selected retries of {:?} cannot be undone: pass --yes to confirm \
                 (`rebound list` with the same filters shows them)",
                a.service
            )))
        }
        Command::Purge(a) if !a.yes => Err(CliError::usage(format!(
            "purge cancels every pending retry of {:?} scheduled before the cut-off (now, or \
             --before) and deletes its buckets; it cannot be undone: pass --yes to confirm",
            a.service
        ))),
        Command::Dlq(DlqCommand::Purge { service, yes, .. }) if !yes => {
            Err(CliError::usage(format!(
                "dlq purge deletes the matching dead letters of {service:?}; it cannot be \
                 undone: pass --yes to confirm"
            )))
        }
        _ => Ok(()),
    }
}

/// Writes to stdout; a closed pipe (`rebound dlq list ... | head`) is not an error.
fn emit(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::internal(format!("cannot write the output: {e}"))),
    }
}

/// `1 retry`, `2 retries`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn malformed(what: &str) -> CliError {
    CliError::internal(format!("malformed answer from the node: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(args).unwrap()
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(1, "retry", "retries"), "1 retry");
        assert_eq!(count(0, "retry", "retries"), "0 retries");
        assert_eq!(count(2, "bucket", "buckets"), "2 buckets");
    }

    #[test]
    fn destructive_commands_need_yes() {
        let e = confirm(&parse(&["rebound", "purge", "orders"]).command).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(confirm(&parse(&["rebound", "purge", "orders", "--yes"]).command).is_ok());
        let e = confirm(&parse(&["rebound", "dlq", "purge", "orders"]).command).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(confirm(&parse(&["rebound", "dlq", "purge", "orders", "--yes"]).command).is_ok());
        assert!(confirm(&parse(&["rebound", "ring"]).command).is_ok());
    }
}
