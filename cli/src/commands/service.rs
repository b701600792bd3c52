//! AdminService commands on services: stats, the service list, pause and resume, policy,
//! limits and purge (push targets: `push`).

use rebound_proto::v1 as pb;
use serde_json::json;

use super::{count, malformed, Ctx, Out};
use crate::{
    args::PurgeArgs,
    error::CliError,
    render::{self, time_cell, time_json, yes_no},
    table::{key_values, Table},
};

pub(super) async fn stats(ctx: &Ctx, service: Option<&str>) -> Result<Out, CliError> {
    let request = pb::GetStatsRequest {
        service: service.unwrap_or_default().into(),
        local_only: false,
    };
    let r = ctx.call(ctx.admin().get_stats(ctx.req(request))).await?;
    let mut services = Table::new(&[
        "SERVICE",
        "PENDING",
        "OVERDUE",
        "≤1m",
        "≤1h",
        "≤1d",
        "LATER",
        "IN_FLIGHT",
        "DEAD",
        "OLDEST_OVERDUE",
        "PAUSED",
    ]);
    for s in &r.services {
        let b = s.bands.unwrap_or_default();
        services.row(vec![
            s.service.clone(),
            s.pending.to_string(),
            b.overdue.to_string(),
            b.within_minute.to_string(),
            b.within_hour.to_string(),
            b.within_day.to_string(),
            b.later.to_string(),
            s.in_flight.to_string(),
            s.dead_lettered.to_string(),
            s.oldest_due_age
                .as_ref()
                .map_or("-".into(), render::age_text),
            yes_no(s.paused),
        ]);
    }
    let mut nodes = Table::new(&[
        "NODE",
        "ADDRESS",
        "SLOTS",
        "COMPACTOR",
        "IN_FLIGHT",
        "SUBSCRIBERS",
        "REACHABLE",
    ]);
    for n in &r.nodes {
        nodes.row(vec![
            n.node_id.clone(),
            n.address.clone(),
            n.held_slots.to_string(),
            yes_no(n.compactor),
            n.in_flight.to_string(),
            n.subscribers.to_string(),
            yes_no(n.reachable),
        ]);
    }
    let mut text = if services.is_empty() {
        "no services with retries\n".to_string()
    } else {
        services.render()
    };
    text.push('\n');
    text.push_str(&nodes.render());
    text.push('\n');
    text.push_str(&super::holds::holds_text(&r.holds));
    let json = json!({
        "services": r.services.iter().map(render::service_stats_json).collect::<Vec<_>>(),
        "nodes": r.nodes.iter().map(render::node_stats_json).collect::<Vec<_>>(),
        "holds": super::holds::holds_json(&r.holds)["holds"],
    });
    Ok(Out::new(json, text))
}

pub(super) async fn services(ctx: &Ctx) -> Result<Out, CliError> {
    let r = ctx
        .call(
            ctx.admin()
                .list_services(ctx.req(pb::ListServicesRequest {})),
        )
        .await?;
    let mut t = Table::new(&[
        "SERVICE",
        "PAUSED",
        "PAUSED_AT",
        "POLICY",
        "LIMITS",
        "PUSH",
        "UPDATED_AT",
    ]);
    for s in &r.services {
        t.row(vec![
            s.service.clone(),
            yes_no(s.paused),
            time_cell(s.paused_at.as_ref()),
            render::policy_summary(s.policy.as_ref()),
            render::limits_summary(s.limits.as_ref()),
            render::push_summary(s.push_target.as_ref()),
            time_cell(s.updated_at.as_ref()),
        ]);
    }
    let text = if t.is_empty() {
        "no services\n".to_string()
    } else {
        t.render()
    };
    let json = json!({
        "services": r.services.iter().map(render::service_info_json).collect::<Vec<_>>(),
    });
    Ok(Out::new(json, text))
}

pub(super) async fn pause(ctx: &Ctx, service: &str, pause: bool) -> Result<Out, CliError> {
    let info = if pause {
        let request = pb::PauseServiceRequest {
            service: service.into(),
        };
        ctx.call(ctx.admin().pause_service(ctx.req(request)))
            .await?
            .service
    } else {
        let request = pb::ResumeServiceRequest {
            service: service.into(),
        };
        ctx.call(ctx.admin().resume_service(ctx.req(request)))
            .await?
            .service
    };
    let info = info.ok_or_else(|| malformed("no service in the answer"))?;
    let text = if info.paused {
        format!(
            "{} paused at {}: dispatch stops on every node within the settings refresh \
             interval; enqueues keep working\n",
            info.service,
            time_cell(info.paused_at.as_ref())
        )
    } else {
        format!("{} resumed: dispatch goes on\n", info.service)
    };
    Ok(Out::new(render::service_info_json(&info), text))
}

async fn get_service(ctx: &Ctx, service: &str) -> Result<pb::ServiceInfo, CliError> {
    let request = pb::GetServiceRequest {
        service: service.into(),
    };
    ctx.call(ctx.admin().get_service(ctx.req(request))).await
}

fn policy_out(
    service: &str,
    stored: Option<&pb::RetryPolicy>,
    effective: Option<&pb::RetryPolicy>,
) -> Out {
    let mut t = Table::new(&["FIELD", "STORED", "EFFECTIVE"]).left_aligned();
    let stored_fields = render::policy_fields(stored);
    let effective_fields = render::policy_fields(effective);
    for ((name, s), (_, e)) in stored_fields.into_iter().zip(effective_fields) {
        t.row(vec![
            name.to_string(),
            s.unwrap_or_else(|| "-".into()),
            e.unwrap_or_else(|| "-".into()),
        ]);
    }
    let text = format!(
        "policy of {service} (STORED: the service's own, - where unset; EFFECTIVE: with the node \
         defaults)\n{}",
        t.render()
    );
    let json = json!({
        "service": service,
        "policy": render::policy_json(stored),
        "effective_policy": render::policy_json(effective),
    });
    Out::new(json, text)
}

pub(super) async fn policy_get(ctx: &Ctx, service: &str) -> Result<Out, CliError> {
    let info = get_service(ctx, service).await?;
    Ok(policy_out(
        service,
        info.policy.as_ref(),
        info.effective_policy.as_ref(),
    ))
}

pub(super) async fn policy_set(
    ctx: &Ctx,
    service: &str,
    policy: pb::RetryPolicy,
) -> Result<Out, CliError> {
    let request = pb::SetServicePolicyRequest {
        service: service.into(),
        policy: Some(policy),
    };
    let r = ctx
        .call(ctx.admin().set_service_policy(ctx.req(request)))
        .await?;
    Ok(policy_out(
        service,
        r.policy.as_ref(),
        r.effective_policy.as_ref(),
    ))
}

fn limits_out(service: &str, limits: Option<&pb::ServiceLimits>) -> Out {
    let l = limits.copied().unwrap_or_default();
    let text = key_values(&[
        ("service", service.to_string()),
        (
            "rate",
            l.max_dispatch_per_second
                .map_or("unlimited".into(), |r| format!("{r}/s")),
        ),
        (
            "burst",
            l.dispatch_burst.map_or(
                if l.max_dispatch_per_second.is_some() {
                    "one second's worth".into()
                } else {
                    "-".into()
                },
                |b| b.to_string(),
            ),
        ),
        (
            "max_concurrent",
            l.max_concurrent
                .map_or("unlimited".into(), |c| c.to_string()),
        ),
    ]);
    let json = json!({
        "service": service,
        "limits": render::limits_json(limits),
    });
    Out::new(json, text)
}

pub(super) async fn limits_get(ctx: &Ctx, service: &str) -> Result<Out, CliError> {
    let info = get_service(ctx, service).await?;
    Ok(limits_out(service, info.limits.as_ref()))
}

pub(super) async fn limits_set(
    ctx: &Ctx,
    service: &str,
    limits: pb::ServiceLimits,
) -> Result<Out, CliError> {
    let request = pb::SetServiceLimitsRequest {
        service: service.into(),
        limits: Some(limits),
    };
    let r = ctx
        .call(ctx.admin().set_service_limits(ctx.req(request)))
        .await?;
    Ok(limits_out(service, r.limits.as_ref()))
}

// ---- AdminService: purge ------------------------------------------------------------------------

pub(super) async fn purge(ctx: &Ctx, a: &PurgeArgs) -> Result<Out, CliError> {
    let bar = ctx.progress(None);
    bar.set_message(format!("purging {}", a.service));
    // The first call fixes the cut-off (the node's "now" unless --before); later calls repeat
    // it so that retries enqueued meanwhile are kept.
    let mut before = a.before;
    let (mut cancelled, mut deleted, mut kept, mut calls) = (0u64, 0u64, 0u64, 0u64);
    loop {
        let request = pb::PurgeServiceRequest {
            service: a.service.clone(),
            before,
            max_buckets: a.batch,
        };
        let r = ctx
            .call(ctx.admin().purge_service(ctx.req(request)))
            .await
            .inspect_err(|_| bar.finish_and_clear())?;
        calls += 1;
        cancelled += r.cancelled;
        deleted += r.buckets_deleted;
        kept += r.buckets_kept;
        if before.is_none() {
            before = r.before;
            if before.is_none() && !r.done {
                bar.finish_and_clear();
                return Err(malformed("PurgeService did not say which cut-off it used"));
            }
        }
        bar.set_message(format!(
            "purging {} (before {}): {cancelled} retries cancelled, {deleted} buckets deleted",
            a.service,
            time_cell(before.as_ref()),
        ));
        if r.done {
            break;
        }
    }
    bar.finish_and_clear();
    let text = format!(
        "purged {}: {} cancelled, {} deleted, {} kept (they hold retries scheduled at or after \
         {}), in {}\n",
        a.service,
        count(cancelled, "retry", "retries"),
        count(deleted, "bucket", "buckets"),
        count(kept, "bucket", "buckets"),
        time_cell(before.as_ref()),
        count(calls, "call", "calls"),
    );
    let json = json!({
        "service": a.service,
        "before": time_json(before.as_ref()),
        "cancelled": cancelled,
        "buckets_deleted": deleted,
        "buckets_kept": kept,
        "calls": calls,
    });
    Ok(Out::new(json, text))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn policy_output_lists_stored_and_effective() {
        let stored = pb::RetryPolicy {
            max_attempts: Some(3),
            ..Default::default()
        };
        let effective = pb::RetryPolicy {
            max_attempts: Some(3),
            jitter: Some(0.2),
            ..Default::default()
        };
        let out = policy_out("orders", Some(&stored), Some(&effective));
        assert!(
            out.text
                .contains("\nmax_attempts                 3       3\n"),
            "{}",
            out.text
        );
        assert!(
            out.text
                .contains("\njitter                       -       0.2\n"),
            "{}",
            out.text
        );
        assert_eq!(out.json["policy"]["max_attempts"], 3);
        assert_eq!(out.json["policy"]["jitter"], Value::Null);
        assert_eq!(out.json["effective_policy"]["jitter"], 0.2);
    }

    #[test]
    fn limits_output_says_unlimited() {
        let out = limits_out("orders", None);
        assert!(
            out.text.contains("rate            unlimited\n"),
            "{}",
            out.text
        );
        assert_eq!(out.json["limits"]["max_concurrent"], Value::Null);
        let l = pb::ServiceLimits {
            max_dispatch_per_second: Some(100.0),
            dispatch_burst: Some(20),
            max_concurrent: Some(50),
        };
        let out = limits_out("orders", Some(&l));
        assert!(out.text.contains("rate            100/s\n"), "{}", out.text);
        assert_eq!(out.json["limits"]["max_dispatch_per_second"], 100.0);
        assert_eq!(out.json["limits"]["dispatch_burst"], 20);
    }
}
