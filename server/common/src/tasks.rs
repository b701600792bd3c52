//! Task owners. Every task the node spawns belongs to a `Tasks` held by the component that
//! spawned it: the engine its loops, the node its servers, the dispatcher its instance
//! workers and redeliveries, each coalescer its flushes. On shutdown the owner waits for its tasks until
//! a deadline (the node's shutdown grace), then closes (no task is accepted any more) and
//! aborts what is left, so that no task outlives `Node::shutdown`. The gRPC server's
//! connections are tonic's tasks, cut at the deadline by `connections::Connections`.

use std::{
    future::Future,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use tokio::{sync::Notify, task::JoinSet, time::Instant};

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
pub struct Live {
    count: AtomicUsize,
    idle: Notify,
}

/// Held by a task's future: counts it live until the future is dropped (done or aborted).
pub struct LiveGuard(Arc<Live>);

impl LiveGuard {
    pub fn new(live: Arc<Live>) -> Self {
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
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits until the count is 0 or `deadline` has passed.
    pub async fn idle_by(&self, deadline: Instant) {
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
}
