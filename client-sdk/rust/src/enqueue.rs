//! Scheduling retries: the enqueue builder and its results.

use std::time::{Duration, SystemTime};

use rebound_proto::v1::{self as pb, enqueue_retry_request::Schedule};
use tonic::Code;

use crate::{
    error::{is_retryable_code, Error},
    overload::call_shed_aware,
    policy::RetryPolicy,
    time::{duration_to_proto, required_time, time_to_proto},
    transport::Transport,
};

type RetryClient = pb::retry_service_client::RetryServiceClient<Transport>;

/// A retry to schedule, created by [`Client::enqueue`](crate::Client::enqueue). Nothing is sent until
/// [`send`](EnqueueBuilder::send); for batches, pass builders (or their
/// [`into_request`](EnqueueBuilder::into_request)) to [`Client::enqueue_batch`](crate::Client::enqueue_batch).
///
/// Without [`delay`](Self::delay) or [`due_at`](Self::due_at), the retry is due after the
/// policy's backoff for [`attempt`](Self::attempt). The server rounds the due time up to its
/// window grid and never schedules into the current window.
#[derive(Debug, Clone)]
#[must_use = "an EnqueueBuilder does nothing until `.send()` is awaited"]
pub struct EnqueueBuilder {
    client: RetryClient,
    request: pb::EnqueueRetryRequest,
}

impl EnqueueBuilder {
    pub(crate) fn new(client: RetryClient, service: String, transaction_id: String) -> Self {
        EnqueueBuilder {
            client,
            request: pb::EnqueueRetryRequest {
                service,
                transaction_id,
                // The call that just failed, as in every other SDK.
                attempt: 1,
                ..Default::default()
            },
        }
    }

    /// Opaque bytes handed back to the executor (at most `REBOUND_MAX_PAYLOAD_BYTES`, 256 KiB
    /// by default).
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.request.payload = payload.into();
        self
    }

    /// Adds one attribute; a repeated key keeps the last value.
    pub fn attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.request.attributes.insert(key.into(), value.into());
        self
    }

    /// Adds several attributes, keeping those already set.
    pub fn attributes<K, V>(mut self, attributes: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        self.request
            .attributes
            .extend(attributes.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Due this long from now. Replaces an earlier [`due_at`](Self::due_at).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.request.schedule = Some(Schedule::Delay(duration_to_proto(delay)));
        self
    }

    /// Due at this time. Replaces an earlier [`delay`](Self::delay).
    pub fn due_at(mut self, due: SystemTime) -> Self {
        self.request.schedule = Some(Schedule::DueTime(time_to_proto(due)));
        self
    }

    /// Attempts the caller already made before enqueueing (default 1: the call that just
    /// failed). Must be below the policy's `max_attempts`.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.request.attempt = attempt;
        self
    }

    /// The failure that made this retry necessary, shown in `get` and in dead letters.
    pub fn last_error(mut self, error: impl Into<String>) -> Self {
        self.request.last_error = error.into();
        self
    }

    /// The downstream dependency whose failure this retry waits on, e.g.
    /// `"payments-gateway"` (1-128 characters, the rules of a service name). While an operator
    /// or an executor holds it, the retry is not delivered and uses no attempt.
    pub fn dependency(mut self, dependency: impl Into<String>) -> Self {
        self.request.dependency = dependency.into();
        self
    }

    /// Adds a compensation of this saga step, after those already added. When the retry ends
    /// DEAD (attempts or duration exhausted, FAILED, a non-retryable class), Rebound enqueues
    /// the first, and each next one once the one before it was acknowledged SUCCEEDED; so add
    /// them in the order they must run (usually the reverse of the steps they undo). A retry
    /// that ends SUCCEEDED or CANCELLED runs none. At most 32, with at most
    /// `REBOUND_MAX_PAYLOAD_BYTES` of payloads in all.
    pub fn compensation(mut self, compensation: Compensation) -> Self {
        self.request.compensations.push(compensation.0);
        self
    }

    /// Overrides the service's policy for this retry.
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.request.policy = Some(policy.into());
        self
    }

    /// The request this builder would send.
    pub fn into_request(self) -> pb::EnqueueRetryRequest {
        self.request
    }

    /// Schedules the retry.
    ///
    /// Idempotent by `(service, transaction_id)`: if the transaction is already pending, this
    /// reschedules or confirms it and returns `deduplicated = true`, so re-sending after a
    /// [retryable](Error::is_retryable) error is safe. Fails with [`Error::AlreadyExists`] when
    /// the transaction already succeeded.
    pub async fn send(self) -> Result<Enqueued, Error> {
        let client = self.client;
        let request = self.request;
        let response = call_shed_aware(&client, &request, |mut c, r| async move {
            c.enqueue_retry(r).await
        })
        .await?
        .into_inner();
        Enqueued::try_from(response)
    }
}

/// A compensation of a saga step, for [`EnqueueBuilder::compensation`]: a retry of its own, of
/// `service` with the idempotency key `transaction_id`, which that service's executors run
/// like any other delivery (and which must be idempotent). Unless its
/// [`policy`](Self::policy) says otherwise, it is retried without an attempt limit for at most
/// 24 hours, then dead-lettered for a human.
#[derive(Debug, Clone, PartialEq)]
pub struct Compensation(pb::Compensation);

impl Compensation {
    pub fn new(service: impl Into<String>, transaction_id: impl Into<String>) -> Self {
        Compensation(pb::Compensation {
            service: service.into(),
            transaction_id: transaction_id.into(),
            ..Default::default()
        })
    }

    /// Opaque bytes handed to the compensation's executor.
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.0.payload = payload.into();
        self
    }

    /// Adds one attribute; a repeated key keeps the last value.
    pub fn attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.0.attributes.insert(key.into(), value.into());
        self
    }

    /// Overrides the compensation service's policy.
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.0.policy = Some(policy.into());
        self
    }

    /// The message this compensation is sent as.
    pub fn into_proto(self) -> pb::Compensation {
        self.0
    }
}

impl From<EnqueueBuilder> for pb::EnqueueRetryRequest {
    fn from(b: EnqueueBuilder) -> Self {
        b.into_request()
    }
}

/// A scheduled retry, as [`EnqueueBuilder::send`] and [`Client::enqueue_batch`](crate::Client::enqueue_batch) report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    pub transaction_id: String,
    /// When the retry first becomes eligible for delivery: the end of its window (it is read
    /// once the window has ended, plus the skew margin).
    pub due_time: SystemTime,
    pub generation: u64,
    /// True when the transaction was already pending and this call rescheduled or confirmed it.
    pub deduplicated: bool,
}

impl TryFrom<pb::EnqueueRetryResponse> for Enqueued {
    type Error = Error;

    fn try_from(r: pb::EnqueueRetryResponse) -> Result<Self, Error> {
        Ok(Enqueued {
            due_time: required_time("due_time", r.due_time)?,
            transaction_id: r.transaction_id,
            generation: r.generation,
            deduplicated: r.deduplicated,
        })
    }
}

/// Why one item of a batch failed: the status it would have returned had it been sent alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ItemError {
    pub code: Code,
    pub message: String,
}

impl ItemError {
    /// Whether re-sending this item may succeed; see [`Error::is_retryable`].
    pub fn is_retryable(&self) -> bool {
        is_retryable_code(self.code)
    }
}

impl From<pb::ItemError> for ItemError {
    fn from(e: pb::ItemError) -> Self {
        ItemError {
            code: Code::from(e.code),
            message: e.message,
        }
    }
}

/// Lets `?` lift a failed item into the crate's error, with the same code mapping as a
/// failed call.
impl From<ItemError> for Error {
    fn from(e: ItemError) -> Self {
        Error::from(tonic::Status::new(e.code, e.message))
    }
}

/// The result of one batch item. A missing or malformed result fails only its own item.
pub(crate) fn batch_item(result: pb::EnqueueRetryResult) -> Result<Enqueued, ItemError> {
    use pb::enqueue_retry_result::Result as R;
    match result.result {
        Some(R::Response(r)) => Enqueued::try_from(r).map_err(|e| ItemError {
            code: e.code(),
            message: e.to_string(),
        }),
        Some(R::Error(e)) => Err(e.into()),
        None => Err(ItemError {
            code: Code::Internal,
            message: "malformed response from rebound: no result for this item".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use tonic::transport::Endpoint;

    use super::*;

    /// A builder whose channel never connects; building requests needs no server.
    fn builder(service: &str, transaction_id: impl Into<String>) -> EnqueueBuilder {
        let channel = Endpoint::from_static("http://127.0.0.1:1").connect_lazy();
        EnqueueBuilder::new(
            pb::retry_service_client::RetryServiceClient::with_interceptor(
                channel,
                crate::transport::Credentials::default(),
            ),
            service.into(),
            transaction_id.into(),
        )
    }

    #[tokio::test]
    async fn builder_with_defaults_sends_a_bare_request() {
        let req = builder("payments", "tx-1").into_request();
        assert_eq!(
            req,
            pb::EnqueueRetryRequest {
                service: "payments".into(),
                transaction_id: "tx-1".into(),
                // The call that just failed, as in every SDK.
                attempt: 1,
                ..Default::default()
            }
        );
    }

    #[tokio::test]
    async fn builder_sets_every_field() {
        let req = builder("payments", String::from("tx-2"))
            .payload(&b"{\"amount\":5}"[..])
            .attribute("tenant", "acme")
            .attributes([("region", "eu"), ("tenant", "globex")])
            .delay(Duration::from_millis(1_500))
            .attempt(1)
            .last_error("503 from upstream")
            .dependency("payments-gateway")
            .compensation(
                Compensation::new("payments", "tx-2/refund")
                    .payload(&b"refund"[..])
                    .attribute("reason", "saga"),
            )
            .compensation(
                Compensation::new("stock", "tx-2/release")
                    .policy(RetryPolicy::new().max_attempts(9)),
            )
            .policy(RetryPolicy::new().max_attempts(4))
            .into_request();
        assert_eq!(
            req,
            pb::EnqueueRetryRequest {
                service: "payments".into(),
                transaction_id: "tx-2".into(),
                payload: b"{\"amount\":5}".to_vec(),
                attributes: [
                    ("tenant".to_owned(), "globex".to_owned()),
                    ("region".to_owned(), "eu".to_owned()),
                ]
                .into(),
                schedule: Some(Schedule::Delay(prost_types::Duration {
                    seconds: 1,
                    nanos: 500_000_000
                })),
                policy: Some(pb::RetryPolicy {
                    max_attempts: Some(4),
                    ..Default::default()
                }),
                attempt: 1,
                last_error: "503 from upstream".into(),
                trace_context: None,
                dependency: "payments-gateway".into(),
                compensations: vec![
                    pb::Compensation {
                        service: "payments".into(),
                        transaction_id: "tx-2/refund".into(),
                        payload: b"refund".to_vec(),
                        attributes: [("reason".to_owned(), "saga".to_owned())].into(),
                        policy: None,
                    },
                    pb::Compensation {
                        service: "stock".into(),
                        transaction_id: "tx-2/release".into(),
                        policy: Some(pb::RetryPolicy {
                            max_attempts: Some(9),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ],
            }
        );
    }

    #[tokio::test]
    async fn last_schedule_wins() {
        let at = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let req = builder("s", "t")
            .delay(Duration::from_secs(5))
            .due_at(at)
            .into_request();
        assert_eq!(
            req.schedule,
            Some(Schedule::DueTime(prost_types::Timestamp {
                seconds: 1_800_000_000,
                nanos: 0
            }))
        );
        let req = builder("s", "t")
            .due_at(at)
            .delay(Duration::from_secs(5))
            .into_request();
        assert_eq!(
            req.schedule,
            Some(Schedule::Delay(prost_types::Duration {
                seconds: 5,
                nanos: 0
            }))
        );
    }

    #[test]
    fn converts_the_response() {
        let e = Enqueued::try_from(pb::EnqueueRetryResponse {
            transaction_id: "tx".into(),
            due_time: Some(prost_types::Timestamp {
                seconds: 60,
                nanos: 0,
            }),
            generation: 9,
            deduplicated: true,
        })
        .unwrap();
        assert_eq!(
            e,
            Enqueued {
                transaction_id: "tx".into(),
                due_time: UNIX_EPOCH + Duration::from_secs(60),
                generation: 9,
                deduplicated: true,
            }
        );
    }

    #[test]
    fn batch_items_convert_independently() {
        use pb::enqueue_retry_result::Result as R;
        let ok = batch_item(pb::EnqueueRetryResult {
            result: Some(R::Response(pb::EnqueueRetryResponse {
                transaction_id: "a".into(),
                due_time: Some(prost_types::Timestamp::default()),
                generation: 1,
                deduplicated: false,
            })),
        });
        assert_eq!(ok.unwrap().transaction_id, "a");

        let failed = batch_item(pb::EnqueueRetryResult {
            result: Some(R::Error(pb::ItemError {
                code: Code::InvalidArgument as i32,
                message: "requests[1].service: must not be empty".into(),
            })),
        })
        .unwrap_err();
        assert_eq!(failed.code, Code::InvalidArgument);
        assert!(!failed.is_retryable());
        assert!(matches!(Error::from(failed), Error::InvalidArgument(_)));

        let busy = batch_item(pb::EnqueueRetryResult {
            result: Some(R::Error(pb::ItemError {
                code: Code::ResourceExhausted as i32,
                message: "busy".into(),
            })),
        })
        .unwrap_err();
        assert!(busy.is_retryable());

        let empty = batch_item(pb::EnqueueRetryResult { result: None }).unwrap_err();
        assert_eq!(empty.code, Code::Internal);

        let no_due_time = batch_item(pb::EnqueueRetryResult {
            result: Some(R::Response(pb::EnqueueRetryResponse::default())),
        })
        .unwrap_err();
        assert_eq!(no_due_time.code, Code::Internal);
    }
}
