//! gRPC handlers. They stay thin: decode and validate (module `validate`), call the component,
//! encode. Errors become `tonic::Status` only through `From<ApiError>`.

use std::{collections::HashMap, pin::Pin, sync::Arc};

use futures::{stream, Stream, StreamExt};
use rebound_proto::v1::{self as pb};
use tonic::{Request, Response, Status};

use crate::{
    error::ApiError,
    store::{self, TxState},
    validate,
    window::day_to_date,
    writer::{EnqueueOutcome, Writer},
};

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct Api {
    pub writer: Arc<Writer>,
    pub max_payload_bytes: usize,
    pub max_batch_items: usize,
}

/// How many items of one batch are written concurrently.
const BATCH_CONCURRENCY: usize = 32;

fn ts(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

fn dur(d: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

fn status_pb(s: store::Status) -> pb::RetryStatus {
    match s {
        store::Status::Scheduled => pb::RetryStatus::Scheduled,
        store::Status::Succeeded => pb::RetryStatus::Succeeded,
        store::Status::Dead => pb::RetryStatus::Dead,
        store::Status::Cancelled => pb::RetryStatus::Cancelled,
    }
}

pub fn policy_pb(p: &crate::policy::RetryPolicy) -> pb::RetryPolicy {
    pb::RetryPolicy {
        max_attempts: Some(p.max_attempts),
        initial_backoff: Some(dur(p.initial_backoff)),
        max_backoff: Some(dur(p.max_backoff)),
        multiplier: Some(p.multiplier),
        jitter: Some(p.jitter),
        max_retry_duration: p.max_retry_duration.map(dur),
        ack_timeout: Some(dur(p.ack_timeout)),
        max_deliveries_per_attempt: Some(p.max_deliveries_per_attempt),
    }
}

fn retry_pb(s: TxState) -> pb::Retry {
    pb::Retry {
        status: status_pb(s.status) as i32,
        attempt: s.attempt,
        generation: s.generation as u64,
        due_time: Some(ts(s.due_at_ms)),
        last_error: s.last_error,
        payload: s.payload,
        attributes: s.attributes.into_iter().collect(),
        policy: Some(policy_pb(&s.policy)),
        first_enqueued_at: Some(ts(s.first_enqueued_at_ms)),
        last_enqueued_at: Some(ts(s.last_enqueued_at_ms)),
        updated_at: Some(ts(s.updated_at_ms)),
        location: s.location.map(|l| pb::Location {
            day: day_to_date(l.window.day).to_string(),
            window: l.window.index,
            instance: l.instance,
            bucket: l.bucket,
        }),
        enqueue_count: s.enqueue_count,
        delivery_count: s.delivery_count,
        service: s.service,
        transaction_id: s.transaction_id,
    }
}

fn enqueue_pb(o: EnqueueOutcome) -> pb::EnqueueRetryResponse {
    pb::EnqueueRetryResponse {
        transaction_id: o.transaction_id,
        due_time: Some(ts(o.due_at_ms)),
        generation: o.generation as u64,
        deduplicated: o.deduplicated,
    }
}

#[tonic::async_trait]
impl pb::retry_service_server::RetryService for Api {
    async fn enqueue_retry(
        &self,
        request: Request<pb::EnqueueRetryRequest>,
    ) -> Result<Response<pb::EnqueueRetryResponse>, Status> {
        let input = validate::enqueue("", request.into_inner(), self.max_payload_bytes)?;
        let out = self.writer.enqueue(input).await?;
        Ok(Response::new(enqueue_pb(out)))
    }

    async fn enqueue_retry_batch(
        &self,
        request: Request<pb::EnqueueRetryBatchRequest>,
    ) -> Result<Response<pb::EnqueueRetryBatchResponse>, Status> {
        let requests = request.into_inner().requests;
        if requests.len() > self.max_batch_items {
            return Err(ApiError::invalid(
                "requests",
                format!(
                    "has {} items, over the limit of {} (REBOUND_MAX_BATCH_ITEMS)",
                    requests.len(),
                    self.max_batch_items
                ),
            )
            .into());
        }
        // Validate every item first; a transaction that appears twice is refused after its
        // first appearance, since the two would race each other.
        let mut seen: HashMap<(String, String), usize> = HashMap::new();
        let checked: Vec<Result<validate::EnqueueInput, ApiError>> = requests
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let input =
                    validate::enqueue(&format!("requests[{i}]."), r, self.max_payload_bytes)?;
                let key = (input.service.clone(), input.transaction_id.clone());
                if let Some(first) = seen.insert(key, i) {
                    return Err(ApiError::invalid(
                        format!("requests[{i}].transaction_id"),
                        format!("appears twice in one batch (first at requests[{first}])"),
                    ));
                }
                Ok(input)
            })
            .collect();
        let writer = &self.writer;
        let mut results: Vec<(usize, pb::EnqueueRetryResult)> =
            stream::iter(checked.into_iter().enumerate())
                .map(|(i, item)| async move {
                    let res = match item {
                        Ok(input) => writer.enqueue(input).await,
                        Err(e) => Err(e),
                    };
                    let result = match res {
                        Ok(o) => pb::enqueue_retry_result::Result::Response(enqueue_pb(o)),
                        Err(e) => pb::enqueue_retry_result::Result::Error(pb::ItemError {
                            code: e.code() as i32,
                            message: e.to_string(),
                        }),
                    };
                    (
                        i,
                        pb::EnqueueRetryResult {
                            result: Some(result),
                        },
                    )
                })
                .buffer_unordered(BATCH_CONCURRENCY)
                .collect()
                .await;
        results.sort_by_key(|(i, _)| *i);
        Ok(Response::new(pb::EnqueueRetryBatchResponse {
            results: results.into_iter().map(|(_, r)| r).collect(),
        }))
    }

    async fn get_retry(
        &self,
        request: Request<pb::GetRetryRequest>,
    ) -> Result<Response<pb::Retry>, Status> {
        let r = request.into_inner();
        validate::service("service", &r.service)?;
        validate::transaction_id("transaction_id", &r.transaction_id)?;
        let state = self.writer.get(&r.service, &r.transaction_id).await?;
        Ok(Response::new(retry_pb(state)))
    }

    async fn cancel_retry(
        &self,
        request: Request<pb::CancelRetryRequest>,
    ) -> Result<Response<pb::CancelRetryResponse>, Status> {
        let r = request.into_inner();
        validate::service("service", &r.service)?;
        validate::transaction_id("transaction_id", &r.transaction_id)?;
        let (status, cancelled) = self.writer.cancel(&r.service, &r.transaction_id).await?;
        Ok(Response::new(pb::CancelRetryResponse {
            status: status_pb(status) as i32,
            cancelled,
        }))
    }
}

fn unimplemented(what: &str, issue: &str) -> Status {
    ApiError::Unimplemented(format!("{what} is not implemented yet ({issue})")).into()
}

/// The executor API. Dispatch is built in a later step; until then these calls answer
/// UNIMPLEMENTED, which clients can tell apart from an outage.
#[derive(Debug, Clone, Default)]
pub struct ExecutorApi;

type DeliveryStream = Pin<Box<dyn Stream<Item = Result<pb::Delivery, Status>> + Send>>;

#[tonic::async_trait]
impl pb::executor_service_server::ExecutorService for ExecutorApi {
    type SubscribeStream = DeliveryStream;

    async fn subscribe(
        &self,
        _request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        Err(unimplemented("Subscribe", "dispatch"))
    }

    async fn ack(&self, _r: Request<pb::AckRequest>) -> Result<Response<pb::AckResponse>, Status> {
        Err(unimplemented("Ack", "dispatch"))
    }

    async fn ack_batch(
        &self,
        _r: Request<pb::AckBatchRequest>,
    ) -> Result<Response<pb::AckBatchResponse>, Status> {
        Err(unimplemented("AckBatch", "dispatch"))
    }

    async fn extend_deadline(
        &self,
        _r: Request<pb::ExtendDeadlineRequest>,
    ) -> Result<Response<pb::ExtendDeadlineResponse>, Status> {
        Err(unimplemented("ExtendDeadline", "dispatch"))
    }

    async fn get_ring(
        &self,
        _r: Request<pb::GetRingRequest>,
    ) -> Result<Response<pb::Ring>, Status> {
        Err(unimplemented("GetRing", "lease ring"))
    }
}

/// The operator API; answers UNIMPLEMENTED until the admin features land.
#[derive(Debug, Clone, Default)]
pub struct AdminApi;

#[tonic::async_trait]
impl pb::admin_service_server::AdminService for AdminApi {
    async fn list_services(
        &self,
        _r: Request<pb::ListServicesRequest>,
    ) -> Result<Response<pb::ListServicesResponse>, Status> {
        Err(unimplemented("ListServices", "admin"))
    }
    async fn get_stats(
        &self,
        _r: Request<pb::GetStatsRequest>,
    ) -> Result<Response<pb::GetStatsResponse>, Status> {
        Err(unimplemented("GetStats", "admin"))
    }
    async fn pause_service(
        &self,
        _r: Request<pb::PauseServiceRequest>,
    ) -> Result<Response<pb::PauseServiceResponse>, Status> {
        Err(unimplemented("PauseService", "admin"))
    }
    async fn resume_service(
        &self,
        _r: Request<pb::ResumeServiceRequest>,
    ) -> Result<Response<pb::ResumeServiceResponse>, Status> {
        Err(unimplemented("ResumeService", "admin"))
    }
    async fn set_service_policy(
        &self,
        _r: Request<pb::SetServicePolicyRequest>,
    ) -> Result<Response<pb::SetServicePolicyResponse>, Status> {
        Err(unimplemented("SetServicePolicy", "admin"))
    }
    async fn list_dead_letters(
        &self,
        _r: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        Err(unimplemented("ListDeadLetters", "admin"))
    }
    async fn redrive_dead_letters(
        &self,
        _r: Request<pb::RedriveDeadLettersRequest>,
    ) -> Result<Response<pb::RedriveDeadLettersResponse>, Status> {
        Err(unimplemented("RedriveDeadLetters", "admin"))
    }
    async fn purge_dead_letters(
        &self,
        _r: Request<pb::PurgeDeadLettersRequest>,
    ) -> Result<Response<pb::PurgeDeadLettersResponse>, Status> {
        Err(unimplemented("PurgeDeadLetters", "admin"))
    }
    async fn inspect_window(
        &self,
        _r: Request<pb::InspectWindowRequest>,
    ) -> Result<Response<pb::InspectWindowResponse>, Status> {
        Err(unimplemented("InspectWindow", "admin"))
    }
}
