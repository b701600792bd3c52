//! AdminService commands on dependency holds: list, set, release.

use std::time::Duration;

use rebound_proto::v1 as pb;
use serde_json::{json, Value};

use super::{Ctx, Out};
use crate::{
    error::CliError,
    render::{duration_to_proto, time_cell},
    table::{key_values, Table},
};

use rebound_proto::json::hold_json;

pub(super) async fn holds_list(ctx: &Ctx) -> Result<Out, CliError> {
    let r = ctx
        .call(
            ctx.admin()
                .list_dependency_holds(ctx.req(pb::ListDependencyHoldsRequest {})),
        )
        .await?;
    let text = holds_text(&r.holds);
    Ok(Out::new(holds_json(&r.holds), text))
}

/// The holds as JSON: `{"holds": [...]}`'s list.
pub(super) fn holds_json(holds: &[pb::DependencyHoldInfo]) -> Value {
    json!({ "holds": holds.iter().map(hold_json).collect::<Vec<_>>() })
}

/// The holds as a table, or a line saying there is none.
pub(super) fn holds_text(holds: &[pb::DependencyHoldInfo]) -> String {
    let mut t = Table::new(&["dependency", "until", "source", "held_at", "reason"]).left_aligned();
    for h in holds {
        t.row(vec![
            h.dependency.clone(),
            time_cell(h.until.as_ref()),
            h.source.clone(),
            time_cell(h.held_at.as_ref()),
            h.reason.clone(),
        ]);
    }
    if t.is_empty() {
        "no dependency is held\n".to_string()
    } else {
        t.render()
    }
}

pub(super) async fn holds_set(
    ctx: &Ctx,
    dependency: &str,
    duration: Duration,
    reason: Option<&str>,
) -> Result<Out, CliError> {
    let request = pb::HoldDependencyRequest {
        dependency: dependency.into(),
        duration: Some(duration_to_proto(duration)),
        reason: reason.unwrap_or_default().into(),
    };
    let h = ctx
        .call(ctx.admin().hold_dependency(ctx.req(request)))
        .await?;
    let text = key_values(&[
        ("dependency", h.dependency.clone()),
        ("until", time_cell(h.until.as_ref())),
        ("source", h.source.clone()),
        ("reason", h.reason.clone()),
    ]);
    Ok(Out::new(hold_json(&h), text))
}

pub(super) async fn holds_release(ctx: &Ctx, dependency: &str) -> Result<Out, CliError> {
    let request = pb::ReleaseDependencyRequest {
        dependency: dependency.into(),
    };
    let r = ctx
        .call(ctx.admin().release_dependency(ctx.req(request)))
        .await?;
    let text = if r.released {
        format!("{dependency}: released; its retries go again, at a ramping rate\nreleased: yes\n")
    } else {
        format!("{dependency} was not held\nreleased: no\n")
    };
    Ok(Out::new(
        json!({ "dependency": dependency, "released": r.released }),
        text,
    ))
}
