//! `rebound subscribe`: a stand-in executor. It opens one `Subscribe` stream, prints each
//! delivery as it arrives and acknowledges it with the chosen outcome, until `--count`
//! deliveries, `--wait` without one, or Ctrl-C.

use std::time::Duration;

use rebound_proto::{json as pj, v1 as pb};
use serde_json::{json, Value};
use tokio_stream::StreamExt;

use super::{emit, human, Ctx, Out};
use crate::{
    args::{AckOutcomeArg, SubscribeArgs},
    error::CliError,
    render::{duration_to_proto, payload_text, time_cell},
    table::{clean, truncate},
};

/// Most characters of a payload shown on a delivery's line.
const PAYLOAD_SHOWN: usize = 120;

pub(super) async fn subscribe(ctx: &Ctx, a: &SubscribeArgs) -> Result<Out, CliError> {
    if a.retry_after.is_some() && a.outcome != AckOutcomeArg::Retry {
        return Err(CliError::usage("--retry-after goes with --outcome retry"));
    }
    let outcome = a.outcome.to_proto();
    let executor_id = a
        .executor_id
        .clone()
        .unwrap_or_else(|| format!("rebound-cli-{}", std::process::id()));
    let max_in_flight = match a.count {
        0 => a.max_in_flight,
        n => a.max_in_flight.min(n),
    }
    .max(1);
    let request = pb::SubscribeRequest {
        service: a.service.clone(),
        executor_id,
        max_in_flight,
    };
    // The stream lives as long as it is wanted: no deadline on it (each ack has --timeout).
    let mut r = tonic::Request::new(request);
    if let Some(auth) = &ctx.authorization {
        r.metadata_mut().insert("authorization", auth.clone());
    }
    let mut stream = ctx
        .call(ctx.executor().subscribe(r))
        .await
        .map_err(|e| e.context("Subscribe"))?;
    let outcome_name = outcome.as_str_name().trim_start_matches("ACK_OUTCOME_");
    let mut received: Vec<Value> = Vec::new();
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        if a.count > 0 && received.len() >= a.count as usize {
            break;
        }
        let wait = a.wait.unwrap_or(Duration::MAX);
        let next = tokio::select! {
            _ = &mut interrupted => break,
            next = tokio::time::timeout(wait, stream.next()) => next,
        };
        let delivery = match next {
            Err(_) if a.count == 0 => break,
            Err(_) => {
                return Err(CliError::deadline(format!(
                    "{} of {} deliveries of {:?} arrived; none for {} (--wait)",
                    received.len(),
                    a.count,
                    a.service,
                    human(wait)
                )))
            }
            Ok(None) => {
                return Err(CliError::unavailable(
                    "the node closed the Subscribe stream (it is stopping?)",
                ))
            }
            Ok(Some(Err(status))) => {
                return Err(CliError::status(&status).context("Subscribe"));
            }
            Ok(Some(Ok(d))) => d,
        };
        let ack = pb::AckRequest {
            delivery_id: delivery.delivery_id.clone(),
            outcome: outcome as i32,
            retry_after: a.retry_after.map(duration_to_proto),
            error: a.error.clone().unwrap_or_default(),
            ..Default::default()
        };
        ctx.call(ctx.executor().ack(ctx.req(ack)))
            .await
            .map_err(|e| e.context("Ack"))?;
        if !ctx.json {
            emit(&format!(
                "{} {} attempt {} due {}: {} -> acked {outcome_name}\n",
                clean(&delivery.service),
                clean(&delivery.transaction_id),
                delivery.attempt,
                time_cell(delivery.due_time.as_ref()),
                truncate(&clean(&payload_text(&delivery.payload)), PAYLOAD_SHOWN),
            ))?;
        }
        let mut doc = pj::delivery_json(&delivery);
        doc["acked"] = json!(outcome_name);
        received.push(doc);
    }
    let text = if received.is_empty() {
        format!("no delivery of {:?} arrived\n", a.service)
    } else {
        String::new()
    };
    let json = json!({ "service": a.service, "deliveries": received });
    Ok(Out::new(json, text))
}
