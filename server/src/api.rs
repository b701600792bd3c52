//! gRPC handlers. They stay thin: decode and validate (module `validate`), call the component,
//! encode. Errors become `tonic::Status` only through `From<Error>`.

use std::{collections::HashMap, pin::Pin, sync::Arc};

use futures::{stream, Stream, StreamExt};
use rebound_proto::v1::{self as pb};
use tonic::{Request, Response, Status};

use crate::{
    auth::{Auth, Credential},
    dispatch::{AttemptOutcome, Dispatcher, Resolution},
    error::Error,
    ring::LeaseRing,
    store::{self, TxState},
    validate,
    window::day_to_date,
    writer::{EnqueueOutcome, Writer},
};

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct Api {
    pub auth: Arc<Auth>,
    pub writer: Arc<Writer>,
    pub max_payload_bytes: usize,
    pub max_batch_items: usize,
}

/// How many items of one batch are written concurrently.
const BATCH_CONCURRENCY: usize = 32;

/// Milliseconds since the epoch as a protobuf timestamp.
pub(crate) fn ts(ms: i64) -> prost_types::Timestamp {
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
    let unlimited = p.max_attempts == crate::policy::UNLIMITED_ATTEMPTS;
    pb::RetryPolicy {
        max_attempts: (!unlimited).then_some(p.max_attempts),
        unlimited_attempts: unlimited.then_some(true),
        non_retryable_error_classes: p.non_retryable.clone(),
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
        let (metadata, _, request) = request.into_parts();
        let caller = self.auth.caller(&metadata)?;
        let input = validate::enqueue("", request, self.max_payload_bytes)?;
        Auth::may_use(caller, "service", &input.service)?;
        let out = self.writer.enqueue(input).await?;
        Ok(Response::new(enqueue_pb(out)))
    }

    async fn enqueue_retry_batch(
        &self,
        request: Request<pb::EnqueueRetryBatchRequest>,
    ) -> Result<Response<pb::EnqueueRetryBatchResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        let caller = self.auth.caller(&metadata)?;
        let requests = request.requests;
        if requests.len() > self.max_batch_items {
            return Err(Error::invalid(
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
        let checked: Vec<Result<validate::EnqueueInput, Error>> = requests
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let input =
                    validate::enqueue(&format!("requests[{i}]."), r, self.max_payload_bytes)?;
                Auth::may_use(caller, &format!("requests[{i}].service"), &input.service)?;
                let key = (input.service.clone(), input.transaction_id.clone());
                if let Some(first) = seen.insert(key, i) {
                    return Err(Error::invalid(
                        format!("requests[{i}].transaction_id"),
                        format!("appears twice in one batch (first at requests[{first}])"),
                    ));
                }
                Ok(input)
            })
            .collect();
        let results = self.writer.enqueue_many(checked).await;
        Ok(Response::new(pb::EnqueueRetryBatchResponse {
            results: results
                .into_iter()
                .map(|res| pb::EnqueueRetryResult {
                    result: Some(match res {
                        Ok(o) => pb::enqueue_retry_result::Result::Response(enqueue_pb(o)),
                        Err(e) => pb::enqueue_retry_result::Result::Error(pb::ItemError {
                            code: e.code() as i32,
                            message: e.to_string(),
                        }),
                    }),
                })
                .collect(),
        }))
    }

    async fn get_retry(
        &self,
        request: Request<pb::GetRetryRequest>,
    ) -> Result<Response<pb::Retry>, Status> {
        let (metadata, _, r) = request.into_parts();
        let caller = self.auth.caller(&metadata)?;
        validate::service("service", &r.service)?;
        validate::transaction_id("transaction_id", &r.transaction_id)?;
        Auth::may_use(caller, "service", &r.service)?;
        let state = self.writer.get(&r.service, &r.transaction_id).await?;
        Ok(Response::new(retry_pb(state)))
    }

    async fn cancel_retry(
        &self,
        request: Request<pb::CancelRetryRequest>,
    ) -> Result<Response<pb::CancelRetryResponse>, Status> {
        let (metadata, _, r) = request.into_parts();
        let caller = self.auth.caller(&metadata)?;
        validate::service("service", &r.service)?;
        validate::transaction_id("transaction_id", &r.transaction_id)?;
        Auth::may_use(caller, "service", &r.service)?;
        let (status, cancelled) = self.writer.cancel(&r.service, &r.transaction_id).await?;
        Ok(Response::new(pb::CancelRetryResponse {
            status: status_pb(status) as i32,
            cancelled,
        }))
    }
}

/// The executor API: subscriptions, acknowledgements and deadline extensions.
#[derive(Debug, Clone)]
pub struct ExecutorApi {
    pub auth: Arc<Auth>,
    /// None when the node was given a fixed ownership (it then reports the whole ring).
    pub ring: Option<Arc<LeaseRing>>,
    pub node_id: String,
    pub address: String,
    pub dispatcher: Arc<Dispatcher>,
    pub max_delay: std::time::Duration,
}

/// Most deliveries one stream may hold unacknowledged.
pub const MAX_IN_FLIGHT: u32 = 10_000;
/// Longest single deadline extension.
pub const MAX_EXTENSION: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

type DeliveryStream = Pin<Box<dyn Stream<Item = Result<pb::Delivery, Status>> + Send>>;

/// The receiving end of a subscription; dropping it (the client went away or the node is
/// stopping) hands the stream's unacknowledged deliveries to other subscribers.
struct Subscription {
    id: u64,
    rx: tokio::sync::mpsc::Receiver<Result<pb::Delivery, Status>>,
    dispatcher: Arc<Dispatcher>,
}

impl Stream for Subscription {
    type Item = Result<pb::Delivery, Status>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let orphans = self.dispatcher.hub.unsubscribe(self.id);
        if !orphans.is_empty() {
            tracing::info!(
                subscriber = self.id,
                items = orphans.len(),
                "stream closed, redelivering its in-flight items"
            );
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            for w in orphans {
                self.dispatcher.requeue(w, Some(self.id));
            }
        }
    }
}

/// Validates one ack: its delivery id, error, retry_after (at most `max_delay`), error class,
/// outcome and snooze. `prefix` is prepended to field names (batch items).
pub fn ack_outcome(
    r: &pb::AckRequest,
    max_delay: std::time::Duration,
    prefix: &str,
) -> Result<AttemptOutcome, Error> {
    validate::delivery_id(&format!("{prefix}delivery_id"), &r.delivery_id)?;
    if r.error.len() > validate::MAX_LAST_ERROR_BYTES {
        return Err(Error::invalid(
            format!("{prefix}error"),
            format!(
                "is {} bytes, over the limit of {} bytes",
                r.error.len(),
                validate::MAX_LAST_ERROR_BYTES
            ),
        ));
    }
    let after = r
        .retry_after
        .as_ref()
        .map(|d| validate::duration(&format!("{prefix}retry_after"), d))
        .transpose()?;
    if let Some(a) = after {
        if a > max_delay {
            return Err(Error::invalid(
                format!("{prefix}retry_after"),
                format!(
                    "{}s is over the maximum of {}s (REBOUND_MAX_DELAY_SECONDS)",
                    a.as_secs(),
                    max_delay.as_secs()
                ),
            ));
        }
    }
    if !r.error_class.is_empty() && !crate::policy::error_class_ok(&r.error_class) {
        return Err(Error::invalid(
            format!("{prefix}error_class"),
            format!(
                "must be 1-{} characters of [A-Za-z0-9._:/-]",
                crate::policy::MAX_ERROR_CLASS_LEN
            ),
        ));
    }
    let outcome = pb::AckOutcome::try_from(r.outcome);
    if r.snooze {
        if outcome != Ok(pb::AckOutcome::Retry) {
            return Err(Error::invalid(
                format!("{prefix}snooze"),
                "is only allowed with outcome RETRY",
            ));
        }
        if after.is_none_or(|a| a.is_zero()) {
            return Err(Error::invalid(
                format!("{prefix}retry_after"),
                "is required with snooze and must be more than 0s",
            ));
        }
    }
    match outcome {
        Ok(pb::AckOutcome::Succeeded) => Ok(AttemptOutcome::Succeeded),
        Ok(pb::AckOutcome::Retry) => Ok(AttemptOutcome::Retry {
            after,
            error: r.error.clone(),
            error_class: r.error_class.clone(),
            snooze: r.snooze,
        }),
        Ok(pb::AckOutcome::Failed) => Ok(AttemptOutcome::Failed {
            error: r.error.clone(),
        }),
        _ => Err(Error::invalid(
            format!("{prefix}outcome"),
            "must be SUCCEEDED, RETRY or FAILED",
        )),
    }
}

fn ack_response(r: Resolution) -> pb::AckResponse {
    match r {
        Resolution::Succeeded => pb::AckResponse::default(),
        Resolution::Rescheduled { due_at_ms, snoozed } => pb::AckResponse {
            next_due_time: Some(ts(due_at_ms)),
            snoozed,
            ..Default::default()
        },
        Resolution::Dead => pb::AckResponse {
            dead_lettered: true,
            ..Default::default()
        },
    }
}

impl ExecutorApi {
    async fn ack_one(
        &self,
        caller: Option<&Credential>,
        r: &pb::AckRequest,
        prefix: &str,
    ) -> Result<pb::AckResponse, Error> {
        let outcome = ack_outcome(r, self.max_delay, prefix)?;
        let d = &self.dispatcher;
        if let Some(service) = d.hub.service_of(&r.delivery_id) {
            Auth::may_use(caller, &format!("{prefix}delivery_id"), &service)?;
        }
        let Some(inflight) = d.hub.take(&r.delivery_id) else {
            return Err(Error::NotFound(format!(
                "delivery {:?} is not in flight on this node: unknown, already acknowledged, or its deadline passed",
                r.delivery_id
            )));
        };
        let (service, txid) = (
            inflight.work.state.service.clone(),
            inflight.work.state.transaction_id.clone(),
        );
        // The read, the generation check and the write happen under the transaction's lock,
        // so a cancel or enqueue on this node cannot land between them and be undone.
        let _lock = d.lock_transaction(&service, &txid).await;
        let current = match d.store_state(&service, &txid).await {
            Ok(s) => s,
            Err(e) => {
                if let Some(w) = d.hub.put_back(r.delivery_id.clone(), inflight) {
                    d.requeue(w, None);
                }
                return Err(e);
            }
        };
        let live = current
            .as_ref()
            .is_some_and(|s| s.is_live(inflight.work.state.generation));
        if !live {
            inflight.work.resolve();
            return Err(Error::FailedPrecondition(format!(
                "delivery {:?} is stale: transaction {txid:?} was rescheduled, cancelled or finished since; nothing changed",
                r.delivery_id
            )));
        }
        let state = current.expect("checked live");
        match d
            .resolve(state, inflight.work.deliveries + 1, outcome)
            .await
        {
            Ok(res) => {
                inflight.work.resolve();
                Ok(ack_response(res))
            }
            Err(e) => {
                if let Some(w) = d.hub.put_back(r.delivery_id.clone(), inflight) {
                    d.requeue(w, None);
                }
                Err(e)
            }
        }
    }
}

#[tonic::async_trait]
impl pb::executor_service_server::ExecutorService for ExecutorApi {
    type SubscribeStream = DeliveryStream;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let (metadata, _, r) = request.into_parts();
        let caller = self.auth.caller(&metadata)?;
        validate::service("service", &r.service)?;
        if r.max_in_flight == 0 || r.max_in_flight > MAX_IN_FLIGHT {
            return Err(Error::invalid(
                "max_in_flight",
                format!(
                    "must be between 1 and {MAX_IN_FLIGHT}, got {}",
                    r.max_in_flight
                ),
            )
            .into());
        }
        validate::executor_id("executor_id", &r.executor_id)?;
        Auth::may_use(caller, "service", &r.service)?;
        let (id, rx) = self.dispatcher.hub.subscribe(&r.service, r.max_in_flight)?;
        tracing::info!(service = %r.service, executor_id = %r.executor_id, subscriber = id, max_in_flight = r.max_in_flight, "executor subscribed");
        Ok(Response::new(Box::pin(Subscription {
            id,
            rx,
            dispatcher: self.dispatcher.clone(),
        })))
    }

    async fn ack(&self, r: Request<pb::AckRequest>) -> Result<Response<pb::AckResponse>, Status> {
        let caller = self.auth.caller(r.metadata())?;
        Ok(Response::new(self.ack_one(caller, r.get_ref(), "").await?))
    }

    async fn ack_batch(
        &self,
        r: Request<pb::AckBatchRequest>,
    ) -> Result<Response<pb::AckBatchResponse>, Status> {
        let (metadata, _, r) = r.into_parts();
        let caller = self.auth.caller(&metadata)?;
        let acks = r.acks;
        if acks.len() > MAX_IN_FLIGHT as usize {
            return Err(Error::invalid(
                "acks",
                format!(
                    "has {} items, over the limit of {MAX_IN_FLIGHT}",
                    acks.len()
                ),
            )
            .into());
        }
        // Concurrently, so the state reads and writes of the batch coalesce into few Cassandra
        // requests; `buffered` keeps the results in request order.
        let results = stream::iter(acks.into_iter().enumerate())
            .map(|(i, a)| async move {
                let res = self.ack_one(caller, &a, &format!("acks[{i}].")).await;
                pb::AckBatchResult {
                    result: Some(match res {
                        Ok(r) => pb::ack_batch_result::Result::Response(r),
                        Err(e) => pb::ack_batch_result::Result::Error(pb::AckError {
                            code: e.code() as i32,
                            message: e.to_string(),
                        }),
                    }),
                }
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
        let (metadata, _, r) = r.into_parts();
        let caller = self.auth.caller(&metadata)?;
        validate::delivery_id("delivery_id", &r.delivery_id)?;
        let ext = validate::extension("extension", r.extension.as_ref())?;
        if let Some(service) = self.dispatcher.hub.service_of(&r.delivery_id) {
            Auth::may_use(caller, "delivery_id", &service)?;
        }
        let deadline = self
            .dispatcher
            .hub
            .extend(&r.delivery_id, ext)
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "delivery {:?} is not in flight on this node",
                    r.delivery_id
                ))
            })?;
        Ok(Response::new(pb::ExtendDeadlineResponse {
            ack_deadline: Some(ts(deadline)),
        }))
    }

    async fn get_ring(&self, r: Request<pb::GetRingRequest>) -> Result<Response<pb::Ring>, Status> {
        self.auth.caller(r.metadata())?;
        let token = |r: &crate::store::TokenRange| pb::TokenRange {
            start: r.start,
            end: r.end,
        };
        let nodes = match &self.ring {
            None => vec![pb::RingNode {
                node_id: self.node_id.clone(),
                address: self.address.clone(),
                compactor: true,
                ranges: vec![token(&crate::store::TokenRange::FULL)],
            }],
            Some(ring) => ring
                .view()
                .await
                .map_err(Error::from)?
                .into_iter()
                .map(|(m, compactor, ranges)| pb::RingNode {
                    node_id: m.node_id,
                    address: m.address,
                    compactor,
                    ranges: ranges.iter().map(token).collect(),
                })
                .collect(),
        };
        Ok(Response::new(pb::Ring { nodes }))
    }
}

/// The operator API (see `admin.rs`).
#[derive(Debug, Clone)]
pub struct AdminApi {
    pub admin: Arc<crate::admin::Admin>,
}

#[tonic::async_trait]
impl pb::admin_service_server::AdminService for AdminApi {
    async fn list_services(
        &self,
        _r: Request<pb::ListServicesRequest>,
    ) -> Result<Response<pb::ListServicesResponse>, Status> {
        Ok(Response::new(self.admin.list_services().await?))
    }
    async fn get_service(
        &self,
        r: Request<pb::GetServiceRequest>,
    ) -> Result<Response<pb::ServiceInfo>, Status> {
        Ok(Response::new(
            self.admin.get_service(&r.into_inner().service).await?,
        ))
    }
    async fn get_stats(
        &self,
        r: Request<pb::GetStatsRequest>,
    ) -> Result<Response<pb::GetStatsResponse>, Status> {
        // Peers are asked with the caller's own credential.
        let authorization = r.metadata().get("authorization").cloned();
        Ok(Response::new(
            self.admin.stats(&r.into_inner(), authorization).await?,
        ))
    }
    async fn pause_service(
        &self,
        r: Request<pb::PauseServiceRequest>,
    ) -> Result<Response<pb::PauseServiceResponse>, Status> {
        let s = self.admin.set_paused(&r.into_inner().service, true).await?;
        Ok(Response::new(pb::PauseServiceResponse { service: Some(s) }))
    }
    async fn resume_service(
        &self,
        r: Request<pb::ResumeServiceRequest>,
    ) -> Result<Response<pb::ResumeServiceResponse>, Status> {
        let s = self
            .admin
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
        Ok(Response::new(self.admin.set_policy(&r.into_inner()).await?))
    }
    async fn set_service_limits(
        &self,
        r: Request<pb::SetServiceLimitsRequest>,
    ) -> Result<Response<pb::SetServiceLimitsResponse>, Status> {
        Ok(Response::new(self.admin.set_limits(&r.into_inner()).await?))
    }
    async fn purge_service(
        &self,
        r: Request<pb::PurgeServiceRequest>,
    ) -> Result<Response<pb::PurgeServiceResponse>, Status> {
        Ok(Response::new(
            self.admin.purge_service(&r.into_inner()).await?,
        ))
    }
    async fn list_dead_letters(
        &self,
        r: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        Ok(Response::new(
            self.admin.list_dead_letters(&r.into_inner()).await?,
        ))
    }
    async fn redrive_dead_letters(
        &self,
        r: Request<pb::RedriveDeadLettersRequest>,
    ) -> Result<Response<pb::RedriveDeadLettersResponse>, Status> {
        Ok(Response::new(self.admin.redrive(&r.into_inner()).await?))
    }
    async fn purge_dead_letters(
        &self,
        r: Request<pb::PurgeDeadLettersRequest>,
    ) -> Result<Response<pb::PurgeDeadLettersResponse>, Status> {
        Ok(Response::new(
            self.admin.purge_dead_letters(&r.into_inner()).await?,
        ))
    }
    async fn inspect_window(
        &self,
        r: Request<pb::InspectWindowRequest>,
    ) -> Result<Response<pb::InspectWindowResponse>, Status> {
        Ok(Response::new(
            self.admin.inspect_window(&r.into_inner()).await?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[A-Za-z0-9._:/é -]{0,130}",
            prop::collection::vec(any::<u8>(), 0..200)
                .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any ack is an outcome or an INVALID_ARGUMENT naming a field of its batch item.
        #[test]
        fn ack_outcomes_are_total(
            delivery_id in text(),
            outcome in prop_oneof![any::<i32>(), 0i32..5],
            error in text(),
            error_class in text(),
            retry_after in prop::option::of((any::<i64>(), any::<i32>())),
            snooze in any::<bool>(),
        ) {
            let r = pb::AckRequest {
                delivery_id,
                outcome,
                error,
                error_class,
                retry_after: retry_after
                    .map(|(seconds, nanos)| prost_types::Duration { seconds, nanos }),
                snooze,
            };
            match ack_outcome(&r, std::time::Duration::from_secs(86_400), "acks[7].") {
                Ok(_) => prop_assert!(validate::delivery_id("d", &r.delivery_id).is_ok()),
                Err(Error::InvalidArgument { field, .. }) => {
                    prop_assert!(field.starts_with("acks[7]."), "{field}")
                }
                Err(e) => prop_assert!(false, "not INVALID_ARGUMENT: {e:?}"),
            }
        }
    }
}
