//! Asking another node for its part of the statistics (GetStats `local_only`) and of an
//! IN_FLIGHT listing (ListRetries `local_only`), over the nodes' own gRPC: the transport behind
//! the engine's `handle::AskPeer`.

use std::{sync::Arc, time::Duration};

use rebound_engine::handle::AskPeer;
use rebound_proto::v1 as pb;
use tonic::transport::Channel;

use crate::tls::ServerTls;

/// Asks peers in clear, or with the node's TLS when it has one.
#[derive(Debug)]
pub struct PeerClient {
    pub tls: Option<Arc<ServerTls>>,
}

impl PeerClient {
    /// A channel to `address` with short deadlines.
    async fn channel(&self, address: &str) -> Result<Channel, String> {
        let tls = self.tls.as_ref().map(|t| t.peer());
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = if address.contains("://") {
            address.to_string()
        } else {
            format!("{scheme}://{address}")
        };
        let mut endpoint = tonic::transport::Endpoint::from_shared(url)
            .map_err(|e| e.to_string())?
            .connect_timeout(Duration::from_secs(1))
            .timeout(Duration::from_secs(2));
        if let Some(tls) = tls {
            endpoint = endpoint.tls_config(tls).map_err(|e| e.to_string())?;
        }
        endpoint.connect().await.map_err(|e| e.to_string())
    }
}

/// `message` under the caller's own `authorization` header.
fn with_authorization<T>(
    message: T,
    authorization: Option<String>,
) -> Result<tonic::Request<T>, String> {
    let mut request = tonic::Request::new(message);
    if let Some(a) = authorization {
        let value = a
            .parse()
            .map_err(|_| "authorization is not ASCII".to_string())?;
        request.metadata_mut().insert("authorization", value);
    }
    Ok(request)
}

#[async_trait::async_trait]
impl AskPeer for PeerClient {
    /// GetStats(local_only) on a peer, with a short deadline, under the caller's own
    /// `authorization` header.
    async fn local_stats(
        &self,
        address: &str,
        service: String,
        authorization: Option<String>,
    ) -> Result<pb::GetStatsResponse, String> {
        let channel = self.channel(address).await?;
        let request = with_authorization(
            pb::GetStatsRequest {
                service,
                local_only: true,
            },
            authorization,
        )?;
        pb::admin_service_client::AdminServiceClient::new(channel)
            .get_stats(request)
            .await
            .map(|r| r.into_inner())
            .map_err(|e| e.to_string())
    }

    /// ListRetries(local_only) on a peer: its retries in flight, as `local_stats` asks.
    async fn local_in_flight(
        &self,
        address: &str,
        request: pb::ListRetriesRequest,
        authorization: Option<String>,
    ) -> Result<pb::ListRetriesResponse, String> {
        let channel = self.channel(address).await?;
        let request = with_authorization(request, authorization)?;
        pb::retry_service_client::RetryServiceClient::new(channel)
            .list_retries(request)
            .await
            .map(|r| r.into_inner())
            .map_err(|e| e.to_string())
    }
}
