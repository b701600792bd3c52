//! Task owners. Every task the node spawns belongs to a `Tasks` held by the component that
//! spawned it: the node its background loops, the dispatcher its instance workers and
//! redeliveries, each coalescer its flushes. On shutdown the owner waits for its tasks until
//! a deadline (the node's shutdown grace), then closes (no task is accepted any more) and
//! aborts what is left, so that no task outlives `Node::shutdown`. The gRPC server's
//! connections are tonic's tasks; `Connections` wraps each one so that those still open at
//! the deadline can be cut.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
    time::Duration,
};

use futures::future::BoxFuture;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::{watch, Notify},
    task::JoinSet,
    time::Instant,
};

/// The tasks of one component.
#[derive(Debug)]
pub struct Tasks {
    name: &'static str,
    inner: Mutex<Inner>,
    live: Arc<Live>,
    /// `rebound_tasks{owner = name}`: this owner's live tasks, summed over its `Tasks`.
    gauge: prometheus_client::metrics::gauge::Gauge,
}

/// Counts a task in its owner's `rebound_tasks` gauge until its future is dropped.
struct GaugeGuard(prometheus_client::metrics::gauge::Gauge);

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[derive(Debug, Default)]
struct Inner {
    set: JoinSet<()>,
    closed: bool,
}

/// Tasks whose future has not been dropped yet (running, or aborted but not yet gone).
#[derive(Debug, Default)]
struct Live {
    count: AtomicUsize,
    idle: Notify,
}

/// Held by a task's future: counts it live until the future is dropped (done or aborted).
struct LiveGuard(Arc<Live>);

impl LiveGuard {
    fn new(live: Arc<Live>) -> Self {
        live.count.fetch_add(1, Ordering::SeqCst);
        Self(live)
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Live {
    fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits until the count is 0 or `deadline` has passed.
    async fn idle_by(&self, deadline: Instant) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.count() == 0 || Instant::now() >= deadline {
                return;
            }
            // The poll is a backstop; the last one to finish wakes this at once.
            let wake = deadline.min(Instant::now() + Duration::from_millis(50));
            tokio::select! {
                _ = idle => {}
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

impl Tasks {
    /// `name` says whose tasks these are in the shutdown log.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            inner: Mutex::default(),
            live: Arc::default(),
            gauge: crate::metrics::global()
                .tasks
                .get_or_create(&crate::metrics::OwnerLabels { owner: name })
                .clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("tasks lock")
    }

    /// Spawns `task` as one of these tasks. Once shut down, gives it back instead: the caller
    /// runs it in place or drops it.
    pub fn spawn<F>(&self, task: F) -> Result<(), F>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut inner = self.lock();
        if inner.closed {
            return Err(task);
        }
        // Finished tasks stay in the set until joined: reap them here so it holds only the
        // running ones.
        while let Some(done) = inner.set.try_join_next() {
            self.report(done);
        }
        let guard = LiveGuard::new(self.live.clone());
        self.gauge.inc();
        let gauged = GaugeGuard(self.gauge.clone());
        inner.set.spawn(async move {
            let _live = guard;
            let _gauged = gauged;
            task.await
        });
        Ok(())
    }

    fn report(&self, done: Result<(), tokio::task::JoinError>) {
        if let Err(e) = done {
            if e.is_panic() {
                tracing::error!(owner = self.name, error = %e, "a task panicked");
            }
        }
    }

    /// Tasks not finished yet.
    pub fn live(&self) -> usize {
        self.live.count()
    }

    /// Waits until every task has finished or `deadline` has passed, then closes and aborts
    /// the tasks still running and waits for them to go. Returns how many were aborted.
    /// Tasks may spawn more tasks here until the close.
    pub async fn shutdown(&self, deadline: Instant) -> usize {
        self.live.idle_by(deadline).await;
        let mut set = {
            let mut inner = self.lock();
            inner.closed = true;
            std::mem::take(&mut inner.set)
        };
        let aborted = self.live();
        if aborted > 0 {
            tracing::warn!(
                owner = self.name,
                tasks = aborted,
                "tasks still running after the shutdown grace period, aborting them"
            );
        }
        set.abort_all();
        while let Some(done) = set.join_next().await {
            if !matches!(&done, Err(e) if e.is_cancelled()) {
                self.report(done);
            }
        }
        aborted
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
            _gauge: crate::connections::OpenGauge::new(),
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
    _gauge: crate::connections::OpenGauge,
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
    use super::*;

    #[tokio::test]
    async fn shutdown_waits_for_finishing_tasks_and_aborts_the_rest() {
        let tasks = Tasks::new("test");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tasks
            .spawn(async move {
                let _ = rx.await;
            })
            .unwrap_or_else(|_| panic!("open"));
        tasks
            .spawn(std::future::pending())
            .unwrap_or_else(|_| panic!("open"));
        assert_eq!(tasks.live(), 2);
        tx.send(()).unwrap();
        let started = Instant::now();
        let aborted = tasks
            .shutdown(Instant::now() + Duration::from_millis(200))
            .await;
        assert_eq!(aborted, 1, "the pending task is aborted");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(tasks.live(), 0);
        // Closed: a task is given back.
        assert!(tasks.spawn(async {}).is_err());
    }

    #[tokio::test]
    async fn the_tasks_gauge_counts_live_tasks_by_owner() {
        let gauge = || {
            crate::metrics::global()
                .tasks
                .get_or_create(&crate::metrics::OwnerLabels {
                    owner: "gauge-test",
                })
                .get()
        };
        let tasks = Tasks::new("gauge-test");
        tasks.spawn(async {}).unwrap_or_else(|_| panic!("open"));
        tasks
            .spawn(std::future::pending())
            .unwrap_or_else(|_| panic!("open"));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(gauge(), 1, "the finished task is no longer counted");
        tasks.shutdown(Instant::now()).await;
        assert_eq!(gauge(), 0, "nor the aborted one");
    }

    #[tokio::test]
    async fn shutdown_returns_as_soon_as_the_last_task_ends() {
        let tasks = Tasks::new("test");
        for ms in [10, 30] {
            tasks
                .spawn(tokio::time::sleep(Duration::from_millis(ms)))
                .unwrap_or_else(|_| panic!("open"));
        }
        let started = Instant::now();
        let aborted = tasks
            .shutdown(Instant::now() + Duration::from_secs(5))
            .await;
        assert_eq!((aborted, tasks.live()), (0, 0));
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_cut_connection_fails_its_pending_read() {
        use tokio::io::AsyncReadExt;
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
