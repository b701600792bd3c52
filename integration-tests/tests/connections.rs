//! A hostile client cannot exhaust a node through its connections (docs/operations.md,
//! "Connections"): thousands of idle connections meet `REBOUND_MAX_CONNECTIONS` and
//! `REBOUND_REQUEST_HEADER_TIMEOUT_MS`; a client trickling a header block (slowloris, written
//! here frame by frame over raw TCP) is cut off by the header timeout; Subscribe streams that
//! never read meet `REBOUND_MAX_SUBSCRIBERS`, `REBOUND_MAX_CONCURRENT_STREAMS` and HTTP/2 flow
//! control, and the work handed to them goes to an executor that reads once its ack deadline
//! passes. Meanwhile normal clients are served. The tests check what happens, never how fast.

use std::{
    collections::HashSet,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use rebound_common::metrics;
use rebound_integration_tests::{
    ack, ack_req, batch_accepted, dispatch_config, enqueue_req, eventually, TestNode,
};
use rebound_proto::v1::{
    self as pb, admin_service_client::AdminServiceClient,
    executor_service_client::ExecutorServiceClient, retry_service_client::RetryServiceClient,
};
use rebound_server::config::Config;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::Instant,
};
use tonic::{
    transport::{Channel, Endpoint},
    Code,
};

// ---- HTTP/2 by hand (RFC 9113): a 9-byte frame header (length, type, flags, stream id),
// then the payload; header blocks in HPACK literals without Huffman coding (RFC 7541 6.2.2).

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const REFUSED_STREAM: u32 = 0x7;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// An HPACK integer with an `n`-bit prefix (the prefix's other bits 0).
fn hpack_int(out: &mut Vec<u8>, mut v: usize, n: u32) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(v as u8);
        return;
    }
    out.push(max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128 + 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}

/// The header block of a gRPC request to `path`: literals without indexing, new names.
fn grpc_request_block(path: &str) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        b.push(0x00);
        hpack_int(&mut b, name.len(), 7);
        b.extend(name.as_bytes());
        hpack_int(&mut b, value.len(), 7);
        b.extend(value.as_bytes());
    }
    b
}

/// The header of a HEADERS frame on `stream` announcing a `len`-byte payload, which then
/// comes (or not) a byte at a time.
fn headers_head(stream: u32, len: u32, flags: u8) -> Vec<u8> {
    let mut h = len.to_be_bytes()[1..].to_vec();
    h.extend([HEADERS, flags]);
    h.extend(stream.to_be_bytes());
    h
}

/// The client preface and an empty SETTINGS frame.
fn hello() -> Vec<u8> {
    let mut b = PREFACE.to_vec();
    b.extend(frame(SETTINGS, 0, 0, &[]));
    b
}

/// A frame the server sent.
#[derive(Debug, Clone)]
struct Frame {
    kind: u8,
    stream: u32,
    payload: Vec<u8>,
}

/// Reads the server's frames until the connection ends (EOF or error) and sends each on
/// `tx`. (Its SETTINGS go unacknowledged: h2 does not insist, and an ACK in the middle of a
/// header block would be a protocol error.)
async fn read_frames(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    tx: tokio::sync::mpsc::UnboundedSender<Frame>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match rd.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        while buf.len() >= 9 {
            let len = u32::from_be_bytes([0, buf[0], buf[1], buf[2]]) as usize;
            if buf.len() < 9 + len {
                break;
            }
            let f = Frame {
                kind: buf[3],
                stream: u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & 0x7fff_ffff,
                payload: buf[9..9 + len].to_vec(),
            };
            buf.drain(..9 + len);
            let _ = tx.send(f);
        }
    }
}

/// A raw HTTP/2 connection: frames to write go through `out`, frames read come on `frames`;
/// `closed` resolves when the server ends the connection.
struct Raw {
    out: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    frames: tokio::sync::mpsc::UnboundedReceiver<Frame>,
    closed: tokio::task::JoinHandle<()>,
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        let (rd, mut wr) = TcpStream::connect(addr).await.unwrap().into_split();
        let (out, mut to_write) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        let (tx, frames) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(b) = to_write.recv().await {
                if wr.write_all(&b).await.is_err() {
                    return;
                }
            }
        });
        let closed = tokio::spawn(read_frames(rd, tx));
        Raw {
            out,
            frames,
            closed,
        }
    }

    fn send(&self, bytes: Vec<u8>) {
        let _ = self.out.send(bytes);
    }

    /// Writes `bytes(0)`, `bytes(1)`, ... 100 ms apart (an empty one: nothing) until the
    /// server closes the connection or `within` has passed; true when the server closed it.
    async fn trickle(&mut self, bytes: impl Fn(usize) -> Vec<u8>, within: Duration) -> bool {
        let started = Instant::now();
        let mut i = 0;
        while started.elapsed() < within {
            if self.closed.is_finished() {
                return true;
            }
            let b = bytes(i);
            if !b.is_empty() {
                self.send(b);
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.closed.is_finished()
    }

    /// The frames received so far.
    fn received(&mut self) -> Vec<Frame> {
        std::iter::from_fn(|| self.frames.try_recv().ok()).collect()
    }
}

// ---- Helpers.

async fn enqueue(ch: &Channel, service: &str, txid: &str) -> Result<(), tonic::Status> {
    RetryServiceClient::new(ch.clone())
        .enqueue_retry(enqueue_req(service, txid, 60_000))
        .await
        .map(|_| ())
}

async fn channel(addr: SocketAddr) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
}

fn closed_count(reason: &'static str) -> u64 {
    rebound_server::metric_definitions::metrics()
        .connections_closed
        .get_or_create(&rebound_server::metric_definitions::ReasonLabels { reason })
        .get()
}

fn open_connections(n: &TestNode) -> usize {
    n.node
        .as_ref()
        .unwrap()
        .tasks()
        .live()
        .into_iter()
        .find(|(owner, _)| *owner == "connections")
        .map(|(_, live)| live)
        .unwrap()
}

/// A node with few connections and a short header timeout (keep-alive stays at its default,
/// 60 s, so that it is not what closes anything here).
fn config(test: &str) -> Config {
    Config {
        max_connections: 256,
        request_header_timeout_ms: 1_000,
        ..dispatch_config(test)
    }
}

// ---- 1. Thousands of idle connections.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_past_the_limit_are_closed_and_clients_are_still_served() {
    // A header timeout long enough that the first 256 are still open when the next come,
    // however slow the machine.
    let cfg = Config {
        request_header_timeout_ms: 3_000,
        ..config("idle")
    };
    let n = TestNode::with_system_clock(cfg).await;
    let addr = n.node.as_ref().unwrap().local_addr();
    // The harness's client has made its first request: its connection is established.
    enqueue(&n.channel, "svc", "before").await.unwrap();
    let (limit_before, timeout_before) = (closed_count("limit"), closed_count("header_timeout"));

    // Watch the node's open connections while 2,000 clients connect and say nothing, or
    // only the HTTP/2 preface and SETTINGS.
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (most, stop) = (most.clone(), stop.clone());
        let tasks = n.node.as_ref().unwrap().tasks();
        tokio::spawn(async move {
            use std::sync::atomic::Ordering::SeqCst;
            while !stop.load(SeqCst) {
                let open = tasks
                    .live()
                    .into_iter()
                    .find(|(o, _)| *o == "connections")
                    .map(|(_, l)| l)
                    .unwrap_or(0);
                most.fetch_max(open, SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    // In waves of 100, 20 ms apart: a connection the kernel completes but cannot queue for
    // the node (its accept queue full) never reaches the node, which could not close it.
    let mut idle: Vec<TcpStream> = Vec::new();
    for wave in 0..20 {
        let connected: Vec<TcpStream> = futures::stream::iter(0..100)
            .map(|i| async move {
                let connect = TcpStream::connect(addr);
                let mut s = tokio::time::timeout(Duration::from_secs(10), connect)
                    .await
                    .ok()?
                    .ok()?;
                if (wave + i) % 2 == 0 {
                    // Refused at once, maybe: then the write may fail.
                    let _ = s.write_all(&hello()).await;
                }
                Some(s)
            })
            .buffer_unordered(100)
            .filter_map(|s| async { s })
            .collect()
            .await;
        idle.extend(connected);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(idle.len() > 1_500, "only {} connected", idle.len());

    // The connection the client has is served all along.
    enqueue(&n.channel, "svc", "during").await.unwrap();

    // Every idle connection is closed by the node: at once past the limit, or once the header
    // timeout passes without a request.
    let closed = futures::stream::iter(idle)
        .map(|mut s| async move {
            let mut buf = [0u8; 1024];
            let ends = async {
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        // The server's SETTINGS (and ACK) to those that sent the preface.
                        Ok(_) => continue,
                    }
                }
            };
            tokio::time::timeout(Duration::from_secs(20), ends)
                .await
                .is_ok()
        })
        .buffer_unordered(2_000)
        .collect::<Vec<bool>>()
        .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    watcher.await.unwrap();
    let still_open = closed.iter().filter(|c| !**c).count();
    assert_eq!(still_open, 0, "idle connections the node left open");
    let most = most.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        most <= 256,
        "{most} connections open at once, past the limit"
    );
    let refused = closed_count("limit") - limit_before;
    let timed_out = closed_count("header_timeout") - timeout_before;
    assert!(
        refused > 0 && timed_out > 0,
        "{refused} refused, {timed_out} timed out"
    );
    assert!(
        refused + timed_out >= closed.len() as u64,
        "{refused} + {timed_out} closures for {} connections",
        closed.len()
    );

    // A new client gets in once the idle ones are gone, and so does the old one still.
    let fresh = channel(addr).await.unwrap();
    enqueue(&fresh, "svc", "after").await.unwrap();
    enqueue(&n.channel, "svc", "after-2").await.unwrap();
    assert!(open_connections(&n) <= 3, "{}", open_connections(&n));
    n.finish().await;
}

// ---- 2. Slowloris over HTTP/2.

#[tokio::test]
async fn clients_trickling_header_blocks_are_cut_off_while_others_are_served() {
    let n = TestNode::with_system_clock(config("slowloris")).await;
    let addr = n.node.as_ref().unwrap().local_addr();
    enqueue(&n.channel, "svc", "first").await.unwrap();
    let block = grpc_request_block("/rebound.v1.RetryService/EnqueueRetry");
    let closed_before = closed_count("header_timeout");

    // a) The preface, then a HEADERS frame without END_HEADERS, then one-byte CONTINUATION
    // frames, never the last: four of them (h2 itself refuses a fifth as a CONTINUATION
    // flood), then nothing, in the middle of the header block.
    let mut continuations = Raw::connect(addr).await;
    let mut first = hello();
    first.extend(frame(HEADERS, 0, 1, &block[..3]));
    continuations.send(first);
    // b) A HEADERS frame whose payload (16,000 bytes announced) comes a byte at a time.
    let mut bytewise = Raw::connect(addr).await;
    let mut head = hello();
    head.extend(headers_head(1, 16_000, END_HEADERS));
    bytewise.send(head);
    // c) A complete request first (answered), then a trickled header block on stream 3.
    let mut later = Raw::connect(addr).await;
    let mut req = hello();
    req.extend(frame(
        HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &grpc_request_block("/grpc.health.v1.Health/Check"),
    ));
    later.send(req);
    eventually(Duration::from_secs(10), "the answer on stream 1", || {
        let got = later
            .received()
            .iter()
            .any(|f| f.kind == HEADERS && f.stream == 1);
        async move { got }
    })
    .await;
    later.send(headers_head(3, 16_000, END_HEADERS));

    // A normal client is served while they trickle.
    let served = {
        let ch = n.channel.clone();
        tokio::spawn(async move {
            for i in 0..20 {
                enqueue(&ch, "svc", &format!("meanwhile-{i}"))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let within = Duration::from_secs(20);
    // Only the header timeout closes them: h2's limits on header blocks are not reached, and
    // keep-alive (60 s, then 20 s for the PING's answer) comes after `within`.
    let (a, b, c) = tokio::join!(
        continuations.trickle(
            |i| match i {
                0..4 => frame(CONTINUATION, 0, 1, &[0x00]),
                _ => Vec::new(),
            },
            within
        ),
        bytewise.trickle(|i| vec![block[i % block.len()]], within),
        later.trickle(|i| vec![block[i % block.len()]], within),
    );
    assert!(a, "a client stalled in a header block is cut off");
    assert!(
        b,
        "a client sending a HEADERS payload a byte at a time is cut off"
    );
    assert!(
        c,
        "a client trickling its second request's headers is cut off"
    );
    assert!(closed_count("header_timeout") - closed_before >= 3);
    served.await.unwrap();
    enqueue(&n.channel, "svc", "last").await.unwrap();
    n.finish().await;
}

// ---- 3. Subscribe streams that never read.

/// A channel whose streams' receive windows are 0: the node can send them no DATA, as if the
/// executor never read (it never sends a WINDOW_UPDATE).
async fn deaf_channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .initial_stream_window_size(Some(0))
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn streams_that_never_read_are_bounded_and_their_work_goes_to_a_reader() {
    let service = format!("deaf-{}", rand::random::<u32>());
    let cfg = Config {
        max_subscribers: 41,
        ..config("deaf")
    };
    let n = TestNode::with_system_clock(cfg).await;
    let addr = n.node.as_ref().unwrap().local_addr();

    // An executor that reads and acknowledges everything.
    let acked: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut reading = ExecutorServiceClient::new(n.channel.clone())
        .subscribe(pb::SubscribeRequest {
            service: service.clone(),
            executor_id: "reader".into(),
            max_in_flight: 1_000,
        })
        .await
        .unwrap()
        .into_inner();
    let reader = {
        let (ch, acked) = (n.channel.clone(), acked.clone());
        tokio::spawn(async move {
            while let Ok(Some(d)) = reading.message().await {
                // On a busy machine the 1 s deadline may pass before the ack: NOT_FOUND, and
                // the retry comes back (to this reader or a deaf stream) to be acked again.
                match ack(&ch, ack_req(&d, pb::AckOutcome::Succeeded)).await {
                    Ok(_) => {
                        acked.lock().unwrap().insert(d.transaction_id.clone());
                    }
                    Err(e) => assert_eq!(e.code(), Code::NotFound, "{e:?}"),
                }
            }
        })
    };

    // 200 streams over 4 connections that never read: 40 fit under the subscriber limit,
    // the rest are refused.
    let mut deaf = Vec::new();
    let mut refused = 0;
    for c in 0..4 {
        let ch = deaf_channel(addr).await;
        for i in 0..50 {
            let r = ExecutorServiceClient::new(ch.clone())
                .subscribe(pb::SubscribeRequest {
                    service: service.clone(),
                    executor_id: format!("deaf-{c}-{i}"),
                    max_in_flight: 4,
                })
                .await;
            match r {
                Ok(s) => deaf.push(s.into_inner()),
                Err(e) => {
                    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
                    assert!(e.message().contains("REBOUND_MAX_SUBSCRIBERS"), "{e:?}");
                    refused += 1;
                }
            }
        }
    }
    assert_eq!((deaf.len(), refused), (40, 160));

    // 200 retries of 16 KiB, due now, each acknowledged within 1 s or delivered again.
    let policy = pb::RetryPolicy {
        ack_timeout: Some(rebound_integration_tests::dur_ms(1_000)),
        max_deliveries_per_attempt: Some(50),
        ..Default::default()
    };
    let all: Vec<String> = (0..200).map(|i| format!("t{i}")).collect();
    for chunk in all.chunks(50) {
        let requests = chunk
            .iter()
            .map(|t| pb::EnqueueRetryRequest {
                payload: vec![b'x'; 16 << 10],
                policy: Some(policy.clone()),
                ..enqueue_req(&service, t, 0)
            })
            .collect();
        let r = RetryServiceClient::new(n.channel.clone())
            .enqueue_retry_batch(pb::EnqueueRetryBatchRequest { requests })
            .await
            .unwrap()
            .into_inner();
        assert!(batch_accepted(&r), "{r:?}");
    }

    // Most first deliveries go to the streams that do not read; once their ack deadline
    // passes, every retry reaches the reader.
    eventually(Duration::from_secs(25), "every retry acknowledged", || {
        let done = acked.lock().unwrap().len() == all.len();
        async move { done }
    })
    .await;
    let m = rebound_engine::metric_definitions::metrics();
    let label = |kind| rebound_engine::metric_definitions::KindLabels {
        service: metrics::service(&service),
        kind,
    };
    let redelivered = m.deliveries.get_or_create(&label("redelivery")).get();
    assert!(
        redelivered > 0,
        "work handed to the deaf streams was redelivered"
    );
    // Nothing is left in flight for the deaf streams, open as they are: the node holds no
    // delivery for them (the bytes of their first few sit in HTTP/2 buffers, at most a
    // window and a chunk per stream).
    let node_stats = || async {
        let r = AdminServiceClient::new(n.channel.clone())
            .get_stats(pb::GetStatsRequest {
                service: service.clone(),
                local_only: true,
            })
            .await
            .unwrap()
            .into_inner();
        let node = &r.nodes[0];
        (node.in_flight, node.subscribers)
    };
    eventually(Duration::from_secs(5), "nothing in flight", || async {
        node_stats().await.0 == 0
    })
    .await;
    assert_eq!(node_stats().await, (0, 41));

    drop(deaf);
    n.finish().await;
    reader.await.unwrap();
}

#[tokio::test]
async fn streams_past_the_per_connection_limit_are_refused() {
    let cfg = Config {
        max_concurrent_streams: 8,
        ..config("streams")
    };
    let n = TestNode::with_system_clock(cfg).await;
    let addr = n.node.as_ref().unwrap().local_addr();
    // Twelve Subscribe calls on one connection whose request bodies never come.
    let mut raw = Raw::connect(addr).await;
    let block = grpc_request_block("/rebound.v1.ExecutorService/Subscribe");
    let mut b = hello();
    for i in 0..12u32 {
        b.extend(frame(HEADERS, END_HEADERS, 2 * i + 1, &block));
    }
    raw.send(b);
    let refused = Arc::new(Mutex::new(Vec::new()));
    eventually(Duration::from_secs(10), "4 streams refused", || {
        for f in raw.received() {
            if f.kind == RST_STREAM
                && u32::from_be_bytes(f.payload[..4].try_into().unwrap()) == REFUSED_STREAM
            {
                refused.lock().unwrap().push(f.stream);
            }
        }
        let n = refused.lock().unwrap().len();
        async move { n == 4 }
    })
    .await;
    assert_eq!(*refused.lock().unwrap(), vec![17, 19, 21, 23]);
    // The eight others are open (their requests await a body); the connection is served.
    raw.send(frame(DATA, END_STREAM, 1, &[]));
    eventually(Duration::from_secs(10), "stream 1 answered", || {
        let answered = raw.received().iter().any(|f| f.stream == 1);
        async move { answered }
    })
    .await;
    assert!(!raw.closed.is_finished());
    n.finish().await;
}

// ---- Over TLS: the handshake is due within the header timeout too.

/// A TLS client session to `addr` (ALPN h2), trusting `ca_pem`.
async fn tls_connect(
    addr: SocketAddr,
    ca_pem: &[u8],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(
            ServerName::IpAddress(addr.ip().into()),
            TcpStream::connect(addr).await.unwrap(),
        )
        .await
        .unwrap()
}

/// True when the peer ends the connection within `within` (EOF or error), reading whatever
/// it sends meanwhile.
async fn ends_within<S: tokio::io::AsyncRead + Unpin>(s: &mut S, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn over_tls_silent_and_slow_clients_are_cut_off_and_others_served() {
    use rebound_integration_tests::pki::{client_tls, tls_channel, Ca};
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let cert = ca.node("node");
    // The embedded store: nothing here needs Cassandra.
    let cfg = Config {
        store: rebound_server::config::StoreKind::Embedded,
        data_dir: Some(dir.path().join("data")),
        listen: "127.0.0.1:0".parse().unwrap(),
        http_listen: None,
        node_id: "tls-conn".into(),
        window_seconds: 1,
        skew_margin_ms: 250,
        lease_ttl_ms: 2_000,
        clock_sync: false,
        shutdown_grace_ms: 1_000,
        tls_cert_file: Some(cert.cert.clone()),
        tls_key_file: Some(cert.key.clone()),
        request_header_timeout_ms: 1_000,
        ..Config::default()
    };
    let node = rebound_server::node::Node::start(cfg, Arc::new(rebound_store::clock::SystemClock))
        .await
        .unwrap();
    let addr = node.local_addr();
    let served = tls_channel(addr, client_tls(&ca.cert_pem(), None));
    enqueue(&served, "svc", "first").await.unwrap();

    // TCP only: no ClientHello ever comes.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // The handshake, then nothing.
    let mut mute = tls_connect(addr, &ca.cert_pem()).await;
    // The handshake, the preface, then a header block that never ends.
    let mut slow = tls_connect(addr, &ca.cert_pem()).await;
    let mut b = hello();
    b.extend(headers_head(1, 16_000, END_HEADERS));
    slow.write_all(&b).await.unwrap();
    let trickle = async {
        for i in 0..200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if slow.write_all(&[i as u8]).await.is_err() {
                return true;
            }
            enqueue(&served, "svc", &format!("meanwhile-{i}"))
                .await
                .unwrap();
        }
        false
    };
    let within = Duration::from_secs(20);
    let (silent_ended, mute_ended, slow_cut) = tokio::join!(
        ends_within(&mut silent, within),
        ends_within(&mut mute, within),
        trickle,
    );
    assert!(silent_ended, "a client that never starts its handshake");
    assert!(
        mute_ended,
        "a client that sends nothing after its handshake"
    );
    assert!(slow_cut, "a client trickling its header block");
    enqueue(&served, "svc", "last").await.unwrap();
    node.shutdown().await.unwrap();
}
