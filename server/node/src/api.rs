//! gRPC handlers. They stay thin: decode and validate (the engine's `validate`), check that
//! the caller may use the service the call names, call the engine's `Handle`, encode (the
//! engine's `wire`). Who the caller is was settled before the body was read, by the tower
//! layer `auth::AuthLayer`, which leaves it in the request's extensions (`auth::Caller`).
//! Errors become `tonic::Status` only through `From<Error>`.

use std::pin::Pin;

use futures::{stream, Stream, StreamExt};
use opentelemetry::trace::TraceContextExt;
use rebound_proto::v1::{self as pb};
use tonic::{metadata::MetadataMap, Request, Response, Status};
use tracing::{Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::auth::{Auth, Caller, Credential};
use rebound_engine::{
    dispatch::Resolution, error::Error, handle::Handle, spans, trace_context, validate, wire,
};
use rebound_store::context::TextContext;

/// The trace context of a request's `traceparent` / `tracestate` metadata (empty: none or
/// invalid).
fn request_context(m: &MetadataMap) -> TextContext {
    let get = |k: &str| m.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    trace_context::from_text(get("traceparent"), get("tracestate"))
}

/// An enqueue's own `trace_context` (empty: none, or invalid, which validation refuses).
fn item_context(r: &pb::EnqueueRetryRequest) -> TextContext {
    r.trace_context
        .as_ref()
        .map(|t| trace_context::from_text(&t.traceparent, &t.tracestate))
        .unwrap_or_default()
}

/// The context stored with the retry: its `send` span's when traced, else the item's own,
/// else the request's.
fn stored_context(span: &Span, own: TextContext, request: &TextContext) -> TextContext {
    if !span.is_disabled() {
        let sc = span.context().span().span_context().clone();
        if sc.is_valid() {
            return trace_context::of(&sc);
        }
    }
    if own.is_empty() {
        request.clone()
    } else {
        own
    }
}

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct Api {
    pub handle: Handle,
    pub max_payload_bytes: usize,
    pub max_batch_items: usize,
}

/// How many acks of one `AckBatch` are settled concurrently: enough that their state reads
/// and writes queue in the coalescing layer over the store and go out as `IN` reads of up to
/// 64 rows and batches of up to 10, rather than one request per ack.
const BATCH_CONCURRENCY: usize = 256;

#[tonic::async_trait]
impl pb::retry_service_server::RetryService for Api {
    async fn enqueue_retry(
        &self,
        request: Request<pb::EnqueueRetryRequest>,
    ) -> Result<Response<pb::EnqueueRetryResponse>, Status> {
        let (metadata, extensions, request) = request.into_parts();
        let service = request.service.clone();
        let span = spans::send(&service, &request.transaction_id, &item_context(&request));
        let checked = (|| {
            let caller = Caller::of(&extensions)?;
            let mut input = validate::enqueue("", request, self.max_payload_bytes)?;
            Auth::may_use(caller, "service", &input.service)?;
            let own = std::mem::take(&mut input.trace);
            input.trace = stored_context(&span, own, &request_context(&metadata));
            Ok(input)
        })();
        let out = self
            .handle
            .enqueue(&service, &span, checked)
            .instrument(span.clone())
            .await;
        Ok(Response::new(wire::enqueue_pb(out?)))
    }

    async fn enqueue_retry_batch(
        &self,
        request: Request<pb::EnqueueRetryBatchRequest>,
    ) -> Result<Response<pb::EnqueueRetryBatchResponse>, Status> {
        let (metadata, extensions, request) = request.into_parts();
        let caller = Caller::of(&extensions)?;
        let requests = request.requests;
        validate::enqueue_batch_len(requests.len(), self.max_batch_items)?;
        // Validate every item first; a transaction that appears twice is refused after its
        // first appearance, since the two would race each other.
        let mut keys = validate::BatchKeys::default();
        let context = request_context(&metadata);
        let items = requests
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let service = r.service.clone();
                let span = spans::send(&r.service, &r.transaction_id, &item_context(&r));
                let checked = (|| {
                    let mut input =
                        validate::enqueue(&format!("requests[{i}]."), r, self.max_payload_bytes)?;
                    Auth::may_use(caller, &format!("requests[{i}].service"), &input.service)?;
                    keys.first(i, &input)?;
                    let own = std::mem::take(&mut input.trace);
                    input.trace = stored_context(&span, own, &context);
                    Ok(input)
                })();
                (service, span, checked)
            })
            .collect();
        let results = self.handle.enqueue_batch(items).await;
        Ok(Response::new(pb::EnqueueRetryBatchResponse {
            results: results.into_iter().map(wire::enqueue_result_pb).collect(),
        }))
    }

    async fn get_retry(
        &self,
        request: Request<pb::GetRetryRequest>,
    ) -> Result<Response<pb::Retry>, Status> {
        let (_, extensions, r) = request.into_parts();
        let caller = Caller::of(&extensions)?;
        let (_, retry) = lookup_retry(&self.handle, caller, &r.service, &r.transaction_id).await?;
        Ok(Response::new(retry))
    }

    async fn list_retries(
        &self,
        request: Request<pb::ListRetriesRequest>,
    ) -> Result<Response<pb::ListRetriesResponse>, Status> {
        let (metadata, extensions, r) = request.into_parts();
        let caller = Caller::of(&extensions)?;
        // Peers are asked for their retries in flight with the caller's own credential.
        let authorization = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok(Response::new(
            list_retries(&self.handle, caller, &r, authorization).await?,
        ))
    }

    async fn act_on_retries(
        &self,
        request: Request<pb::ActOnRetriesRequest>,
    ) -> Result<Response<pb::ActOnRetriesResponse>, Status> {
        let (_, extensions, r) = request.into_parts();
        let caller = Caller::of(&extensions)?;
        Ok(Response::new(
            act_on_retries(&self.handle, caller, &r).await?,
        ))
    }

    async fn cancel_retry(
        &self,
        request: Request<pb::CancelRetryRequest>,
    ) -> Result<Response<pb::CancelRetryResponse>, Status> {
        let (_, extensions, r) = request.into_parts();
        let caller = Caller::of(&extensions)?;
        validate::service("service", &r.service)?;
        validate::transaction_id("transaction_id", &r.transaction_id)?;
        Auth::may_use(caller, "service", &r.service)?;
        let (status, cancelled) = self.handle.cancel(&r.service, &r.transaction_id).await?;
        Ok(Response::new(pb::CancelRetryResponse {
            status: wire::status_pb(status) as i32,
            cancelled,
        }))
    }
}

/// The executor API: subscriptions, acknowledgements and deadline extensions.
#[derive(Debug, Clone)]
pub struct ExecutorApi {
    pub handle: Handle,
}

type DeliveryStream = Pin<Box<dyn Stream<Item = Result<pb::Delivery, Status>> + Send>>;

impl ExecutorApi {
    /// One ack: the caller's credential checked against the delivery's service, then
    /// decoded, checked and applied by the engine.
    async fn ack_one(
        &self,
        caller: Option<&Credential>,
        r: &pb::AckRequest,
        prefix: &str,
    ) -> Result<Resolution, Error> {
        // With authentication off (no caller) every service may be used: no lookup.
        if caller.is_some() {
            if let Some(service) = self.handle.service_of(&r.delivery_id) {
                Auth::may_use(caller, &format!("{prefix}delivery_id"), &service)?;
            }
        }
        self.handle.ack_request(r, prefix).await
    }
}

#[tonic::async_trait]
impl pb::executor_service_server::ExecutorService for ExecutorApi {
    type SubscribeStream = DeliveryStream;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let (_, extensions, r) = request.into_parts();
        let caller = Caller::of(&extensions)?;
        validate::subscribe(&r)?;
        Auth::may_use(caller, "service", &r.service)?;
        let sub = self
            .handle
            .subscribe(&r.service, &r.executor_id, r.max_in_flight)?;
        tracing::info!(service = %r.service, executor_id = %r.executor_id, subscriber = sub.id(), max_in_flight = r.max_in_flight, "executor subscribed");
        Ok(Response::new(Box::pin(
            sub.map(|d| Ok(wire::delivery_pb(d))),
        )))
    }

    async fn ack(&self, r: Request<pb::AckRequest>) -> Result<Response<pb::AckResponse>, Status> {
        let caller = Caller::of(r.extensions())?;
        let res = self.ack_one(caller, r.get_ref(), "").await?;
        Ok(Response::new(wire::ack_response(res)))
    }

    async fn ack_batch(
        &self,
        r: Request<pb::AckBatchRequest>,
    ) -> Result<Response<pb::AckBatchResponse>, Status> {
        let (_, extensions, r) = r.into_parts();
        let caller = Caller::of(&extensions)?;
        let acks = r.acks;
        validate::ack_batch_len(acks.len())?;
        // Concurrently, so the state reads and writes of the batch coalesce into few Cassandra
        // requests; `buffered` keeps the results in request order.
        let results = stream::iter(acks.into_iter().enumerate())
            .map(|(i, a)| async move {
                wire::ack_result_pb(self.ack_one(caller, &a, &format!("acks[{i}].")).await)
            })
            .buffered(BATCH_CONCURRENCY)
            .collect()
            .await;
        Ok(Response::new(pb::AckBatchResponse { results }))
    }

    async fn extend_deadline(
        &self,
        r: Request<pb::ExtendDeadlineRequest>,
    ) -> Result<Response<pb::ExtendDeadlineResponse>, Status> {
        let (_, extensions, r) = r.into_parts();
        let caller = Caller::of(&extensions)?;
        validate::delivery_id("delivery_id", &r.delivery_id)?;
        let ext = validate::extension("extension", r.extension.as_ref())?;
        if let Some(service) = self.handle.service_of(&r.delivery_id) {
            Auth::may_use(caller, "delivery_id", &service)?;
        }
        let deadline = self.handle.extend(&r.delivery_id, ext)?;
        Ok(Response::new(pb::ExtendDeadlineResponse {
            ack_deadline: Some(rebound_proto::time::ts(deadline)),
        }))
    }

    async fn get_ring(&self, r: Request<pb::GetRingRequest>) -> Result<Response<pb::Ring>, Status> {
        Caller::of(r.extensions())?;
        Ok(Response::new(self.handle.ring().await?))
    }
}

/// GetRetry's checks and read, shared by gRPC and the dashboard: the names are valid, the
/// caller may use the service (`caller` None: authentication is off), then the engine's read
/// of the state row and its chain.
pub async fn lookup_retry(
    handle: &Handle,
    caller: Option<&Credential>,
    service: &str,
    transaction_id: &str,
) -> Result<(rebound_store::TxState, pb::Retry), Error> {
    validate::service("service", service)?;
    validate::transaction_id("transaction_id", transaction_id)?;
    Auth::may_use(caller, "service", service)?;
    handle.get_retry(service, transaction_id).await
}

/// ListRetries for `caller`, who must be allowed the service (the gRPC call and the dashboard's
/// retries page).
pub async fn list_retries(
    handle: &Handle,
    caller: Option<&Credential>,
    r: &pb::ListRetriesRequest,
    authorization: Option<String>,
) -> Result<pb::ListRetriesResponse, Error> {
    validate::service("service", &r.service)?;
    Auth::may_use(caller, "service", &r.service)?;
    handle.list_retries(r, authorization).await
}

/// ActOnRetries for `caller`, who must be allowed the selection's service (the gRPC call and
/// the dashboard's retries page); the history names the caller's credential, or `operator`
/// when authentication is off.
pub async fn act_on_retries(
    handle: &Handle,
    caller: Option<&Credential>,
    r: &pb::ActOnRetriesRequest,
) -> Result<pb::ActOnRetriesResponse, Error> {
    let service = r.selection.as_ref().map_or("", |s| s.service.as_str());
    validate::service("selection.service", service)?;
    Auth::may_use(caller, "selection.service", service)?;
    let actor = caller.map_or("operator", |c| c.name.as_str());
    handle.act_on_retries(r, actor).await
}

/// The operator API (the operator half of the engine's `Handle`).
#[derive(Debug, Clone)]
pub struct AdminApi {
    pub handle: Handle,
}

#[tonic::async_trait]
impl pb::admin_service_server::AdminService for AdminApi {
    async fn list_services(
        &self,
        _r: Request<pb::ListServicesRequest>,
    ) -> Result<Response<pb::ListServicesResponse>, Status> {
        Ok(Response::new(self.handle.list_services().await?))
    }
    async fn get_service(
        &self,
        r: Request<pb::GetServiceRequest>,
    ) -> Result<Response<pb::ServiceInfo>, Status> {
        Ok(Response::new(
            self.handle.get_service(&r.into_inner().service).await?,
        ))
    }
    async fn get_stats(
        &self,
        r: Request<pb::GetStatsRequest>,
    ) -> Result<Response<pb::GetStatsResponse>, Status> {
        // Peers are asked with the caller's own credential.
        let authorization = r
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok(Response::new(
            self.handle.stats(&r.into_inner(), authorization).await?,
        ))
    }
    async fn pause_service(
        &self,
        r: Request<pb::PauseServiceRequest>,
    ) -> Result<Response<pb::PauseServiceResponse>, Status> {
        let s = self
            .handle
            .set_paused(&r.into_inner().service, true)
            .await?;
        Ok(Response::new(pb::PauseServiceResponse { service: Some(s) }))
    }
    async fn resume_service(
        &self,
        r: Request<pb::ResumeServiceRequest>,
    ) -> Result<Response<pb::ResumeServiceResponse>, Status> {
        let s = self
            .handle
            .set_paused(&r.into_inner().service, false)
            .await?;
        Ok(Response::new(pb::ResumeServiceResponse {
            service: Some(s),
        }))
    }
    async fn set_service_policy(
        &self,
        r: Request<pb::SetServicePolicyRequest>,
    ) -> Result<Response<pb::SetServicePolicyResponse>, Status> {
        Ok(Response::new(
            self.handle.set_policy(&r.into_inner()).await?,
        ))
    }
    async fn set_service_limits(
        &self,
        r: Request<pb::SetServiceLimitsRequest>,
    ) -> Result<Response<pb::SetServiceLimitsResponse>, Status> {
        Ok(Response::new(
            self.handle.set_limits(&r.into_inner()).await?,
        ))
    }
    async fn set_push_target(
        &self,
        r: Request<pb::SetPushTargetRequest>,
    ) -> Result<Response<pb::SetPushTargetResponse>, Status> {
        Ok(Response::new(
            self.handle.set_push_target(&r.into_inner()).await?,
        ))
    }
    async fn get_push_target(
        &self,
        r: Request<pb::GetPushTargetRequest>,
    ) -> Result<Response<pb::PushTarget>, Status> {
        Ok(Response::new(
            self.handle.get_push_target(&r.into_inner()).await?,
        ))
    }
    async fn clear_push_target(
        &self,
        r: Request<pb::ClearPushTargetRequest>,
    ) -> Result<Response<pb::ClearPushTargetResponse>, Status> {
        Ok(Response::new(
            self.handle.clear_push_target(&r.into_inner()).await?,
        ))
    }
    async fn hold_dependency(
        &self,
        r: Request<pb::HoldDependencyRequest>,
    ) -> Result<Response<pb::DependencyHoldInfo>, Status> {
        Ok(Response::new(
            self.handle.hold_dependency(&r.into_inner()).await?,
        ))
    }
    async fn release_dependency(
        &self,
        r: Request<pb::ReleaseDependencyRequest>,
    ) -> Result<Response<pb::ReleaseDependencyResponse>, Status> {
        Ok(Response::new(
            self.handle.release_dependency(&r.into_inner()).await?,
        ))
    }
    async fn list_dependency_holds(
        &self,
        _r: Request<pb::ListDependencyHoldsRequest>,
    ) -> Result<Response<pb::ListDependencyHoldsResponse>, Status> {
        Ok(Response::new(self.handle.list_dependency_holds().await?))
    }
    async fn purge_service(
        &self,
        r: Request<pb::PurgeServiceRequest>,
    ) -> Result<Response<pb::PurgeServiceResponse>, Status> {
        Ok(Response::new(
            self.handle.purge_service(&r.into_inner()).await?,
        ))
    }
    async fn list_dead_letters(
        &self,
        r: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        Ok(Response::new(
            self.handle.list_dead_letters(&r.into_inner()).await?,
        ))
    }
    async fn redrive_dead_letters(
        &self,
        r: Request<pb::RedriveDeadLettersRequest>,
    ) -> Result<Response<pb::RedriveDeadLettersResponse>, Status> {
        Ok(Response::new(self.handle.redrive(&r.into_inner()).await?))
    }
    async fn purge_dead_letters(
        &self,
        r: Request<pb::PurgeDeadLettersRequest>,
    ) -> Result<Response<pb::PurgeDeadLettersResponse>, Status> {
        Ok(Response::new(
            self.handle.purge_dead_letters(&r.into_inner()).await?,
        ))
    }
    async fn inspect_window(
        &self,
        r: Request<pb::InspectWindowRequest>,
    ) -> Result<Response<pb::InspectWindowResponse>, Status> {
        Ok(Response::new(
            self.handle.inspect_window(&r.into_inner()).await?,
        ))
    }
}
