//! Observability from outside, against real node processes on Cassandra: traces exported to
//! a real OTLP receiver (opentelemetry-proto's tonic `TraceServiceServer`, run here), a dead
//! collector that costs enqueues nothing, and `/metrics` read with a Prometheus text-format
//! parser.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        trace_service_server::{TraceService, TraceServiceServer},
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    },
    common::v1::any_value,
    trace::v1::{span::SpanKind, Span},
};
use rebound_client::{Client, Executor, Job, Outcome, RetryStatus};
use rebound_integration_tests::{
    drop_keyspace, eventually, http_get,
    process::{free_port, spawn_node_with},
    unique_keyspace,
};
use rebound_server::telemetry::otel::{self, OtelSettings};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{layer::SubscriberExt, Layer};

/// An OTLP trace receiver keeping every span it is sent.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Span>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

async fn start_receiver() -> (Receiver, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let receiver = Receiver::default();
    let service = TraceServiceServer::new(receiver.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (receiver, addr)
}

fn attr(s: &Span, key: &str) -> Option<String> {
    s.attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(v) => Some(v.clone()),
            any_value::Value::IntValue(v) => Some(v.to_string()),
            any_value::Value::BoolValue(v) => Some(v.to_string()),
            _ => None,
        }
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The node's environment for these tests: its own metrics port, fast exports.
fn node_env(http: u16, otlp: Option<String>) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("REBOUND_HTTP_LISTEN", format!("127.0.0.1:{http}")),
        ("REBOUND_STATS_INTERVAL_MS", "300".to_string()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_string()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000".to_string()),
    ];
    if let Some(e) = otlp {
        env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", e));
    }
    env
}

async fn scrape(addr: SocketAddr) -> prometheus_parse::Scrape {
    let (code, body) = http_get(addr, "/metrics").await.expect("GET /metrics");
    assert_eq!(code, 200, "{body}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("parses")
}

/// The sum of the samples of `metric` whose labels include `labels`.
fn value(s: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == metric)
        .filter(|x| labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match &x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(h) => h
                .iter()
                .find(|b| b.less_than.is_infinite())
                .map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => 0.0,
        })
        .sum()
}

#[tokio::test]
async fn a_retry_is_traced_from_the_failing_call_to_the_final_ack() {
    let (receiver, otlp) = start_receiver().await;
    // This process exports its own spans (the caller's and the SDK's process spans) to the
    // same receiver, through the node's pipeline.
    let settings = OtelSettings {
        endpoint: Some(format!("http://{otlp}")),
        schedule_delay: Duration::from_millis(100),
        service_name: "test-caller".into(),
        ..OtelSettings::default()
    };
    let exporting = otel::start(&settings, "test").unwrap();
    let tracer = exporting.provider.tracer("test");
    let subscriber = tracing_subscriber::registry().with(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("observability", tracing::Level::INFO)
                    .with_target("rebound_client", tracing::Level::INFO),
            ),
    );
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let ks = unique_keyspace("obs_traces");
    let (port, http) = (free_port(), free_port());
    let node = spawn_node_with(
        &ks,
        port,
        "obs-1",
        &node_env(http, Some(format!("http://{otlp}"))),
    );
    let addr = format!("127.0.0.1:{port}");
    rebound_integration_tests::process::connect(port).await;
    let client = Client::connect(&addr).await.unwrap();

    // The call that failed, in trace T.
    let caller = tracing::info_span!("charge card", otel.kind = "client");
    let t = caller.context().span().span_context().trace_id();
    let caller_id = caller.context().span().span_context().span_id();
    client
        .enqueue("obs", "tx-1")
        .delay(Duration::from_millis(10))
        .send()
        .instrument(caller.clone())
        .await
        .unwrap();
    drop(caller);

    // Tried twice: a retry, then a success.
    let tries = Arc::new(AtomicU32::new(0));
    let handler = {
        let tries = tries.clone();
        move |_job: Job| {
            let tries = tries.clone();
            async move {
                if tries.fetch_add(1, Ordering::SeqCst) == 0 {
                    Outcome::retry_after(Duration::from_millis(10), "upstream 503")
                        .with_error_class("http.503")
                } else {
                    Outcome::success()
                }
            }
        }
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let executor = tokio::spawn(Executor::builder(addr.as_str(), "obs").run(handler, async {
        let _ = stop_rx.await;
    }));
    eventually(Duration::from_secs(30), "the retry to succeed", || {
        let client = client.clone();
        async move { client.get("obs", "tx-1").await.unwrap().status == RetryStatus::Succeeded }
    })
    .await;
    let _ = stop_tx.send(());
    executor.await.unwrap().unwrap();
    exporting.shutdown(Duration::from_secs(5)).await;

    let t_hex = format!("{t}");
    let linked_to_t = |s: &Span| s.links.iter().any(|l| hex(&l.trace_id) == t_hex);
    eventually(Duration::from_secs(20), "every span to arrive", || {
        let spans = receiver.spans.lock().unwrap().clone();
        async move {
            let n = |name: &str| spans.iter().filter(|s| s.name == name).count();
            n("send obs") >= 1 && n("process obs") >= 2 && n("settle obs") >= 2
        }
    })
    .await;
    let spans = receiver.spans.lock().unwrap().clone();
    let by_id: HashMap<String, &Span> = spans.iter().map(|s| (hex(&s.span_id), s)).collect();
    let tree: Vec<String> = spans
        .iter()
        .map(|s| {
            format!(
                "{} trace={} span={} parent={} kind={} links={:?}",
                s.name,
                hex(&s.trace_id),
                hex(&s.span_id),
                hex(&s.parent_span_id),
                s.kind,
                s.links
                    .iter()
                    .map(|l| format!("{}/{}", hex(&l.trace_id), hex(&l.span_id)))
                    .collect::<Vec<_>>()
            )
        })
        .collect();
    eprintln!("spans received:\n{}", tree.join("\n"));

    // send: a PRODUCER span in T, below the node's server span of EnqueueRetry, itself a
    // child of the caller's span.
    let send = spans.iter().find(|s| s.name == "send obs").unwrap();
    assert_eq!(hex(&send.trace_id), t_hex);
    assert_eq!(send.kind, SpanKind::Producer as i32);
    assert_eq!(attr(send, "messaging.system").as_deref(), Some("rebound"));
    assert_eq!(
        attr(send, "messaging.destination.name").as_deref(),
        Some("obs")
    );
    assert_eq!(attr(send, "messaging.message.id").as_deref(), Some("tx-1"));
    let rpc = by_id[&hex(&send.parent_span_id)];
    assert_eq!(rpc.name, "rebound.v1.RetryService/EnqueueRetry");
    assert_eq!(rpc.kind, SpanKind::Server as i32);
    assert_eq!(hex(&rpc.parent_span_id), format!("{caller_id}"));
    // The store calls of the enqueue are `store <method>` spans in T (the layer over any
    // store), each over its requests: spans of the database conventions.
    let db = spans
        .iter()
        .find(|s| {
            hex(&s.trace_id) == t_hex
                && attr(s, "db.system.name").as_deref() == Some("cassandra")
                && attr(s, "db.operation.name").is_some()
        })
        .unwrap_or_else(|| panic!("no Cassandra span in the trace of the enqueue: {tree:#?}"));
    let call = by_id
        .get(&hex(&db.parent_span_id))
        .unwrap_or_else(|| panic!("the parent of {db:?} among {tree:#?}"));
    assert!(call.name.starts_with("store "), "{tree:#?}");
    assert_eq!(attr(call, "rebound.store").as_deref(), Some("cassandra"));
    // process: one CONSUMER span per attempt, each linked to T; the first failed.
    let process: Vec<&Span> = spans.iter().filter(|s| s.name == "process obs").collect();
    assert_eq!(process.len(), 2, "{tree:#?}");
    for p in &process {
        assert_eq!(p.kind, SpanKind::Consumer as i32);
        assert!(linked_to_t(p), "process span not linked to T: {p:?}");
        assert_eq!(attr(p, "messaging.system").as_deref(), Some("rebound"));
    }
    assert!(process
        .iter()
        .any(|p| attr(p, "error.type").as_deref() == Some("http.503")));
    // settle: one per ack, each linked to T.
    let settle: Vec<&Span> = spans.iter().filter(|s| s.name == "settle obs").collect();
    assert_eq!(settle.len(), 2, "{tree:#?}");
    for s in &settle {
        assert!(linked_to_t(s), "settle span not linked to T: {s:?}");
        assert_eq!(
            attr(s, "messaging.destination.name").as_deref(),
            Some("obs")
        );
    }
    node.kill();
    drop_keyspace(&ks).await;
}

#[tokio::test]
async fn a_dead_collector_adds_no_error_to_enqueue() {
    let dead = free_port();
    let ks = unique_keyspace("obs_dead");
    let (port, http) = (free_port(), free_port());
    let node = spawn_node_with(
        &ks,
        port,
        "obs-dead",
        &node_env(http, Some(format!("http://127.0.0.1:{dead}"))),
    );
    let addr = format!("127.0.0.1:{port}");
    rebound_integration_tests::process::connect(port).await;
    let client = Client::connect(&addr).await.unwrap();
    for i in 0..30 {
        client
            .enqueue("dead-collector", format!("tx-{i}"))
            .delay(Duration::from_secs(60))
            .send()
            .await
            .unwrap_or_else(|e| panic!("enqueue {i} failed with the collector down: {e}"));
    }
    let http_addr: SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();
    eventually(
        Duration::from_secs(20),
        "the failed exports to be counted",
        || async move {
            let s = scrape(http_addr).await;
            value(
                &s,
                "rebound_spans_dropped_total",
                &[("reason", "export_failed")],
            ) > 0.0
        },
    )
    .await;
    node.kill();
    drop_keyspace(&ks).await;
}

#[tokio::test]
async fn metrics_count_every_enqueue_delivery_and_ack() {
    const N: usize = 12;
    let ks = unique_keyspace("obs_metrics");
    let (port, http) = (free_port(), free_port());
    let node = spawn_node_with(&ks, port, "obs-m", &node_env(http, None));
    let addr = format!("127.0.0.1:{port}");
    rebound_integration_tests::process::connect(port).await;
    let http_addr: SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();
    let (code, body) = http_get(http_addr, "/healthz").await.unwrap();
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    eventually(
        Duration::from_secs(20),
        "the node to be ready",
        || async move {
            http_get(http_addr, "/readyz")
                .await
                .map(|r| r.0)
                .unwrap_or(0)
                == 200
        },
    )
    .await;
    let client = Client::connect(&addr).await.unwrap();
    // One due time for all, so that the repeat below lands in the same window as the first
    // enqueue of tx-0 (a relative delay could cross a window boundary between the two and
    // reschedule it, leaving a second, stale pointer in another window).
    let due = std::time::SystemTime::now() + Duration::from_secs(3);
    for i in 0..N {
        client
            .enqueue("metered", format!("tx-{i}"))
            .due_at(due)
            .send()
            .await
            .unwrap();
    }
    // A repeat is deduplicated, a bad name refused: neither is new.
    client
        .enqueue("metered", "tx-0")
        .due_at(due)
        .send()
        .await
        .unwrap();
    assert!(client.enqueue("bad name!", "x").send().await.is_err());
    let s = scrape(http_addr).await;
    let with = |result: &'static str| [("service", "metered"), ("result", result)];
    assert_eq!(value(&s, "rebound_enqueues_total", &with("new")), N as f64);
    assert_eq!(
        value(&s, "rebound_enqueues_total", &with("deduplicated")),
        1.0
    );
    assert_eq!(
        value(
            &s,
            "rebound_enqueues_total",
            &[("service", "_invalid"), ("code", "INVALID_ARGUMENT")]
        ),
        1.0
    );
    eventually(
        Duration::from_secs(20),
        "the backlog gauge to count them",
        || async move {
            let s = scrape(http_addr).await;
            value(&s, "rebound_pending", &[("service", "metered")]) == N as f64
        },
    )
    .await;

    let handler = |_job: Job| async { Outcome::success() };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let executor = tokio::spawn(
        Executor::builder(addr.as_str(), "metered").run(handler, async {
            let _ = stop_rx.await;
        }),
    );
    eventually(
        Duration::from_secs(30),
        "every ack to be counted",
        || async move {
            let s = scrape(http_addr).await;
            value(
                &s,
                "rebound_acks_total",
                &[("service", "metered"), ("outcome", "succeeded")],
            ) == N as f64
        },
    )
    .await;
    let s = scrape(http_addr).await;
    let deliveries = value(&s, "rebound_deliveries_total", &[("service", "metered")]);
    assert_eq!(deliveries, N as f64);
    assert_eq!(
        value(&s, "rebound_delivery_lateness_seconds_count", &[]),
        deliveries,
        "one lateness observation per delivery"
    );
    assert!(
        value(
            &s,
            "rebound_rpc_duration_seconds_count",
            &[
                ("method", "rebound.v1.RetryService/EnqueueRetry"),
                ("code", "OK")
            ]
        ) >= N as f64
    );
    assert!(value(&s, "rebound_store_request_duration_seconds_count", &[]) > 0.0);
    assert_eq!(value(&s, "rebound_compactor", &[]), 1.0);
    eventually(
        Duration::from_secs(30),
        "the backlog gauge to return to 0",
        || async move {
            let s = scrape(http_addr).await;
            value(&s, "rebound_pending", &[("service", "metered")]) == 0.0
        },
    )
    .await;
    let _ = stop_tx.send(());
    executor.await.unwrap().unwrap();
    // The whole scrape, for whoever reads the test's output.
    let (_, body) = http_get(http_addr, "/metrics").await.unwrap();
    eprintln!("scrape after the drain:\n{body}");
    node.kill();
    drop_keyspace(&ks).await;
}

/// A push request is a `POST` CLIENT span in the trace of the call that enqueued the retry,
/// and the receiver gets that span as its `traceparent`; `rebound_push_requests_total`
/// counts it.
#[tokio::test]
async fn a_push_request_is_a_client_span_in_the_enqueuers_trace() {
    use rebound_integration_tests::receiver::{Answer, Receiver as Hooks};
    use rebound_proto::v1::{self as pb, admin_service_client::AdminServiceClient};

    let (receiver, otlp) = start_receiver().await;
    let hooks = Hooks::start(|_| Answer::Status(200)).await;
    let ks = unique_keyspace("obs_push");
    let (port, http) = (free_port(), free_port());
    let mut env = node_env(http, Some(format!("http://{otlp}")));
    env.push(("REBOUND_PUSH_ALLOW", "127.0.0.1".to_string()));
    let node = spawn_node_with(&ks, port, "obs-push", &env);
    let ch = rebound_integration_tests::process::connect(port).await;
    AdminServiceClient::new(ch.clone())
        .set_push_target(pb::SetPushTargetRequest {
            service: "obs-push".into(),
            target: Some(pb::PushTarget {
                url: hooks.url("/in"),
                signing_secrets: vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()],
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut req = rebound_integration_tests::enqueue_req("obs-push", "tx-push", 0);
    req.trace_context = Some(pb::TraceContext {
        traceparent: format!("00-{trace_id}-00f067aa0ba902b7-01"),
        tracestate: String::new(),
    });
    pb::retry_service_client::RetryServiceClient::new(ch.clone())
        .enqueue_retry(req)
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the push to arrive", || {
        let n = hooks.received().len();
        async move { n >= 1 }
    })
    .await;
    eventually(Duration::from_secs(20), "the POST span to arrive", || {
        let spans = receiver.spans.lock().unwrap().clone();
        async move { spans.iter().any(|s| s.name == "POST") }
    })
    .await;
    let spans = receiver.spans.lock().unwrap().clone();
    let post = spans.iter().find(|s| s.name == "POST").unwrap();
    assert_eq!(hex(&post.trace_id), trace_id, "in the enqueuer's trace");
    // Its parent is the enqueue's `send` span (the context stored with the retry), a child
    // of the caller's span.
    let send = spans
        .iter()
        .find(|s| s.span_id == post.parent_span_id)
        .unwrap_or_else(|| panic!("the POST span's parent among {spans:#?}"));
    assert_eq!(send.name, "send obs-push");
    assert_eq!(hex(&send.parent_span_id), "00f067aa0ba902b7");
    assert_eq!(post.kind, SpanKind::Client as i32);
    assert_eq!(attr(post, "http.request.method").as_deref(), Some("POST"));
    assert_eq!(
        attr(post, "http.response.status_code").as_deref(),
        Some("200")
    );
    let got = &hooks.received()[0];
    let traceparent = got.header("traceparent");
    assert_eq!(
        traceparent,
        format!("00-{trace_id}-{}-01", hex(&post.span_id)),
        "the receiver's parent is the POST span"
    );
    let scraped = scrape(format!("127.0.0.1:{http}").parse().unwrap()).await;
    assert_eq!(
        value(
            &scraped,
            "rebound_push_requests_total",
            &[("service", "obs-push"), ("result", "2xx")]
        ),
        1.0
    );
    drop(node);
    drop_keyspace(&ks).await;
}
