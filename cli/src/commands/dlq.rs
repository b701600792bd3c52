//! AdminService commands on dead letters: `dlq list`, `dlq redrive` and `dlq purge`.

use std::time::Duration;

use rebound_proto::v1 as pb;
use serde_json::json;

use super::{count, human, Ctx, Out};
use crate::{
    args::DeadLetterFilter,
    error::CliError,
    render::{self, duration_to_proto, time_cell},
    table::{truncate, Table},
};

fn list_request(
    f: &DeadLetterFilter,
    page_size: u32,
    page_token: String,
) -> pb::ListDeadLettersRequest {
    pb::ListDeadLettersRequest {
        service: f.service.clone(),
        from: f.from,
        to: f.to,
        error_contains: f.error_contains.clone().unwrap_or_default(),
        page_size,
        page_token,
        include_redriven: false,
    }
}

/// The largest page ListDeadLetters serves.
const MAX_PAGE: u64 = 1_000;

pub(super) async fn dlq_list(
    ctx: &Ctx,
    f: &DeadLetterFilter,
    limit: u64,
    include_redriven: bool,
    page_token: Option<String>,
) -> Result<Out, CliError> {
    let limit = if limit == 0 { u64::MAX } else { limit };
    let mut token = page_token.unwrap_or_default();
    let mut letters: Vec<pb::DeadLetter> = Vec::new();
    loop {
        let want = limit - letters.len() as u64;
        if want == 0 {
            break;
        }
        let mut request = list_request(f, want.min(MAX_PAGE) as u32, std::mem::take(&mut token));
        request.include_redriven = include_redriven;
        let r = ctx
            .call(ctx.admin().list_dead_letters(ctx.req(request)))
            .await?;
        letters.extend(r.dead_letters.into_iter().take(want as usize));
        token = r.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    let mut t = Table::new(&[
        "TRANSACTION_ID",
        "ATTEMPT",
        "DEAD_AT",
        "REDRIVEN_AT",
        "LAST_ERROR",
    ]);
    for d in &letters {
        t.row(vec![
            d.transaction_id.clone(),
            d.attempt.to_string(),
            time_cell(d.dead_at.as_ref()),
            time_cell(d.redriven_at.as_ref()),
            truncate(&d.last_error, 80),
        ]);
    }
    let mut text = if t.is_empty() {
        format!("no dead letters of {} match\n", f.service)
    } else {
        t.render()
    };
    if !token.is_empty() {
        text.push_str(&format!(
            "(more match: raise --limit, or continue with --page-token {token})\n"
        ));
    }
    let json = json!({
        "service": f.service,
        "dead_letters": letters.iter().map(render::dead_letter_json).collect::<Vec<_>>(),
        "next_page_token": (!token.is_empty()).then_some(token),
    });
    Ok(Out::new(json, text))
}

pub(super) async fn dlq_redrive(
    ctx: &Ctx,
    f: &DeadLetterFilter,
    delay: Duration,
    rate: u32,
    batch: u32,
) -> Result<Out, CliError> {
    // Count first, for the progress bar and the report.
    let counting = ctx.progress(None);
    counting.set_message(format!(
        "counting the dead letters of {} to redrive",
        f.service
    ));
    let mut matched = 0u64;
    let mut token = String::new();
    loop {
        let request = list_request(f, MAX_PAGE as u32, std::mem::take(&mut token));
        let r = ctx
            .call(ctx.admin().list_dead_letters(ctx.req(request)))
            .await
            .inspect_err(|_| counting.finish_and_clear())?;
        matched += r.dead_letters.len() as u64;
        counting.set_message(format!(
            "counting the dead letters of {} to redrive: {matched}",
            f.service
        ));
        token = r.next_page_token;
        if token.is_empty() {
            break;
        }
    }
    counting.finish_and_clear();

    // A call handles up to `batch` letters at `rate` per second: allow for that on top of
    // the --timeout.
    let per_call = {
        let items = if batch == 0 { 1_000 } else { batch };
        let rate = if rate == 0 { 500 } else { rate };
        ctx.timeout
            .saturating_add(Duration::from_secs_f64(f64::from(items) / f64::from(rate)))
    };
    let bar = ctx.progress(Some(matched));
    bar.set_message(format!("redriving {}", f.service));
    let (mut redriven, mut skipped, mut calls) = (0u64, 0u64, 0u64);
    loop {
        let request = pb::RedriveDeadLettersRequest {
            service: f.service.clone(),
            from: f.from,
            to: f.to,
            error_contains: f.error_contains.clone().unwrap_or_default(),
            delay: Some(duration_to_proto(delay)),
            max_items: batch,
            max_per_second: rate,
        };
        let r = ctx
            .call_within(
                per_call,
                ctx.admin()
                    .redrive_dead_letters(ctx.req_within(request, per_call)),
            )
            .await
            .inspect_err(|_| bar.finish_and_clear())?;
        calls += 1;
        redriven += r.redriven;
        skipped += r.skipped;
        if redriven + skipped > matched {
            bar.set_length(redriven + skipped);
        }
        bar.set_position(redriven + skipped);
        if r.done {
            break;
        }
    }
    bar.finish_and_clear();
    let text = format!(
        "redrove {} of {} ({skipped} skipped: enqueued again meanwhile; {matched} matched when \
         counted), due in {} or the next window\n",
        count(redriven, "dead letter", "dead letters"),
        f.service,
        human(delay),
    );
    let json = json!({
        "service": f.service,
        "matched": matched,
        "redriven": redriven,
        "skipped": skipped,
        "calls": calls,
    });
    Ok(Out::new(json, text))
}

pub(super) async fn dlq_purge(
    ctx: &Ctx,
    service: &str,
    from: Option<prost_types::Timestamp>,
    to: Option<prost_types::Timestamp>,
) -> Result<Out, CliError> {
    let request = pb::PurgeDeadLettersRequest {
        service: service.into(),
        from,
        to,
    };
    let r = ctx
        .call(ctx.admin().purge_dead_letters(ctx.req(request)))
        .await?;
    let text = format!(
        "purged {} of {service}\n",
        count(r.purged, "dead letter", "dead letters")
    );
    let json = json!({ "service": service, "purged": r.purged });
    Ok(Out::new(json, text))
}
