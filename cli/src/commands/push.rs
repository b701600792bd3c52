//! AdminService commands on a service's push target: set, get, clear.

use rebound_proto::v1 as pb;
use serde_json::json;

use super::{malformed, Ctx, Out};
use crate::{
    args::PushTargetArgs,
    error::CliError,
    render::{self, time_cell},
    table::key_values,
};

/// The target as text: one line per field, headers and secrets one per line under their key.
fn push_target_out(service: &str, t: &pb::PushTarget) -> Out {
    let mut headers: Vec<(&String, &String)> = t.headers.iter().collect();
    headers.sort();
    let mut pairs: Vec<(&str, String)> = vec![
        ("service", service.to_string()),
        ("url", t.url.clone()),
        (
            "request_timeout",
            t.timeout.as_ref().map_or("-".into(), render::duration_text),
        ),
        (
            "max_concurrent",
            t.max_concurrent.map_or("-".into(), |n| n.to_string()),
        ),
    ];
    if headers.is_empty() {
        pairs.push(("headers", "-".into()));
    }
    for (i, (k, v)) in headers.into_iter().enumerate() {
        pairs.push((if i == 0 { "headers" } else { "" }, format!("{k}: {v}")));
    }
    for (i, s) in t.signing_secrets.iter().enumerate() {
        pairs.push((if i == 0 { "signing_secrets" } else { "" }, s.clone()));
    }
    pairs.push(("updated_at", time_cell(t.updated_at.as_ref())));
    let json = json!({
        "service": service,
        "push_target": render::push_target_json(Some(t)),
    });
    Out::new(json, key_values(&pairs))
}

pub(super) async fn push_target_set(ctx: &Ctx, a: &PushTargetArgs) -> Result<Out, CliError> {
    let target = a.to_proto().map_err(CliError::usage)?;
    let request = pb::SetPushTargetRequest {
        service: a.service.clone(),
        target: Some(target),
    };
    let r = ctx
        .call(ctx.admin().set_push_target(ctx.req(request)))
        .await?;
    let t = r
        .target
        .ok_or_else(|| malformed("no target in the answer"))?;
    Ok(push_target_out(&a.service, &t))
}

pub(super) async fn push_target_get(ctx: &Ctx, service: &str) -> Result<Out, CliError> {
    let request = pb::GetPushTargetRequest {
        service: service.into(),
    };
    let t = ctx
        .call(ctx.admin().get_push_target(ctx.req(request)))
        .await?;
    Ok(push_target_out(service, &t))
}

pub(super) async fn push_target_clear(ctx: &Ctx, service: &str) -> Result<Out, CliError> {
    let request = pb::ClearPushTargetRequest {
        service: service.into(),
    };
    let r = ctx
        .call(ctx.admin().clear_push_target(ctx.req(request)))
        .await?;
    Ok(clear_out(service, r.cleared))
}

fn clear_out(service: &str, cleared: bool) -> Out {
    let text = if cleared {
        format!(
            "{service}: push target cleared; its retries go to Subscribe streams again (every \
             node within the settings refresh interval)\ncleared: yes\n"
        )
    } else {
        format!("{service} had no push target\ncleared: no\n")
    };
    Out::new(json!({ "service": service, "cleared": cleared }), text)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn a_target_shows_every_field_as_the_node_answered_it_masked() {
        let t = pb::PushTarget {
            url: "https://hooks.example.com/rebound".into(),
            timeout: Some(prost_types::Duration {
                seconds: 90,
                nanos: 0,
            }),
            headers: [("X-Tenant", "…"), ("Authorization", "…9f8e")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            signing_secrets: vec!["whsec_…abcd".into(), "whsec_…wxyz".into()],
            max_concurrent: Some(64),
            updated_at: Some(prost_types::Timestamp {
                seconds: 1_796_019_000,
                nanos: 0,
            }),
        };
        let out = push_target_out("orders", &t);
        assert_eq!(
            out.text,
            "service          orders\n\
             url              https://hooks.example.com/rebound\n\
             request_timeout  1m 30s\n\
             max_concurrent   64\n\
             headers          Authorization: …9f8e\n\
             \x20                X-Tenant: …\n\
             signing_secrets  whsec_…abcd\n\
             \x20                whsec_…wxyz\n\
             updated_at       2026-11-30T06:10:00Z\n"
        );
        let j = &out.json["push_target"];
        assert_eq!(out.json["service"], "orders");
        assert_eq!(j["url"], "https://hooks.example.com/rebound");
        assert_eq!(j["timeout"], 90.0);
        assert_eq!(j["headers"]["X-Tenant"], "…");
        assert_eq!(j["headers"]["Authorization"], "…9f8e");
        assert_eq!(j["signing_secrets"][1], "whsec_…wxyz");
        assert_eq!(j["max_concurrent"], 64);
        assert_eq!(j["updated_at"], "2026-11-30T06:10:00Z");

        let bare = push_target_out("orders", &pb::PushTarget::default());
        assert!(bare.text.contains("headers          -\n"), "{}", bare.text);
        assert_eq!(bare.json["push_target"]["max_concurrent"], Value::Null);
    }

    #[test]
    fn clearing_says_whether_there_was_a_target() {
        let out = clear_out("orders", true);
        assert!(out.text.ends_with("cleared: yes\n"), "{}", out.text);
        assert_eq!(out.json["cleared"], true);
        let out = clear_out("orders", false);
        assert!(out.text.contains("had no push target"), "{}", out.text);
        assert_eq!(out.json["cleared"], false);
    }
}
