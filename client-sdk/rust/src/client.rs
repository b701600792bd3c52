//! The connection to a Rebound node and the producer calls.

use rebound_proto::v1::{
    self as pb, executor_service_client::ExecutorServiceClient,
    retry_service_client::RetryServiceClient,
};
use tonic::transport::Channel;

use crate::{
    enqueue::{batch_item, EnqueueBuilder, Enqueued, ItemError},
    error::{malformed, Error},
    executor::{Executor, ExecutorBuilder, Target},
    overload::call_shed_aware,
    retry::{Cancelled, Retry},
    transport::{endpoint, Credentials, Transport},
};

/// A connection to a Rebound node.
///
/// Cloning is cheap and clones share one HTTP/2 connection, so create one `Client` at startup
/// and clone it into each task. Calls carry no deadline of their own; wrap them in
/// `tokio::time::timeout` where a bound is needed, or build the channel yourself (with
/// [`Endpoint::timeout`](tonic::transport::Endpoint::timeout), TLS, ...) and use [`Client::from_channel`].
#[derive(Debug, Clone)]
pub struct Client {
    channel: Channel,
    credentials: Credentials,
    pub(crate) retry: RetryServiceClient<Transport>,
    executor: ExecutorServiceClient<Transport>,
}

impl Client {
    /// Connects to a node, e.g. `"http://127.0.0.1:50051"` or `"127.0.0.1:50051"` (a missing
    /// scheme means plain-text `http://`). Fails with [`Error::InvalidArgument`] for an address
    /// that is not a URI and [`Error::Transport`] when the node cannot be reached within
    /// [`CONNECT_TIMEOUT`](crate::CONNECT_TIMEOUT).
    ///
    /// The channel reconnects by itself after the node restarts; no need to call this again.
    pub async fn connect(addr: impl AsRef<str>) -> Result<Self, Error> {
        let channel = endpoint(addr.as_ref())?.connect().await?;
        Ok(Self::from_channel(channel))
    }

    /// [`Client::connect`] over TLS: `tls` holds the roots to trust
    /// ([`ClientTlsConfig::ca_certificate`](tonic::transport::ClientTlsConfig::ca_certificate))
    /// and, for mutual TLS, the client certificate
    /// ([`ClientTlsConfig::identity`](tonic::transport::ClientTlsConfig::identity)). A missing
    /// scheme means `https://`. Executors started from this client need the same config
    /// ([`ExecutorBuilder::tls`](crate::ExecutorBuilder::tls)) to reach the other ring nodes.
    pub async fn connect_with_tls(
        addr: impl AsRef<str>,
        tls: tonic::transport::ClientTlsConfig,
    ) -> Result<Self, Error> {
        let channel = crate::transport::endpoint_tls(addr.as_ref(), Some(&tls))?
            .connect()
            .await?;
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
        EnqueueBuilder::new(self.retry_service(), service.into(), transaction_id.into())
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
        let request = pb::EnqueueRetryBatchRequest { requests };
        let results = call_shed_aware(&self.retry, &request, |mut c, r| async move {
            c.enqueue_retry_batch(r).await
        })
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
        let retry = call_shed_aware(&self.retry, &request, |mut c, r| async move {
            c.get_retry(r).await
        })
        .await?
        .into_inner();
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
        let response = call_shed_aware(&self.retry, &request, |mut c, r| async move {
            c.cancel_retry(r).await
        })
        .await?
        .into_inner();
        Cancelled::try_from(response)
    }
}

impl From<Client> for Target {
    fn from(client: Client) -> Self {
        Target::from(&client)
    }
}

impl From<&Client> for Target {
    fn from(client: &Client) -> Self {
        Target::given(client.executor_service(), client.credentials().clone())
    }
}

#[cfg(test)]
mod tests {
    use tonic::transport::Endpoint;

    use super::*;

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
