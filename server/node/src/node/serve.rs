//! How a node serves: the gRPC port (the API, health and reflection, behind the RPC layer,
//! the request budget and the connection limits, in plain text or TLS) and the HTTP
//! listener (`/metrics`, the probes and the dashboard). `Node::start_with` builds the
//! services on the engine's `Handle` and hands them here.

use std::{sync::Arc, time::Duration};

use rebound_proto::v1 as pb;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{oneshot, watch},
    time::Instant,
};
use tokio_stream::StreamExt;

use super::{own, NodeTasks};
use crate::{
    api::{AdminApi, Api, ExecutorApi},
    auth::AuthLayer,
    config::Config,
    tls::{MaybeTls, ServerTls, TlsListener},
};
use rebound_common::tasks::Tasks;
use rebound_engine::handle::Handle;

/// The gRPC services a node serves, built on the engine's `Handle`.
pub(super) struct GrpcServices {
    pub api: Api,
    pub executor: ExecutorApi,
    pub admin: AdminApi,
    /// Authenticates every `rebound.v1` call before its handler runs.
    pub auth: AuthLayer,
}

/// Serves the HTTP listener `l` (`router`: the probes, `/metrics` and the dashboard) under
/// `server`, in TLS when `tls` is set, until `shutdown`.
pub(super) fn serve_http(
    l: TcpListener,
    router: axum::Router,
    tls: &Option<Arc<ServerTls>>,
    server: &Tasks,
    shutdown: &watch::Sender<bool>,
) -> anyhow::Result<()> {
    let mut http_stop = shutdown.subscribe();
    let stopped = async move {
        let _ = http_stop.wait_for(|s| *s).await;
    };
    match tls {
        None => own(server, async move {
            let served = axum::serve(
                l,
                router.into_make_service_with_connect_info::<crate::tls::ConnInfo>(),
            )
            .with_graceful_shutdown(stopped)
            .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "the metrics and probes listener failed");
            }
        }),
        Some(tls) => {
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            let local = l.local_addr()?;
            let tls = tls.clone();
            own(
                server,
                crate::tls::accept(
                    tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true)),
                    crate::tls::HANDSHAKE_TIMEOUT,
                    Some,
                    move || tls.http_acceptor(),
                    tx,
                    shutdown.subscribe(),
                ),
            );
            own(server, async move {
                let served = axum::serve(
                    TlsListener { rx, local },
                    router.into_make_service_with_connect_info::<crate::tls::ConnInfo>(),
                )
                .with_graceful_shutdown(stopped)
                .await;
                if let Err(e) = served {
                    tracing::warn!(error = %e, "the metrics and probes listener failed");
                }
            });
        }
    }
    Ok(())
}

/// Serves gRPC on `listener` under the node's server and connection owners, until
/// `shutdown`; then lets calls finish for the shutdown grace and cuts what is left. The
/// receiver says how the server ended.
pub(super) async fn serve_grpc(
    config: &Config,
    services: GrpcServices,
    listener: TcpListener,
    tls: &Option<Arc<ServerTls>>,
    handle: Handle,
    tasks: &NodeTasks,
    shutdown: &watch::Sender<bool>,
) -> anyhow::Result<oneshot::Receiver<anyhow::Result<()>>> {
    let GrpcServices {
        api,
        executor,
        admin,
        auth,
    } = services;
    let mut stop_rx = shutdown.subscribe();
    let max_message = config.max_message_bytes();
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<pb::retry_service_server::RetryServiceServer<Api>>()
        .await;
    health
        .set_serving::<pb::executor_service_server::ExecutorServiceServer<ExecutorApi>>()
        .await;
    health
        .set_serving::<pb::admin_service_server::AdminServiceServer<AdminApi>>()
        .await;
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(rebound_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(rebound_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;

    let max_payload_bytes = config.max_payload_bytes;
    let request_budget = crate::budget::RequestBudget::new(config.max_inflight_bytes);
    // What bounds the connections (`connections`): how many, how fast a request's
    // headers must come, keep-alive, streams per connection, header size.
    let limits = crate::connections::Limits::of(config);
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(limits.max_concurrent_streams)
        .http2_keepalive_interval(Some(limits.keepalive_interval))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout))
        .http2_max_header_list_size(crate::connections::MAX_HEADER_LIST_BYTES)
        .layer(crate::telemetry::rpc::RpcLayer)
        .layer(auth)
        .layer(crate::budget::BudgetLayer::new(request_budget))
        .layer(tower::util::MapResponseLayer::new(
            move |r: http::Response<tonic::body::Body>| oversized_request(r, max_payload_bytes),
        ))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            pb::retry_service_server::RetryServiceServer::new(api)
                .max_decoding_message_size(max_message),
        )
        .add_service(pb::executor_service_server::ExecutorServiceServer::new(
            executor,
        ))
        .add_service(pb::admin_service_server::AdminServiceServer::new(admin));

    let mut serve_stop = shutdown.subscribe();
    let grace = Duration::from_millis(config.shutdown_grace_ms);
    // TCP_NODELAY (`bench rebound`: single enqueue p99 48 ms without, 11 ms with) and
    // TCP keep-alive on every accepted connection; the gate closes those past
    // REBOUND_MAX_CONNECTIONS, and `HeaderWatch` those whose requests' headers are late.
    let tcp = crate::connections::tcp_incoming(listener, &limits);
    let gate = Arc::new(crate::connections::Gate::new(
        tasks.connections.clone(),
        limits.max_connections,
    ));
    let header_timeout = limits.request_header_timeout;
    type Incoming = std::pin::Pin<
        Box<
            dyn futures::Stream<
                    Item = std::io::Result<
                        crate::connections::HeaderWatch<
                            MaybeTls<crate::connections::Connection<TcpStream>>,
                        >,
                    >,
                > + Send,
        >,
    >;
    let incoming: Incoming = match &tls {
        None => Box::pin(crate::connections::plain(tcp, gate, header_timeout)),
        Some(tls) => {
            // Handshakes run beside the server (`tls::accept`), within the header timeout;
            // it sees finished ones, whose first request is then due that long after
            // their accept.
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            let tls = tls.clone();
            own(
                &tasks.server,
                crate::tls::accept(
                    tcp,
                    header_timeout,
                    move |c| gate.admit(c),
                    move || tls.grpc_acceptor(),
                    tx,
                    shutdown.subscribe(),
                ),
            );
            Box::pin(
                tokio_stream::wrappers::ReceiverStream::new(rx).map(move |(s, _)| {
                    let opened = s.get_ref().0.opened();
                    Ok(crate::connections::HeaderWatch::new(
                        MaybeTls::Tls(Box::new(s)),
                        opened,
                        header_timeout,
                    ))
                }),
            )
        }
    };
    let connections = tasks.connections.clone();
    let (served_tx, served) = oneshot::channel();
    own(&tasks.server, async move {
        let serve = router.serve_with_incoming_shutdown(incoming, async move {
            let _ = serve_stop.wait_for(|s| *s).await.map(|_| ());
            // End every subscription so graceful shutdown is not held by them.
            handle.close_streams();
            health
                .set_not_serving::<pb::retry_service_server::RetryServiceServer<Api>>()
                .await;
        });
        tokio::pin!(serve);
        let result = tokio::select! {
            r = &mut serve => r.map_err(anyhow::Error::from),
            _ = async { stop_rx.wait_for(|s| *s).await.map(|_| ()) } => {
                match tokio::time::timeout(grace, &mut serve).await {
                    Ok(r) => r.map_err(anyhow::Error::from),
                    Err(_) => {
                        tracing::warn!(grace_ms = grace.as_millis() as u64, "connections still open after the grace period, closing them");
                        connections.shutdown(Instant::now()).await;
                        // Served once the cut connections are gone.
                        let _ = tokio::time::timeout(Duration::from_secs(1), &mut serve).await;
                        Ok(())
                    }
                }
            }
        };
        let _ = served_tx.send(result);
    });
    Ok(served)
}

/// tonic refuses a request message over the node's decoding limit before any handler sees it, with
/// OUT_OF_RANGE and a message that names no field. Every other refusal of bad input is
/// INVALID_ARGUMENT naming the field and the limit (`validate`), so the server's one response layer
/// turns that refusal into one (nothing was read, so nothing was written).
fn oversized_request(
    response: http::Response<tonic::body::Body>,
    max_payload_bytes: usize,
) -> http::Response<tonic::body::Body> {
    if response.headers().get("grpc-status").is_none() {
        return response;
    }
    match tonic::Status::from_header_map(response.headers()) {
        Some(s)
            if s.code() == tonic::Code::OutOfRange
                && s.message().contains("message length too large") =>
        {
            let detail = s.message().split_once(": ").map_or(s.message(), |(_, d)| d);
            tonic::Status::from(rebound_engine::error::Error::invalid(
                "payload",
                format!(
                    "the request is too large ({detail}): a payload may be at most \
                     {max_payload_bytes} bytes (REBOUND_MAX_PAYLOAD_BYTES), and a batch must \
                     fit in the message limit as a whole, so send fewer items per call"
                ),
            ))
            .into_http()
        }
        _ => response,
    }
}
