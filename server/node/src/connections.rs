//! What bounds the gRPC port's connections (docs/operations.md, "Connections"), whatever a
//! client sends or withholds:
//!
//! - **How many.** At most `REBOUND_MAX_CONNECTIONS` are open at once, TLS handshakes
//!   included ([`Gate`]); one more is closed as soon as it is accepted (the client sees the
//!   connection reset and tries again, or another node), and the connections already open go
//!   on being served.
//! - **Idle and slow starters.** A connection must have sent the complete headers of its first
//!   request within `REBOUND_REQUEST_HEADER_TIMEOUT_MS` of being accepted, TLS handshake and
//!   HTTP/2 preface included, and every later request's headers within that time of their
//!   first frame ([`HeaderWatch`]); else it is closed. That ends connections that send
//!   nothing, only the preface, or a header block a few bytes at a time (slowloris): h2
//!   bounds a header block's size (`MAX_HEADER_LIST_BYTES`), not how long it takes to come.
//! - **Dead peers.** An HTTP/2 PING every `REBOUND_KEEPALIVE_INTERVAL_MS` on a quiet
//!   connection, which is closed when unanswered within `REBOUND_KEEPALIVE_TIMEOUT_MS`, and
//!   TCP keep-alive on the same schedule ([`tcp_incoming`]). A client stuck in the middle of a
//!   frame cannot answer a PING either.
//! - **Streams per connection.** `REBOUND_MAX_CONCURRENT_STREAMS` (HTTP/2
//!   SETTINGS_MAX_CONCURRENT_STREAMS; h2 refuses a stream past it with REFUSED_STREAM).
//!
//! What a stream whose client does not read can hold is bounded by HTTP/2 flow control and
//! the dispatcher (`dispatch::hub`): h2 and hyper buffer at most the peer's window (at most
//! hyper's 400 KiB send buffer) and two encoded chunks (32 KiB, or one delivery when larger);
//! past that the stream takes no delivery out of its channel, and those left there count
//! against `REBOUND_MAX_IN_FLIGHT_BYTES` until their ack deadline, then go to other executors.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::watch,
    time::{Instant, Sleep},
};
use tonic::transport::server::TcpIncoming;

use crate::config::Config;
use rebound_common::tasks::{Live, LiveGuard};

/// The largest header block (HPACK-decoded, as HTTP/2 counts it) a request may have: h2
/// refuses a bigger one. hyper's default, set here so that it does not change under us.
pub const MAX_HEADER_LIST_BYTES: u32 = 16 << 10;

/// How often a kind of closed connection is logged at most (each one is counted in
/// `rebound_connections_closed_total`).
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The connection bounds of a node's gRPC port (`Config`, validated).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub max_concurrent_streams: u32,
    pub request_header_timeout: Duration,
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
}

impl Limits {
    pub fn of(c: &Config) -> Self {
        Limits {
            max_connections: c.max_connections,
            max_concurrent_streams: c.max_concurrent_streams,
            request_header_timeout: Duration::from_millis(c.request_header_timeout_ms),
            keepalive_interval: Duration::from_millis(c.keepalive_interval_ms),
            keepalive_timeout: Duration::from_millis(c.keepalive_timeout_ms),
        }
    }
}

/// The accepted TCP connections of `listener`, with TCP_NODELAY (tonic sets it only on the
/// connections it accepts itself: without it Nagle's algorithm meets the client's delayed
/// ACK and a small response can wait 40 ms) and TCP keep-alive: probes after
/// `limits.keepalive_interval` of silence, three of them over `limits.keepalive_timeout`.
pub fn tcp_incoming(listener: TcpListener, limits: &Limits) -> TcpIncoming {
    TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(limits.keepalive_interval))
        .with_keepalive_interval(Some(
            (limits.keepalive_timeout / 3).max(Duration::from_secs(1)),
        ))
        .with_keepalive_retries(Some(3))
}

/// Counts `rebound_connections` while held (one per open connection of the gRPC port).
#[derive(Debug)]
pub struct OpenGauge(());

impl OpenGauge {
    pub fn new() -> Self {
        crate::metric_definitions::metrics().connections.inc();
        OpenGauge(())
    }
}

impl Default for OpenGauge {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for OpenGauge {
    fn drop(&mut self) {
        crate::metric_definitions::metrics().connections.dec();
    }
}

/// Counts a closed connection by reason, and logs the kind at most once per `LOG_EVERY`.
#[derive(Debug)]
struct Closures {
    reason: &'static str,
    /// When last logged, and how many since.
    logged: Mutex<(Option<Instant>, u64)>,
}

impl Closures {
    const fn new(reason: &'static str) -> Self {
        Closures {
            reason,
            logged: Mutex::new((None, 0)),
        }
    }

    /// Counts one; Some(how many were not logged before it) when this one is to be logged.
    fn closed(&self) -> Option<u64> {
        crate::metric_definitions::metrics().connection_closed(self.reason);
        let now = Instant::now();
        let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
        match logged.0 {
            Some(at) if now.duration_since(at) < LOG_EVERY => {
                logged.1 += 1;
                None
            }
            _ => {
                logged.0 = Some(now);
                Some(std::mem::take(&mut logged.1))
            }
        }
    }
}

static OVER_LIMIT: Closures = Closures::new("limit");
static HEADER_TIMEOUT: Closures = Closures::new("header_timeout");

/// Admits connections up to the limit.
#[derive(Debug)]
pub struct Gate {
    connections: Arc<Connections>,
    max: usize,
}

impl Gate {
    pub fn new(connections: Arc<Connections>, max: usize) -> Self {
        Gate { connections, max }
    }

    /// `tcp`, counted among the open connections; None (and `tcp` closed) when the node has
    /// its most connections open.
    pub fn admit<T>(&self, tcp: T) -> Option<Connection<T>> {
        let open = self.connections.live();
        if open >= self.max {
            if let Some(unlogged) = OVER_LIMIT.closed() {
                tracing::warn!(
                    open,
                    also_refused_since_last_logged = unlogged,
                    "refusing a connection: the node has {} connections open, its limit \
                     (REBOUND_MAX_CONNECTIONS); the open ones are still served",
                    self.max
                );
            }
            return None;
        }
        Some(self.connections.wrap(tcp))
    }
}

/// The accepted connections of a port without TLS, admitted by `gate` and watched by
/// `HeaderWatch`. An accept that fails (out of file descriptors, typically) is logged and
/// followed by a pause instead of a spin.
pub fn plain(
    tcp: TcpIncoming,
    gate: Arc<Gate>,
    header_timeout: Duration,
) -> impl futures::Stream<Item = io::Result<HeaderWatch<crate::tls::MaybeTls<Connection<TcpStream>>>>>
{
    use futures::StreamExt;
    tcp.filter_map(move |accepted| {
        let gate = gate.clone();
        async move {
            match accepted {
                Ok(tcp) => gate.admit(tcp).map(|c| {
                    let opened = c.opened();
                    Ok(HeaderWatch::new(
                        crate::tls::MaybeTls::Plain(c),
                        opened,
                        header_timeout,
                    ))
                }),
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    None
                }
            }
        }
    })
}

const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_HEADERS: u8 = 0x4;

/// Where the scan of a connection's HTTP/2 bytes is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// This many bytes of the client preface seen.
    Preface(usize),
    /// Reading a frame header.
    Head([u8; FRAME_HEADER], usize),
    /// Skipping a frame's payload; `ends_block`: the frame ends a header block.
    Payload { left: usize, ends_block: bool },
    /// Not HTTP/2: h2 refuses the connection; nothing more to follow.
    Off,
}

/// Follows the frames a client sends (their 9-byte headers only: payloads are skipped) to
/// tell when a request's header block (HEADERS and its CONTINUATION frames) is complete.
#[derive(Debug, Clone)]
struct Scan {
    part: Part,
    /// A header block has been completed.
    first_done: bool,
    /// A header block is under way.
    in_block: bool,
}

impl Scan {
    fn new() -> Self {
        Scan {
            part: Part::Preface(0),
            first_done: false,
            in_block: false,
        }
    }

    /// Headers are awaited: the first request's, or the rest of a header block.
    fn waiting(&self) -> bool {
        !self.first_done || self.in_block
    }

    fn end_frame(&mut self, ends_block: bool, opened: &mut bool) {
        if ends_block {
            self.in_block = false;
            self.first_done = true;
            *opened = false;
        }
        self.part = Part::Head([0; FRAME_HEADER], 0);
    }

    /// Follows `bytes`, the next ones the client sent. True when a header block opened in them
    /// is still under way at their end.
    fn feed(&mut self, mut bytes: &[u8]) -> bool {
        let mut opened = false;
        while !bytes.is_empty() {
            match &mut self.part {
                Part::Off => break,
                Part::Preface(seen) => {
                    let n = (PREFACE.len() - *seen).min(bytes.len());
                    if bytes[..n] != PREFACE[*seen..*seen + n] {
                        self.part = Part::Off;
                        break;
                    }
                    *seen += n;
                    bytes = &bytes[n..];
                    if *seen == PREFACE.len() {
                        self.part = Part::Head([0; FRAME_HEADER], 0);
                    }
                }
                Part::Head(head, have) => {
                    let n = (FRAME_HEADER - *have).min(bytes.len());
                    head[*have..*have + n].copy_from_slice(&bytes[..n]);
                    *have += n;
                    bytes = &bytes[n..];
                    if *have == FRAME_HEADER {
                        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                        let (kind, flags) = (head[3], head[4]);
                        let header_frame = kind == HEADERS || kind == CONTINUATION;
                        if header_frame && !self.in_block {
                            self.in_block = true;
                            opened = true;
                        }
                        let ends_block = header_frame && flags & END_HEADERS != 0;
                        if len == 0 {
                            self.end_frame(ends_block, &mut opened);
                        } else {
                            self.part = Part::Payload {
                                left: len,
                                ends_block,
                            };
                        }
                    }
                }
                Part::Payload { left, ends_block } => {
                    let n = (*left).min(bytes.len());
                    *left -= n;
                    bytes = &bytes[n..];
                    if *left == 0 {
                        let ends_block = *ends_block;
                        self.end_frame(ends_block, &mut opened);
                    }
                }
            }
        }
        opened
    }
}

/// A gRPC connection (after its TLS handshake, if any) that is closed when the headers of a
/// request are late: its first request's must be complete `timeout` after the connection
/// was accepted (`opened`), and any other's `timeout` after their first frame. Reads and
/// writes fail from then on, which ends the connection. No timer runs while no headers are
/// awaited.
pub struct HeaderWatch<T> {
    io: T,
    scan: Scan,
    timeout: Duration,
    /// Since when request headers are awaited; None: none are.
    waiting_since: Option<Instant>,
    timer: Pin<Box<Sleep>>,
    timed_out: bool,
}

impl<T> HeaderWatch<T> {
    pub fn new(io: T, opened: Instant, timeout: Duration) -> Self {
        HeaderWatch {
            io,
            scan: Scan::new(),
            timeout,
            waiting_since: Some(opened),
            timer: Box::pin(tokio::time::sleep_until(opened + timeout)),
            timed_out: false,
        }
    }

    fn late() -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "the client did not complete a request's headers in time \
             (REBOUND_REQUEST_HEADER_TIMEOUT_MS)",
        )
    }

    /// Err once awaited headers are late: then the connection ends.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.timed_out {
            return Err(Self::late());
        }
        let Some(since) = self.waiting_since else {
            return Ok(());
        };
        let deadline = since + self.timeout;
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        if self.timer.as_mut().poll(cx).is_ready() {
            self.timed_out = true;
            if let Some(unlogged) = HEADER_TIMEOUT.closed() {
                tracing::info!(
                    timeout_ms = self.timeout.as_millis() as u64,
                    first_request = !self.scan.first_done,
                    also_closed_since_last_logged = unlogged,
                    "closing a connection whose client did not complete a request's headers \
                     in time (REBOUND_REQUEST_HEADER_TIMEOUT_MS)"
                );
            }
            return Err(Self::late());
        }
        Ok(())
    }

    /// Follows bytes the client sent.
    fn observe(&mut self, bytes: &[u8]) {
        let opened = self.scan.feed(bytes);
        if !self.scan.waiting() {
            self.waiting_since = None;
        } else if self.scan.first_done && opened {
            self.waiting_since = Some(Instant::now());
        }
        // Otherwise the same wait goes on: the first request's since the accept, or the block
        // under way since its first frame.
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for HeaderWatch<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        if this.scan.part != Part::Off {
            this.observe(&buf.filled()[before..]);
        }
        // A wait that began in these bytes arms its timer at the next read, which comes before
        // the connection waits for more.
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for HeaderWatch<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected
    for HeaderWatch<T>
{
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// The server's connections, counted, and cut together at the end of the grace period.
#[derive(Debug)]
pub struct Connections {
    cut: watch::Sender<bool>,
    live: Arc<Live>,
}

impl Default for Connections {
    fn default() -> Self {
        Self {
            cut: watch::channel(false).0,
            live: Arc::default(),
        }
    }
}

impl Connections {
    /// Counts `io` as open until it is dropped; once cut, its reads and writes fail.
    /// It is counted in `rebound_connections` too.
    pub fn wrap<T>(&self, io: T) -> Connection<T> {
        let mut cut = self.cut.subscribe();
        Connection {
            io,
            cut: Box::pin(async move {
                let _ = cut.wait_for(|c| *c).await;
            }),
            opened: Instant::now(),
            _live: LiveGuard::new(self.live.clone()),
            _gauge: OpenGauge::new(),
        }
    }

    /// Connections not dropped yet.
    pub fn live(&self) -> usize {
        self.live.count()
    }

    /// Waits until every connection has closed or `deadline` has passed, then cuts those
    /// left and waits (at most a second) for them to go. Returns how many were cut.
    pub async fn shutdown(&self, deadline: Instant) -> usize {
        self.live.idle_by(deadline).await;
        let cut = self.live();
        let _ = self.cut.send(true);
        self.live
            .idle_by(Instant::now() + Duration::from_secs(1))
            .await;
        cut
    }
}

/// One connection of `Connections`.
pub struct Connection<T> {
    io: T,
    cut: BoxFuture<'static, ()>,
    opened: Instant,
    _live: LiveGuard,
    _gauge: OpenGauge,
}

impl<T> Connection<T> {
    /// When it was wrapped (accepted).
    pub fn opened(&self) -> Instant {
        self.opened
    }

    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        match self.cut.as_mut().poll(cx) {
            Poll::Ready(()) => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the node is shutting down",
            )),
            Poll::Pending => Ok(()),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Connection<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Connection<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check(cx)?;
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected for Connection<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    fn settings() -> Vec<u8> {
        frame(0x4, 0, 0, &[])
    }

    /// A preface, SETTINGS, a request in one HEADERS frame, its DATA, a PING.
    fn session() -> Vec<u8> {
        let mut b = PREFACE.to_vec();
        b.extend(settings());
        b.extend(frame(HEADERS, END_HEADERS, 1, &[0x82; 40]));
        b.extend(frame(0x0, 0x1, 1, &[0; 300]));
        b.extend(frame(0x6, 0, 0, &[0; 8]));
        b
    }

    #[test]
    fn a_request_completes_the_wait_however_the_bytes_are_split() {
        let bytes = session();
        for split in 1..bytes.len() {
            let mut s = Scan::new();
            for chunk in bytes.chunks(split) {
                s.feed(chunk);
            }
            assert!(!s.waiting(), "split every {split}");
            assert!(s.first_done);
        }
        // Cut before the HEADERS frame's payload ends: still waiting.
        let upto = PREFACE.len() + 9 + 9 + 39;
        let mut s = Scan::new();
        s.feed(&bytes[..upto]);
        assert!(s.waiting() && s.in_block);
        s.feed(&bytes[upto..upto + 1]);
        assert!(!s.waiting());
    }

    #[test]
    fn continuations_keep_the_block_open_until_end_headers() {
        let mut s = Scan::new();
        let mut b = PREFACE.to_vec();
        b.extend(settings());
        assert!(!s.feed(&b));
        assert!(s.waiting() && !s.in_block);
        assert!(s.feed(&frame(HEADERS, 0, 1, &[1, 2, 3])));
        for _ in 0..5 {
            assert!(!s.feed(&frame(CONTINUATION, 0, 1, &[4])));
            assert!(s.in_block);
        }
        s.feed(&frame(CONTINUATION, END_HEADERS, 1, &[5]));
        assert!(!s.waiting());
        // A later block: waiting again while under way, and `feed` says it opened.
        let mut later = frame(HEADERS, 0, 3, &[1]);
        later.extend(&frame(CONTINUATION, 0, 3, &[])[..4]);
        assert!(s.feed(&later));
        assert!(s.waiting());
        // A block that opens and ends in the same bytes leaves nothing awaited.
        let mut s2 = s.clone();
        s2.feed(&frame(CONTINUATION, END_HEADERS, 3, &[])[4..]);
        assert!(!s2.waiting());
        let mut two = frame(HEADERS, END_HEADERS, 5, &[1, 2]);
        two.extend(frame(HEADERS, 0, 7, &[1]));
        let mut s3 = Scan::new();
        s3.feed(PREFACE);
        assert!(s3.feed(&two), "the second block is under way");
        assert!(s3.waiting() && s3.first_done);
    }

    #[test]
    fn not_http2_stops_the_scan_and_the_first_request_stays_awaited() {
        let mut s = Scan::new();
        s.feed(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(s.part, Part::Off);
        assert!(s.waiting());
        s.feed(&frame(HEADERS, END_HEADERS, 1, &[1]));
        assert!(s.waiting());
    }

    proptest::proptest! {
        #[test]
        fn the_scan_is_total(chunks in proptest::collection::vec(
            proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0..16)) {
            let mut s = Scan::new();
            s.feed(PREFACE);
            for c in &chunks {
                s.feed(c);
            }
        }
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_or_trickles_headers_is_closed() {
        let timeout = Duration::from_millis(200);
        // Nothing at all.
        let (near, _far) = tokio::io::duplex(1 << 16);
        let mut w = HeaderWatch::new(near, Instant::now(), timeout);
        let mut buf = [0u8; 64];
        let e = w.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(w.write_all(b"x").await.is_err(), "writes fail too");

        // The preface and a header block a byte at a time.
        let (near, mut far) = tokio::io::duplex(1 << 16);
        let mut w = HeaderWatch::new(near, Instant::now(), timeout);
        let trickle = tokio::spawn(async move {
            let mut b = PREFACE.to_vec();
            b.extend(settings());
            b.extend(frame(HEADERS, 0, 1, &[1]));
            if far.write_all(&b).await.is_err() {
                return;
            }
            // Until the far end is gone.
            while far
                .write_all(&frame(CONTINUATION, 0, 1, &[1]))
                .await
                .is_ok()
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let started = Instant::now();
        let e = loop {
            match w.read(&mut buf).await {
                Ok(_) => continue,
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= timeout - Duration::from_millis(50));
        drop(w);
        trickle.await.unwrap();
    }

    #[tokio::test]
    async fn a_connection_whose_requests_come_whole_stays_open() {
        let timeout = Duration::from_millis(100);
        let (near, mut far) = tokio::io::duplex(1 << 16);
        let mut w = HeaderWatch::new(near, Instant::now(), timeout);
        far.write_all(&session()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = 0;
        while got < session().len() {
            got += w.read(&mut buf).await.unwrap();
        }
        assert!(w.waiting_since.is_none());
        // Idle well past the timeout between requests: nothing is awaited, nothing closes.
        let idle = tokio::time::timeout(timeout * 4, w.read(&mut buf)).await;
        assert!(idle.is_err(), "still open and waiting for bytes");
        far.write_all(&frame(HEADERS, END_HEADERS, 3, &[1, 2, 3]))
            .await
            .unwrap();
        assert_eq!(w.read(&mut buf).await.unwrap(), 12);
        w.write_all(b"response").await.unwrap();
        assert!(w.waiting_since.is_none());
    }

    #[tokio::test]
    async fn a_cut_connection_fails_its_pending_read() {
        let conns = Connections::default();
        let (near, _far) = tokio::io::duplex(64);
        let mut near = conns.wrap(near);
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 8];
            near.read(&mut buf).await
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(conns.live(), 1);
        let cut = conns
            .shutdown(Instant::now() + Duration::from_millis(50))
            .await;
        assert_eq!(cut, 1);
        let read = reader.await.unwrap();
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::ConnectionAborted);
        assert_eq!(conns.live(), 0);
    }
}
