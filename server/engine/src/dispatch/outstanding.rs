//! What a bucket being fed waits for before it may be deleted (`Dispatcher::feed_bucket`).

use futures::{stream::FuturesUnordered, FutureExt, StreamExt};

use super::claims::Done;

/// The resolutions a fed bucket waits for. Each is reaped as soon as it has come, so the set
/// holds only the unresolved ones (about what is in flight) rather than one per pointer of
/// the bucket: with 50,000-pointer buckets the latter was most of the node's memory at a
/// million-item drain.
#[derive(Default)]
pub(super) struct Outstanding {
    pending: FuturesUnordered<Done>,
    /// Whether one was dropped unresolved (the node is stopping).
    dropped: bool,
}

impl Outstanding {
    pub(super) fn push(&mut self, done: Done) {
        self.pending.push(done);
        // Polls what is ready without waiting; the rest is polled again in `settled`. Outside
        // tokio's cooperative budget: once a task has spent it, a ready oneshot reads as
        // pending until the task yields, and a bucket is often fed without yielding.
        while let Some(Some(r)) = tokio::task::unconstrained(self.pending.next()).now_or_never() {
            self.reap(r.is_ok());
        }
    }

    fn reap(&mut self, resolved: bool) {
        self.dropped |= !resolved;
    }

    /// Waits for the rest; true when every one was resolved.
    pub(super) async fn settled(mut self) -> bool {
        while let Some(r) = self.pending.next().await {
            self.reap(r.is_ok());
        }
        !self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    fn done() -> (oneshot::Sender<()>, Done) {
        let (tx, rx) = oneshot::channel();
        (tx, rx.shared())
    }

    #[tokio::test]
    async fn a_fed_bucket_holds_only_its_unresolved_resolutions() {
        let mut out = Outstanding::default();
        let mut open = Vec::new();
        for i in 0..10_000 {
            let (tx, d) = done();
            out.push(d);
            if i % 1_000 == 0 {
                open.push(tx);
            } else {
                let _ = tx.send(());
            }
        }
        // Each resolved one is reaped by the pushes after it, however long the bucket.
        assert!(
            out.pending.len() <= open.len() + 1,
            "{} held",
            out.pending.len()
        );
        for tx in open {
            let _ = tx.send(());
        }
        assert!(out.settled().await);
    }

    #[tokio::test]
    async fn one_dropped_unresolved_keeps_the_bucket() {
        let mut out = Outstanding::default();
        let (tx, d) = done();
        out.push(d);
        drop(tx);
        let (tx, d) = done();
        out.push(d);
        let _ = tx.send(());
        assert!(!out.settled().await);
    }
}
