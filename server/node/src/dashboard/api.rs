//! The `/api/v1/` handlers. Each checks the credential first (nothing is read before), then
//! reads its path, query and body totally (`parse`), calls the same function as the gRPC
//! method, and answers its JSON form (`rebound_proto::json`).

use std::sync::Arc;

use axum::{
    body::Body,
    extract::{rejection::PathRejection, Path, Request, State},
    http::StatusCode,
    response::Response,
};
use rebound_proto::{json as pj, v1 as pb};
use serde_json::{json, Value};

use super::{json_response, live, parse, ApiError, Dashboard, Presented};
use crate::auth::Auth;
use rebound_engine::error::Error;

type Reply = Result<Value, Error>;

/// A push target as `rebound --json` shows it (null when there is none): timeout in seconds,
/// headers as an object by name, the secrets and header values as the node answers them
/// (masked).
pub fn push_target_json(t: Option<&pb::PushTarget>) -> Value {
    let Some(t) = t else { return Value::Null };
    let headers: serde_json::Map<String, Value> = t
        .headers
        .iter()
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    json!({
        "url": t.url,
        "timeout": pj::duration_json(t.timeout.as_ref()),
        "headers": headers,
        "signing_secrets": t.signing_secrets,
        "max_concurrent": t.max_concurrent,
        "updated_at": pj::time_json(t.updated_at.as_ref()),
    })
}

/// ServiceInfo as `rebound --json` shows it: `rebound_proto::json`'s, plus `push_target`
/// (secrets and header values masked; null when the service has none).
fn service_json(s: &pb::ServiceInfo) -> Value {
    let mut v = pj::service_info_json(s);
    v["push_target"] = push_target_json(s.push_target.as_ref());
    v
}

/// The answer of a handler's result.
fn answer(r: Reply) -> Response {
    match r {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => axum::response::IntoResponse::into_response(ApiError::from(e)),
    }
}

/// A path parameter, or INVALID_ARGUMENT when it does not decode (not UTF-8).
fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, Error> {
    p.map(|Path(v)| v)
        .map_err(|e| Error::invalid("path", e.body_text()))
}

/// The body as a JSON object, at most `parse::MAX_BODY_BYTES`.
async fn read_body(body: Body) -> Result<Value, Error> {
    let bytes = axum::body::to_bytes(body, parse::MAX_BODY_BYTES)
        .await
        .map_err(|e| {
            // The limit's error (http-body-util's LengthLimitError), or the connection's.
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(s) = source {
                if s.to_string().contains("length limit") {
                    return parse::too_large();
                }
                source = s.source();
            }
            Error::invalid("body", format!("could not be read: {e}"))
        })?;
    parse::body(&bytes)
}

/// The trace id of a `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), lower case; None when
/// there is none, it is malformed, or all zeros (invalid in W3C trace context).
pub fn trace_id(traceparent: &str) -> Option<String> {
    let id = traceparent.trim().split('-').nth(1)?;
    let hex = id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && id.bytes().any(|b| b != b'0')).then(|| id.to_ascii_lowercase())
}

pub async fn session(State(d): State<Arc<Dashboard>>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    answer((|| {
        let p = Presented::of(&parts);
        let caller = d.caller(&p)?;
        Ok(json!({
            "auth_required": d.auth.is_on(),
            "credential": caller.as_ref().map(|c| c.name.clone()),
            "admin": caller.as_ref().is_none_or(|c| c.is_admin()),
            "services": caller.as_ref().and_then(|c| c.services()),
            "node_id": d.handle.node_id(),
            "version": env!("CARGO_PKG_VERSION"),
            "window_seconds": d.window_seconds,
            "trace_url_template": d.trace_url_template,
        }))
    })())
}

/// This node's counters: every service for an admin or an all-services credential (or with
/// authentication off), else the credential's own services.
pub async fn live(State(d): State<Arc<Dashboard>>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    answer((|| {
        let p = Presented::of(&parts);
        let caller = d.caller(&p)?;
        parse::Query::parse(parts.uri.query(), &[])?;
        let caller = caller.as_deref();
        let all = caller.is_none_or(|c| c.is_admin());
        let mut v = live::snapshot(d.handle.hub_stats(), |s| {
            all || Auth::may_use(caller, "service", s).is_ok()
        });
        v["at"] = pj::time_json(Some(&rebound_proto::time::ts(d.handle.now_ms())));
        v["node_id"] = json!(d.handle.node_id());
        Ok(v)
    })())
}

pub async fn services(State(d): State<Arc<Dashboard>>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    answer(
        async {
            d.admin_call(&Presented::of(&parts))?;
            parse::Query::parse(parts.uri.query(), &[])?;
            let r = d.handle.list_services().await?;
            Ok(json!({
                "services": r.services.iter().map(service_json).collect::<Vec<_>>(),
            }))
        }
        .await,
    )
}

pub async fn stats(State(d): State<Arc<Dashboard>>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    answer(
        async {
            let p = Presented::of(&parts);
            d.admin_call(&p)?;
            let q = parse::Query::parse(parts.uri.query(), &["service"])?;
            let r = pb::GetStatsRequest {
                service: q.str("service").unwrap_or("").to_string(),
                local_only: false,
            };
            let r = d.handle.stats(&r, p.authorization()).await?;
            Ok(json!({
                "services": r.services.iter().map(pj::service_stats_json).collect::<Vec<_>>(),
                "nodes": r.nodes.iter().map(pj::node_stats_json).collect::<Vec<_>>(),
                "holds": r.holds.iter().map(pj::hold_json).collect::<Vec<_>>(),
            }))
        }
        .await,
    )
}

/// GetRing, plus for an admin every node's statistics (`node_stats`; null otherwise).
pub async fn ring(State(d): State<Arc<Dashboard>>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    answer(
        async {
            let p = Presented::of(&parts);
            let caller = d.caller(&p)?;
            parse::Query::parse(parts.uri.query(), &[])?;
            let a = &d.handle;
            let ring = a.ring().await?;
            let mut v = pj::ring_json(&ring);
            v["node_stats"] = if caller.as_deref().is_none_or(|c| c.is_admin()) {
                let (_, nodes) = a.nodes("", p.authorization()).await?;
                json!(nodes.iter().map(pj::node_stats_json).collect::<Vec<_>>())
            } else {
                Value::Null
            };
            Ok(v)
        }
        .await,
    )
}

pub async fn service(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    let (parts, _) = req.into_parts();
    answer(
        async {
            d.admin_call(&Presented::of(&parts))?;
            let service = path(service)?;
            parse::Query::parse(parts.uri.query(), &[])?;
            Ok(service_json(&d.handle.get_service(&service).await?))
        }
        .await,
    )
}

/// The common start of an admin `POST`: the credential, the path, the body.
async fn admin_post<T>(
    d: &Dashboard,
    p: Result<Path<T>, PathRejection>,
    req: Request,
) -> Result<(T, Value), Error> {
    let (parts, body) = req.into_parts();
    d.admin_call(&Presented::of(&parts))?;
    let p = path(p)?;
    parse::Query::parse(parts.uri.query(), &[])?;
    Ok((p, read_body(body).await?))
}

async fn set_paused(
    d: Arc<Dashboard>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
    paused: bool,
) -> Response {
    answer(
        async {
            let (service, body) = admin_post(&d, service, req).await?;
            parse::empty(&body)?;
            Ok(service_json(&d.handle.set_paused(&service, paused).await?))
        }
        .await,
    )
}

pub async fn pause(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    set_paused(d, service, req, true).await
}

pub async fn resume(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    set_paused(d, service, req, false).await
}

pub async fn policy(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    answer(
        async {
            let (service, body) = admin_post(&d, service, req).await?;
            let policy = parse::policy(&body)?;
            let s = d
                .handle
                .store_policy(&pb::SetServicePolicyRequest { service, policy })
                .await?;
            Ok(service_json(&d.handle.service_info(&s)))
        }
        .await,
    )
}

pub async fn limits(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    answer(
        async {
            let (service, body) = admin_post(&d, service, req).await?;
            let limits = parse::limits(&body)?;
            let s = d
                .handle
                .store_limits(&pb::SetServiceLimitsRequest { service, limits })
                .await?;
            Ok(service_json(&d.handle.service_info(&s)))
        }
        .await,
    )
}

/// GetPushTarget: `{"service", "push_target"}`, NOT_FOUND when the service has none.
pub async fn push_target(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    let (parts, _) = req.into_parts();
    answer(
        async {
            d.admin_call(&Presented::of(&parts))?;
            let service = path(service)?;
            parse::Query::parse(parts.uri.query(), &[])?;
            let t = d
                .handle
                .get_push_target(&pb::GetPushTargetRequest {
                    service: service.clone(),
                })
                .await?;
            Ok(json!({"service": service, "push_target": push_target_json(Some(&t))}))
        }
        .await,
    )
}

/// SetPushTarget: `{"service", "push_target"}` as stored, secrets and header values masked.
pub async fn set_push_target(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    answer(
        async {
            let (service, body) = admin_post(&d, service, req).await?;
            let target = parse::push_target(&body)?;
            let r = d
                .handle
                .set_push_target(&pb::SetPushTargetRequest {
                    service: service.clone(),
                    target,
                })
                .await?;
            Ok(json!({"service": service, "push_target": push_target_json(r.target.as_ref())}))
        }
        .await,
    )
}

/// ClearPushTarget: `{"service", "cleared"}`.
pub async fn clear_push_target(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    answer(
        async {
            let (service, body) = admin_post(&d, service, req).await?;
            parse::empty(&body)?;
            let r = d
                .handle
                .clear_push_target(&pb::ClearPushTargetRequest {
                    service: service.clone(),
                })
                .await?;
            Ok(json!({"service": service, "cleared": r.cleared}))
        }
        .await,
    )
}

pub async fn purge(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    answer(
        async {
            let (service, body) = admin_post(&d, service, req).await?;
            let r = parse::purge(&service, &body)?;
            Ok(pj::purge_service_json(&d.handle.purge_service(&r).await?))
        }
        .await,
    )
}

pub async fn dead_letters(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    let (parts, _) = req.into_parts();
    answer(
        async {
            d.admin_call(&Presented::of(&parts))?;
            let service = path(service)?;
            let q = parse::Query::parse(
                parts.uri.query(),
                &[
                    "from",
                    "to",
                    "error_contains",
                    "page_size",
                    "page_token",
                    "include_redriven",
                ],
            )?;
            let r = pb::ListDeadLettersRequest {
                service,
                from: q.time("from")?,
                to: q.time("to")?,
                error_contains: q.str("error_contains").unwrap_or("").to_string(),
                page_size: q.u32("page_size")?.unwrap_or(0),
                page_token: q.str("page_token").unwrap_or("").to_string(),
                include_redriven: q.bool("include_redriven")?,
            };
            let r = d.handle.list_dead_letters(&r).await?;
            Ok(json!({
                "dead_letters": r.dead_letters.iter().map(pj::dead_letter_json).collect::<Vec<_>>(),
                "next_page_token": (!r.next_page_token.is_empty()).then_some(r.next_page_token),
            }))
        }
        .await,
    )
}

pub async fn redrive(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    answer(
        async {
            let (service, body) = admin_post(&d, service, req).await?;
            let r = match parse::redrive(&service, &body)? {
                parse::Redrive::Filter(r) => d.handle.redrive(&r).await?,
                parse::Redrive::Letters {
                    letters,
                    delay,
                    max_per_second,
                } => {
                    d.handle
                        .redrive_selected(&service, &letters, delay.as_ref(), max_per_second)
                        .await?
                }
            };
            Ok(pj::redrive_json(&r))
        }
        .await,
    )
}

pub async fn purge_dead_letters(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    answer(
        async {
            let (service, body) = admin_post(&d, service, req).await?;
            let r = parse::purge_dead_letters(&service, &body)?;
            let r = d.handle.purge_dead_letters(&r).await?;
            Ok(json!({ "purged": r.purged }))
        }
        .await,
    )
}

/// GetRetry, with the trace id of the enqueue that started it and its link.
pub async fn retry(
    State(d): State<Arc<Dashboard>>,
    ids: Result<Path<(String, String)>, PathRejection>,
    req: Request,
) -> Response {
    let (parts, _) = req.into_parts();
    answer(
        async {
            let caller = d.caller(&Presented::of(&parts))?;
            let (service, transaction_id) = path(ids)?;
            parse::Query::parse(parts.uri.query(), &[])?;
            let (state, retry) =
                crate::api::lookup_retry(&d.handle, caller.as_deref(), &service, &transaction_id)
                    .await?;
            let trace_id = trace_id(&state.trace.traceparent);
            let mut v = pj::retry_json(&retry);
            v["trace_url"] = json!(trace_id.as_ref().and_then(|id| d
                .trace_url_template
                .as_ref()
                .map(|t| t.replace("{trace_id}", id))));
            v["trace_id"] = json!(trace_id);
            Ok(v)
        }
        .await,
    )
}

/// A service's retries (ListRetries) of one `status` (scheduled when not given), for anyone
/// allowed the service. `attributes` is a JSON object of strings (`{"customer":"42"}`), every
/// pair of which must match.
pub async fn retries(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    let (parts, _) = req.into_parts();
    answer(
        async {
            let p = Presented::of(&parts);
            let caller = d.caller(&p)?;
            let service = path(service)?;
            let q = parse::Query::parse(
                parts.uri.query(),
                &[
                    "status",
                    "due_after",
                    "due_before",
                    "attributes",
                    "dependency",
                    "error_contains",
                    "saga_transaction_id",
                    "page_size",
                    "page_token",
                ],
            )?;
            let statuses = match q.str("status") {
                None => Vec::new(),
                Some(name) => {
                    let upper = name.to_ascii_uppercase();
                    let s = pb::RetryStatus::from_str_name(&format!("RETRY_STATUS_{upper}"))
                        .filter(|s| *s != pb::RetryStatus::Unspecified)
                        .ok_or_else(|| {
                            Error::invalid(
                                "status",
                                "must be SCHEDULED, IN_FLIGHT, DEAD, SUCCEEDED or CANCELLED",
                            )
                        })?;
                    vec![s as i32]
                }
            };
            let r = pb::ListRetriesRequest {
                service,
                statuses,
                due_after: q.time("due_after")?,
                due_before: q.time("due_before")?,
                attributes: q.string_map("attributes")?,
                dependency: q.str("dependency").unwrap_or("").to_string(),
                error_contains: q.str("error_contains").unwrap_or("").to_string(),
                saga_transaction_id: q.str("saga_transaction_id").unwrap_or("").to_string(),
                page_size: q.u32("page_size")?.unwrap_or(0),
                page_token: q.str("page_token").unwrap_or("").to_string(),
                local_only: false,
            };
            let r = crate::api::list_retries(&d.handle, caller.as_deref(), &r, p.authorization())
                .await?;
            Ok(json!({
                "retries": r.retries.iter().map(pj::retry_summary_json).collect::<Vec<_>>(),
                "next_page_token": (!r.next_page_token.is_empty()).then_some(r.next_page_token),
            }))
        }
        .await,
    )
}

/// ActOnRetries from the retries page: the caller needs the service, as for the listing.
pub async fn act_on_retries(
    State(d): State<Arc<Dashboard>>,
    service: Result<Path<String>, PathRejection>,
    req: Request,
) -> Response {
    let (parts, body) = req.into_parts();
    answer(
        async {
            let caller = d.caller(&Presented::of(&parts))?;
            let service = path(service)?;
            parse::Query::parse(parts.uri.query(), &[])?;
            let body = read_body(body).await?;
            let r = parse::act(&service, &body)?;
            let r = crate::api::act_on_retries(&d.handle, caller.as_deref(), &r).await?;
            Ok(pj::act_json(&r))
        }
        .await,
    )
}

pub async fn window(
    State(d): State<Arc<Dashboard>>,
    ids: Result<Path<(String, String)>, PathRejection>,
    req: Request,
) -> Response {
    let (parts, _) = req.into_parts();
    answer(
        async {
            d.admin_call(&Presented::of(&parts))?;
            let (day, window) = path(ids)?;
            parse::Query::parse(parts.uri.query(), &[])?;
            let window: u32 = window.parse().map_err(|_| {
                Error::invalid(
                    "window",
                    format!(
                        "must be a whole number (the window's index in its day), got {window:?}"
                    ),
                )
            })?;
            let r = d
                .handle
                .inspect_window(&pb::InspectWindowRequest {
                    day: day.clone(),
                    window,
                })
                .await?;
            Ok(pj::inspect_json(&day, window, &r))
        }
        .await,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_ids_come_from_well_formed_traceparents_only() {
        assert_eq!(
            trace_id("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(trace_id(""), None);
        assert_eq!(
            trace_id("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(
            trace_id("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(trace_id("00-4bf92f3577b34da6a3ce929d0e0e47é6-0-01"), None);
    }

    proptest::proptest! {
        #[test]
        fn trace_id_is_total(s in "(?s).{0,80}") {
            if let Some(id) = trace_id(&s) {
                proptest::prop_assert_eq!(id.len(), 32);
            }
        }
    }
}
