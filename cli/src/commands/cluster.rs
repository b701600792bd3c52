//! The ring and window inspection: `ring` and `inspect-window`.

use std::collections::BTreeMap;

use rebound_proto::v1 as pb;

use super::{Ctx, Out};
use crate::{
    error::CliError,
    render::{self, time_cell, yes_no},
    table::{key_values, Table},
};

pub(super) async fn ring(ctx: &Ctx) -> Result<Out, CliError> {
    let r = ctx
        .call(ctx.executor().get_ring(ctx.req(pb::GetRingRequest {})))
        .await?;
    let mut nodes = Table::new(&["NODE", "ADDRESS", "COMPACTOR", "RANGES", "SHARE"]);
    let mut ranges = Table::new(&["NODE", "START", "END"]);
    for n in &r.nodes {
        nodes.row(vec![
            n.node_id.clone(),
            n.address.clone(),
            yes_no(n.compactor),
            n.ranges.len().to_string(),
            format!("{:.1}%", render::token_share(&n.ranges)),
        ]);
        let mut sorted = n.ranges.clone();
        sorted.sort_by_key(|t| t.start);
        for t in sorted {
            ranges.row(vec![
                n.node_id.clone(),
                t.start.to_string(),
                t.end.to_string(),
            ]);
        }
    }
    let text = if nodes.is_empty() {
        "no ring: the node runs without leases\n".to_string()
    } else {
        format!("{}\n{}", nodes.render(), ranges.render())
    };
    Ok(Out::new(render::ring_json(&r), text))
}

pub(super) async fn inspect_window(ctx: &Ctx, day: &str, window: u32) -> Result<Out, CliError> {
    let request = pb::InspectWindowRequest {
        day: day.into(),
        window,
    };
    let r = ctx
        .call(ctx.admin().inspect_window(ctx.req(request)))
        .await?;
    let buckets: usize = r.instances.iter().map(|i| i.buckets.len()).sum();
    let pointers: u64 = r
        .instances
        .iter()
        .flat_map(|i| &i.buckets)
        .map(|b| b.pointers)
        .sum();
    let mut text = key_values(&[
        ("day", day.to_string()),
        (
            "window",
            format!("{window} ({}s windows)", r.window_seconds),
        ),
        (
            "span",
            format!(
                "{} .. {}",
                time_cell(r.window_start.as_ref()),
                time_cell(r.window_end.as_ref())
            ),
        ),
        ("readable", yes_no(r.readable)),
        (
            "low_water",
            format!("{} (windows below it were compacted)", r.low_water),
        ),
        ("tier 1 day listed", yes_no(r.day_listed)),
        ("tier 2 window listed", yes_no(r.window_listed)),
        ("tier 3 instances", r.instances.len().to_string()),
        ("tier 4 buckets", buckets.to_string()),
        ("tier 5 pointers", pointers.to_string()),
    ]);
    let mut t = Table::new(&[
        "SERVICE",
        "INSTANCE",
        "INSTANCE_TOKEN",
        "BUCKET",
        "POINTERS",
    ]);
    let mut instances: Vec<&pb::InstanceEntry> = r.instances.iter().collect();
    instances.sort_by(|a, b| (&a.service, &a.instance).cmp(&(&b.service, &b.instance)));
    for i in instances {
        if i.buckets.is_empty() {
            t.row(vec![
                i.service.clone(),
                i.instance.clone(),
                i.instance_token.to_string(),
                "-".into(),
                "-".into(),
            ]);
        }
        let by_bucket: BTreeMap<u32, u64> =
            i.buckets.iter().map(|b| (b.bucket, b.pointers)).collect();
        for (bucket, n) in by_bucket {
            t.row(vec![
                i.service.clone(),
                i.instance.clone(),
                i.instance_token.to_string(),
                bucket.to_string(),
                n.to_string(),
            ]);
        }
    }
    if !t.is_empty() {
        text.push('\n');
        text.push_str(&t.render());
    }
    Ok(Out::new(render::inspect_json(day, window, &r), text))
}
