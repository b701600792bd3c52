//! The connection to a Rebound node and the producer calls.

use std::time::Duration;

use rebound_proto::v1::{
    self as pb, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use tonic::{
    metadata::AsciiMetadataValue,
    service::{interceptor::InterceptedService, Interceptor},
    transport::{Channel, Endpoint},
};

use crate::{
    enqueue::{batch_item, EnqueueBuilder, Enqueued, ItemError},
    error::{malformed, Error},
    executor::{Executor, ExecutorBuilder},
    retry::{Cancelled, Retry},
};

/// How long [`Client::connect`] waits for the TCP and HTTP/2 handshake. Producers usually call
/// Rebound while handling a failure, so an unreachable node should surface quickly rather than
/// stall the caller on the OS's multi-minute TCP timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to a Rebound node.
///
/// Cloning is cheap and clones share one HTTP/2 connection, so create one `Client` at startup
/// and clone it into each task. Calls carry no deadline of their own; wrap them in
/// `tokio::time::timeout` where a bound is needed, or build the channel yourself (with
/// [`Endpoint::timeout`], TLS, ...) and use [`Client::from_channel`].
#[derive(Debug, Clone)]
pub struct Client {
    channel: Channel,
    credentials: Credentials,
    retry: RetryServiceClient<Transport>,
    executor: ExecutorServiceClient<Transport>,
}

/// The `authorization` metadata sent with every call: none by default, `Bearer <token>` after
/// [`Client::with_token`] (for nodes started with `REBOUND_CREDENTIALS_FILE`). Its `Debug`
/// output never shows the token.
#[derive(Clone, Default)]
pub struct Credentials(Option<AsciiMetadataValue>);

impl Credentials {
    /// `authorization: Bearer <token>`; the token must be printable ASCII.
    pub fn bearer(token: &str) -> Result<Self, Error> {
        let mut value: AsciiMetadataValue = format!("Bearer {token}")
            .parse()
            .map_err(|_| Error::InvalidArgument("token: must be printable ASCII".into()))?;
        // Kept out of HTTP/2 header compression tables and debug output.
        value.set_sensitive(true);
        Ok(Credentials(Some(value)))
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "Credentials(Bearer <redacted>)",
            None => "Credentials(none)",
        })
    }
}

impl Interceptor for Credentials {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// What the generated clients of a [`Client`] run over: its channel, with its credentials.
pub type Transport = InterceptedService<Channel, Credentials>;

impl Client {
    /// Connects to a node, e.g. `"http://127.0.0.1:50051"` or `"127.0.0.1:50051"` (a missing
    /// scheme means plain-text `http://`). Fails with [`Error::InvalidArgument`] for an address
    /// that is not a URI and [`Error::Transport`] when the node cannot be reached within
    /// [`CONNECT_TIMEOUT`].
    ///
    /// The channel reconnects by itself after the node restarts; no need to call this again.
    pub async fn connect(addr: impl AsRef<str>) -> Result<Self, Error> {
        let channel = endpoint(addr.as_ref())?.connect().await?;
        Ok(Self::from_channel(channel))
    }

    /// Wraps a channel the caller configured, for TLS, per-request timeouts or load balancing.
    pub fn from_channel(channel: Channel) -> Self {
        Self::with_credentials(channel, Credentials::default())
    }

    fn with_credentials(channel: Channel, credentials: Credentials) -> Self {
        Client {
            retry: RetryServiceClient::with_interceptor(channel.clone(), credentials.clone()),
            executor: ExecutorServiceClient::with_interceptor(channel.clone(), credentials.clone()),
            channel,
            credentials,
        }
    }

    /// This client sending `authorization: Bearer <token>` with every call, including the
    /// executors it starts (their subscriptions to other ring nodes too). Fails with
    /// [`Error::InvalidArgument`] for a token that is not printable ASCII.
    pub fn with_token(self, token: impl AsRef<str>) -> Result<Self, Error> {
        Ok(Self::with_credentials(
            self.channel,
            Credentials::bearer(token.as_ref())?,
        ))
    }

    /// The credentials this client sends.
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The generated client, for API features this crate does not wrap.
    pub fn retry_service(&self) -> RetryServiceClient<Transport> {
        // tonic's calls take `&mut self`; a clone is cheap and lets `Client` methods take `&self`.
        self.retry.clone()
    }

    /// The generated executor client (`Subscribe`, `Ack`, `ExtendDeadline`, ...), for callers
    /// that drive deliveries themselves instead of through an [`Executor`].
    pub fn executor_service(&self) -> ExecutorServiceClient<Transport> {
        self.executor.clone()
    }

    /// Starts configuring an [`Executor`] that processes `service`'s due retries: it asks this
    /// client's node for the ring and subscribes to each ring node (or over this client's
    /// connection when there is no ring); shorthand for
    /// [`Executor::builder`]`(self.clone(), service)`.
    pub fn executor(&self, service: impl Into<String>) -> ExecutorBuilder {
        Executor::builder(self.clone(), service)
    }

    /// Starts scheduling a retry of `transaction_id` for `service`; configure it on the builder
    /// and call [`send`](EnqueueBuilder::send).
    ///
    /// `service` is 1-64 characters of `[A-Za-z0-9._-]`, starting with a letter or digit.
    /// `transaction_id` is the idempotency key: 1-256 bytes of UTF-8 without control characters.
    pub fn enqueue(
        &self,
        service: impl Into<String>,
        transaction_id: impl Into<String>,
    ) -> EnqueueBuilder {
        EnqueueBuilder::new(self.clone(), service.into(), transaction_id.into())
    }

    /// Schedules many retries in one call. Items may be [`EnqueueBuilder`]s or raw
    /// [`EnqueueRetryRequest`](pb::EnqueueRetryRequest)s.
    ///
    /// Returns one result per item, in order: a bad item fails alone with an [`ItemError`].
    /// The call as a whole fails only when the batch cannot be processed at all, e.g. it has
    /// more than `REBOUND_MAX_BATCH_ITEMS` (1000 by default) items or the node is unavailable.
    /// A transaction may appear only once per batch. Like single enqueues, a batch is safe to
    /// re-send.
    pub async fn enqueue_batch<I>(
        &self,
        items: I,
    ) -> Result<Vec<Result<Enqueued, ItemError>>, Error>
    where
        I: IntoIterator,
        I::Item: Into<pb::EnqueueRetryRequest>,
    {
        let requests: Vec<pb::EnqueueRetryRequest> = items.into_iter().map(Into::into).collect();
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let sent = requests.len();
        let results = self
            .retry_service()
            .enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
            .await?
            .into_inner()
            .results;
        // Results are matched to items by position, so a short or long answer cannot be used.
        if results.len() != sent {
            return Err(malformed(format_args!(
                "{} results for {sent} batch items",
                results.len()
            )));
        }
        Ok(results.into_iter().map(batch_item).collect())
    }

    /// The current state of a retry. Fails with [`Error::NotFound`] when there is none.
    pub async fn get(
        &self,
        service: impl Into<String>,
        transaction_id: impl Into<String>,
    ) -> Result<Retry, Error> {
        let request = pb::GetRetryRequest {
            service: service.into(),
            transaction_id: transaction_id.into(),
        };
        let retry = self.retry_service().get_retry(request).await?.into_inner();
        Retry::try_from(retry)
    }

    /// Cancels a pending retry. Cancelling one that already finished is not an error: the
    /// result reports its terminal status with `cancelled = false`. Fails with
    /// [`Error::NotFound`] when there is no such retry.
    pub async fn cancel(
        &self,
        service: impl Into<String>,
        transaction_id: impl Into<String>,
    ) -> Result<Cancelled, Error> {
        let request = pb::CancelRetryRequest {
            service: service.into(),
            transaction_id: transaction_id.into(),
        };
        let response = self
            .retry_service()
            .cancel_retry(request)
            .await?
            .into_inner();
        Cancelled::try_from(response)
    }
}

/// The endpoint for a user-supplied address. A bare `host:port` is what people type (and what
/// the server logs), so it is accepted as plain-text HTTP/2.
pub(crate) fn endpoint(addr: &str) -> Result<Endpoint, Error> {
    let uri = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("http://{addr}")
    };
    let endpoint = Endpoint::from_shared(uri)
        .map_err(|e| Error::InvalidArgument(format!("invalid server address {addr:?}: {e}")))?;
    Ok(endpoint.connect_timeout(CONNECT_TIMEOUT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_show_the_token() {
        let c = Credentials::bearer("s3cret").unwrap();
        assert_eq!(format!("{c:?}"), "Credentials(Bearer <redacted>)");
        assert_eq!(format!("{:?}", Credentials::default()), "Credentials(none)");
        assert!(Credentials::bearer("line\nbreak").is_err());
    }

    #[test]
    fn adds_a_missing_scheme() {
        assert_eq!(
            endpoint("127.0.0.1:50051").unwrap().uri().to_string(),
            "http://127.0.0.1:50051/"
        );
        assert_eq!(
            endpoint("http://localhost:50051")
                .unwrap()
                .uri()
                .to_string(),
            "http://localhost:50051/"
        );
    }

    #[test]
    fn rejects_a_bad_address() {
        let e = endpoint("not a uri").unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    }

    #[tokio::test]
    async fn unreachable_node_is_a_retryable_transport_error() {
        // Port 1 on loopback is closed on any sane machine, so this fails fast.
        let e = Client::connect("127.0.0.1:1").await.unwrap_err();
        assert!(matches!(e, Error::Transport(_)), "{e:?}");
        assert!(e.is_retryable());
        assert!(
            e.to_string().starts_with("cannot connect to rebound: "),
            "{e}"
        );
    }

    #[tokio::test]
    async fn empty_batch_needs_no_server() {
        let client =
            Client::from_channel(Endpoint::from_static("http://127.0.0.1:1").connect_lazy());
        let results = client
            .enqueue_batch(Vec::<pb::EnqueueRetryRequest>::new())
            .await
            .unwrap();
        assert!(results.is_empty());
    }
}
