//! `bench otlp-sink`: a local OTLP receiver that counts spans (for `scripts/bench --tracing`).

use std::{sync::Arc, time::Duration};

use super::*;

/// An OTLP trace receiver that counts and discards what it is sent (`scripts/bench
/// --tracing`: the collector of the traced runs); prints the count every 5 s to stderr.
pub(crate) async fn otlp_sink(a: &Args) -> anyhow::Result<()> {
    use opentelemetry_proto::tonic::collector::trace::v1::{
        trace_service_server::{TraceService, TraceServiceServer},
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    #[derive(Clone, Default)]
    struct Sink(Arc<std::sync::atomic::AtomicU64>);
    #[tonic::async_trait]
    impl TraceService for Sink {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let n: usize = request
                .into_inner()
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum();
            self.0
                .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            Ok(tonic::Response::new(ExportTraceServiceResponse {
                partial_success: None,
            }))
        }
    }
    let listen: std::net::SocketAddr = a.text("listen", "127.0.0.1:4317").parse()?;
    let sink = Sink::default();
    let count = sink.0.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            eprintln!(
                "otlp-sink: {} spans",
                count.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
    });
    tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(sink))
        .serve(listen)
        .await?;
    Ok(())
}
