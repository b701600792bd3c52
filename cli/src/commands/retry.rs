//! RetryService commands: enqueue, get and cancel.

use std::{io::Read, path::Path};

use rebound_proto::v1 as pb;
use serde_json::json;

use super::{Ctx, Out};
use crate::{
    args::EnqueueArgs,
    error::CliError,
    render::{self, duration_to_proto, time_cell, time_json, yes_no},
    table::key_values,
};

fn read_payload(path: &Path) -> Result<Vec<u8>, CliError> {
    let result = if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map(|_| buf)
    } else {
        std::fs::read(path)
    };
    result.map_err(|e| CliError::usage(format!("--payload-file {}: {e}", path.display())))
}

pub(super) async fn enqueue(ctx: &Ctx, a: &EnqueueArgs) -> Result<Out, CliError> {
    let payload = match (&a.payload, &a.payload_file) {
        (Some(p), _) => p.clone().into_bytes(),
        (None, Some(path)) => read_payload(path)?,
        (None, None) => Vec::new(),
    };
    let mut attributes = std::collections::HashMap::new();
    for (k, v) in &a.attributes {
        if attributes.insert(k.clone(), v.clone()).is_some() {
            return Err(CliError::usage(format!("--attr {k}: given twice")));
        }
    }
    let schedule = match (a.delay, a.due) {
        (Some(d), _) => Some(pb::enqueue_retry_request::Schedule::Delay(
            duration_to_proto(d),
        )),
        (None, Some(t)) => Some(pb::enqueue_retry_request::Schedule::DueTime(t)),
        (None, None) => None,
    };
    let request = pb::EnqueueRetryRequest {
        service: a.service.clone(),
        transaction_id: a.transaction_id.clone(),
        payload,
        attributes,
        schedule,
        policy: (!a.policy.is_empty()).then(|| a.policy.to_proto()),
        attempt: a.attempt,
        last_error: a.last_error.clone().unwrap_or_default(),
        trace_context: None,
        dependency: a.dependency.clone().unwrap_or_default(),
        compensations: a
            .compensations
            .iter()
            .map(|(service, transaction_id)| pb::Compensation {
                service: service.clone(),
                transaction_id: transaction_id.clone(),
                ..Default::default()
            })
            .collect(),
    };
    let r = ctx
        .call(ctx.retry().enqueue_retry(ctx.req(request)))
        .await?;
    let json = json!({
        "service": a.service,
        "transaction_id": r.transaction_id,
        "due_time": time_json(r.due_time.as_ref()),
        "generation": r.generation.to_string(),
        "deduplicated": r.deduplicated,
    });
    let text = key_values(&[
        ("service", a.service.clone()),
        ("transaction_id", r.transaction_id.clone()),
        ("due_time", time_cell(r.due_time.as_ref())),
        ("generation", r.generation.to_string()),
        ("deduplicated", yes_no(r.deduplicated)),
    ]);
    Ok(Out::new(json, text))
}

/// GetRetry.
async fn get_retry(ctx: &Ctx, service: &str, transaction_id: &str) -> Result<pb::Retry, CliError> {
    let request = pb::GetRetryRequest {
        service: service.into(),
        transaction_id: transaction_id.into(),
    };
    ctx.call(ctx.retry().get_retry(ctx.req(request))).await
}

pub(super) async fn get(ctx: &Ctx, service: &str, transaction_id: &str) -> Result<Out, CliError> {
    let r = get_retry(ctx, service, transaction_id).await?;
    let mut text = render::retry_text(&r);
    if !r.attempts.is_empty() {
        text.push('\n');
        text.push_str(&render::attempts_text(&r));
    }
    Ok(Out::new(render::retry_json(&r), text))
}

/// The largest page ListRetries serves.
const MAX_LIST_PAGE: u64 = 500;

/// A service's scheduled retries (ListRetries), following page tokens up to `--limit`.
pub(super) async fn list(ctx: &Ctx, a: &crate::args::ListArgs) -> Result<Out, CliError> {
    let limit = if a.limit == 0 { u64::MAX } else { a.limit };
    let mut token = a.page_token.clone().unwrap_or_default();
    let mut rows: Vec<pb::RetrySummary> = Vec::new();
    let mut unreachable = std::collections::BTreeSet::new();
    loop {
        let want = limit - rows.len() as u64;
        if want == 0 {
            break;
        }
        let request = pb::ListRetriesRequest {
            statuses: a.statuses.iter().map(|s| s.to_proto() as i32).collect(),
            page_size: want.min(MAX_LIST_PAGE) as u32,
            page_token: std::mem::take(&mut token),
            ..a.filter.request(&a.service)
        };
        let r = ctx.call(ctx.retry().list_retries(ctx.req(request))).await?;
        rows.extend(r.retries.into_iter().take(want as usize));
        unreachable.extend(r.unreachable_nodes);
        token = r.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    let mut t = crate::table::Table::new(&[
        "TRANSACTION_ID",
        "STATUS",
        "ATTEMPT",
        "DUE",
        "DEPENDENCY",
        "ENQUEUES",
        "DELIVERIES",
        "LAST_ERROR",
    ]);
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    for r in &rows {
        t.row(vec![
            r.transaction_id.clone(),
            render::status_name(r.status),
            r.attempt.to_string(),
            render::time_cell(r.due_time.as_ref()),
            or_dash(&r.dependency),
            r.enqueue_count.to_string(),
            r.delivery_count.to_string(),
            or_dash(&crate::table::truncate(&r.last_error, 80)),
        ]);
    }
    let mut text = if t.is_empty() {
        format!("no retries of {} match\n", a.service)
    } else {
        t.render()
    };
    if !token.is_empty() {
        text.push_str(&format!(
            "(more may match: raise --limit, or continue with --page-token {token})\n"
        ));
    }
    if !unreachable.is_empty() {
        let nodes: Vec<&str> = unreachable.iter().map(String::as_str).collect();
        text.push_str(&format!(
            "(nodes that did not answer, whose retries in flight are missing: {})\n",
            nodes.join(", ")
        ));
    }
    let json = json!({
        "service": a.service,
        "retries": rows.iter().map(rebound_proto::json::retry_summary_json).collect::<Vec<_>>(),
        "next_page_token": (!token.is_empty()).then_some(token),
        "unreachable_nodes": unreachable,
    });
    Ok(Out::new(json, text))
}

/// ActOnRetries, call after call until the selection is done.
pub(super) async fn act(ctx: &Ctx, a: &crate::args::ActArgs) -> Result<Out, CliError> {
    use crate::args::ActionArg;
    let (action, verb) = match a.action {
        ActionArg::RunNow => (pb::RetryAction::RunNow, "ran now"),
        ActionArg::Reschedule => (pb::RetryAction::Reschedule, "rescheduled"),
        ActionArg::Cancel => (pb::RetryAction::Cancel, "cancelled"),
        ActionArg::DeadLetter => (pb::RetryAction::DeadLetter, "moved to the dead letters"),
    };
    let due_time = match (a.action, a.at, a.after) {
        (ActionArg::Reschedule, Some(at), _) => Some(at),
        (ActionArg::Reschedule, None, Some(after)) => Some(rebound_proto::json::timestamp_of(
            chrono::Utc::now() + chrono::Duration::from_std(after).unwrap_or_default(),
        )),
        (ActionArg::Reschedule, None, None) => {
            return Err(CliError::usage(
                "reschedule needs the new due time: --at TIME or --in DURATION",
            ))
        }
        (_, None, None) => None,
        _ => return Err(CliError::usage("--at and --in are for reschedule only")),
    };
    let bar = ctx.progress(None);
    let (mut changed, mut skipped, mut calls) = (0u64, 0u64, 0u64);
    let mut token = String::new();
    loop {
        let request = pb::ActOnRetriesRequest {
            selection: Some(pb::ListRetriesRequest {
                page_token: std::mem::take(&mut token),
                ..a.filter.request(&a.service)
            }),
            transaction_ids: a.ids.clone(),
            action: action as i32,
            due_time,
            max_items: 0,
            max_per_second: a.max_per_second,
            reason: a.reason.clone(),
        };
        let r = ctx
            .call(ctx.retry().act_on_retries(ctx.req(request)))
            .await
            .inspect_err(|_| bar.finish_and_clear())?;
        calls += 1;
        changed += u64::from(r.changed);
        skipped += u64::from(r.skipped);
        bar.set_message(format!(
            "{}: {changed} {verb}, {skipped} skipped",
            a.service
        ));
        token = r.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    bar.finish_and_clear();
    let text = format!(
        "{}: {} {verb}, {skipped} skipped (finished, changed meanwhile, or already so), in {}\n",
        a.service,
        super::count(changed, "retry", "retries"),
        super::count(calls, "call", "calls"),
    );
    let json = json!({
        "service": a.service,
        "action": action.as_str_name().trim_start_matches("RETRY_ACTION_"),
        "changed": changed,
        "skipped": skipped,
        "calls": calls,
    });
    Ok(Out::new(json, text))
}

/// The attempt history of one retry (GetRetry's `attempts`).
pub(super) async fn history(
    ctx: &Ctx,
    service: &str,
    transaction_id: &str,
) -> Result<Out, CliError> {
    let r = get_retry(ctx, service, transaction_id).await?;
    let json = json!({
        "service": r.service,
        "transaction_id": r.transaction_id,
        "status": render::status_name(r.status),
        "attempt": r.attempt,
        "attempts": r.attempts.iter().map(rebound_proto::json::attempt_json).collect::<Vec<_>>(),
        "attempts_dropped": r.attempts_dropped,
    });
    Ok(Out::new(json, render::attempts_text(&r)))
}

pub(super) async fn cancel(
    ctx: &Ctx,
    service: &str,
    transaction_id: &str,
) -> Result<Out, CliError> {
    let request = pb::CancelRetryRequest {
        service: service.into(),
        transaction_id: transaction_id.into(),
    };
    let r = ctx.call(ctx.retry().cancel_retry(ctx.req(request))).await?;
    let status = render::status_name(r.status);
    let text = if r.cancelled {
        format!("cancelled {service} {transaction_id}: status {status}\n")
    } else {
        format!(
            "nothing to cancel: {service} {transaction_id} had already finished with status {status}\n"
        )
    };
    let json = json!({
        "service": service,
        "transaction_id": transaction_id,
        "status": status,
        "cancelled": r.cancelled,
    });
    Ok(Out::new(json, text))
}
