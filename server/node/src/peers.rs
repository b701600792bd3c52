//! Asking another node for its part of the statistics (GetStats `local_only`), over the
//! nodes' own gRPC: the transport behind the engine's `handle::AskPeer`.

use std::{sync::Arc, time::Duration};

use rebound_engine::handle::AskPeer;
use rebound_proto::v1 as pb;

use crate::tls::ServerTls;

/// Asks peers in clear, or with the node's TLS when it has one.
#[derive(Debug)]
pub struct PeerClient {
    pub tls: Option<Arc<ServerTls>>,
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
        let channel = endpoint.connect().await.map_err(|e| e.to_string())?;
        let mut request = tonic::Request::new(pb::GetStatsRequest {
            service,
            local_only: true,
        });
        if let Some(a) = authorization {
            let value = a
                .parse()
                .map_err(|_| "authorization is not ASCII".to_string())?;
            request.metadata_mut().insert("authorization", value);
        }
        pb::admin_service_client::AdminServiceClient::new(channel)
            .get_stats(request)
            .await
            .map(|r| r.into_inner())
            .map_err(|e| e.to_string())
    }
}
