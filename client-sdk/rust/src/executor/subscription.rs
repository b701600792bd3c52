//! One `Subscribe` stream to one node, kept up with reconnects until it is told to stop.

use std::{future::Future, sync::Arc};

use rebound_proto::v1 as pb;
use tokio::{
    sync::{mpsc, watch},
    task::JoinSet,
    time::{sleep, timeout, timeout_at, Instant},
};
use tonic::{Code, Status, Streaming};
use tracing::Instrument;

use super::{
    backoff::Backoff, check_joined, job_span, process, ExecClient, IntoOutcome, Job, Shared,
    STABLE_STREAM, SUBSCRIBE_TIMEOUT,
};

/// What the executor wants of a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Keep the stream up.
    Run,
    /// The node left the ring: take no further deliveries, let the running handlers finish
    /// and ack however long they take, then close the stream.
    Retire,
    /// The executor is shutting down: as [`Mode::Retire`], but handlers still running at the
    /// deadline are aborted.
    Drain(Instant),
}

impl Mode {
    fn is_stopping(&self) -> bool {
        *self != Mode::Run
    }
}

/// `Subscribe` failures that another try will not fix.
pub(super) fn is_fatal(code: Code) -> bool {
    matches!(
        code,
        Code::InvalidArgument
            | Code::Unimplemented
            | Code::Unauthenticated
            | Code::PermissionDenied
    )
}

async fn subscribe(
    client: &mut ExecClient,
    request: pb::SubscribeRequest,
) -> Result<Streaming<pb::Delivery>, Status> {
    match timeout(SUBSCRIBE_TIMEOUT, client.subscribe(request)).await {
        Ok(response) => response.map(tonic::Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded(
            "Subscribe did not answer in time",
        )),
    }
}

/// Subscribes through `client` and hands each delivery to a task of its own, which acks
/// through the same `client`; reconnects with `reconnect` backoff when the stream ends or
/// fails. Once `mode` leaves [`Mode::Run`], it stops taking deliveries and winds down (see
/// [`Mode`]), holding the stream open until its running handlers are done.
///
/// A `Subscribe` failure that retrying cannot fix is sent on `fatal`, after which the
/// subscription waits for its running handlers and for the executor to stop it.
pub(super) async fn run_subscription<H, F>(
    shared: Arc<Shared<H>>,
    mut client: ExecClient,
    request: pb::SubscribeRequest,
    reconnect: Backoff,
    mut mode: watch::Receiver<Mode>,
    fatal: mpsc::UnboundedSender<Status>,
) where
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: Future + Send + 'static,
    F::Output: IntoOutcome,
{
    let mut tasks = JoinSet::new();
    // This node's acks, batched while they queue (its task ends with the last handle).
    let acks = super::acks::Acks::new(client.clone());
    let mut failures = 0u32;
    // While winding down, the stream stays open so that the node keeps the running
    // deliveries assigned to this executor and accepts their acks.
    let mut held_stream = None;

    'run: loop {
        while let Some(joined) = tasks.try_join_next() {
            check_joined(joined);
        }
        let subscribed = tokio::select! {
            biased;
            _ = mode.wait_for(Mode::is_stopping) => break 'run,
            r = subscribe(&mut client, request.clone()) => r,
        };
        let mut stream = match subscribed {
            Ok(stream) => stream,
            Err(status) if is_fatal(status.code()) => {
                tracing::error!(
                    code = ?status.code(),
                    message = status.message(),
                    "cannot subscribe, and retrying will not help"
                );
                let _ = fatal.send(status);
                break 'run;
            }
            Err(status) => {
                let delay = reconnect.delay(failures);
                failures = failures.saturating_add(1);
                tracing::warn!(
                    code = ?status.code(),
                    message = status.message(),
                    retry_in = ?delay,
                    "cannot subscribe"
                );
                tokio::select! {
                    biased;
                    _ = mode.wait_for(Mode::is_stopping) => break 'run,
                    () = sleep(delay) => continue 'run,
                }
            }
        };
        tracing::info!(max_in_flight = request.max_in_flight, "subscribed");
        let opened = Instant::now();
        let mut delivered = false;
        // Set when the stream is done with: deliveries still waiting for a handler slot are
        // then dropped, as the node hands them to other executors.
        let (stop, stopped) = watch::channel(false);

        let end = loop {
            tokio::select! {
                biased;
                _ = mode.wait_for(Mode::is_stopping) => {
                    let _ = stop.send(true);
                    held_stream = Some((stream, stop));
                    break 'run;
                }
                Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                    check_joined(joined);
                }
                message = stream.message() => match message {
                    Ok(Some(delivery)) => {
                        delivered = true;
                        let span = job_span(&delivery);
                        let process = process(
                            Arc::clone(&shared),
                            client.clone(),
                            acks.clone(),
                            delivery,
                            stopped.clone(),
                        );
                        tasks.spawn(process.instrument(span));
                    }
                    Ok(None) => break None,
                    Err(status) => break Some(status),
                },
            }
        };
        let _ = stop.send(true);
        drop(stream);
        if delivered || opened.elapsed() >= STABLE_STREAM {
            failures = 0;
        }
        let delay = reconnect.delay(failures);
        failures = failures.saturating_add(1);
        match end {
            None => tracing::info!(reconnect_in = ?delay, "the node closed the stream"),
            Some(status) => tracing::warn!(
                code = ?status.code(),
                message = status.message(),
                reconnect_in = ?delay,
                "the stream failed"
            ),
        }
        tokio::select! {
            biased;
            _ = mode.wait_for(Mode::is_stopping) => break 'run,
            () = sleep(delay) => {}
        }
    }

    wind_down(&mut tasks, &mut mode).await;
    drop(held_stream);
}

/// Waits for the running deliveries: until they are all done while the node is merely out of
/// the ring (or the subscription failed), and at most until the deadline once the executor is
/// draining; handlers still running then are aborted.
async fn wind_down(tasks: &mut JoinSet<()>, mode: &mut watch::Receiver<Mode>) {
    let mut logged = None;
    loop {
        let current = *mode.borrow_and_update();
        if tasks.is_empty() {
            return;
        }
        match current {
            Mode::Drain(deadline) => {
                tracing::info!(
                    deliveries = tasks.len(),
                    timeout = ?deadline.saturating_duration_since(Instant::now()),
                    "draining: waiting for running handlers to finish and ack"
                );
                let drained = async {
                    while let Some(joined) = tasks.join_next().await {
                        check_joined(joined);
                    }
                };
                if timeout_at(deadline, drained).await.is_err() {
                    tracing::warn!(
                        deliveries = tasks.len(),
                        "drain timeout passed; aborting the remaining handlers, whose \
                         deliveries will be redelivered"
                    );
                    tasks.shutdown().await;
                }
                return;
            }
            Mode::Run | Mode::Retire => {
                if logged != Some(current) {
                    logged = Some(current);
                    tracing::info!(
                        deliveries = tasks.len(),
                        "unsubscribing once the running handlers finish and ack"
                    );
                }
                tokio::select! {
                    joined = tasks.join_next() => {
                        if let Some(joined) = joined {
                            check_joined(joined);
                        }
                    }
                    changed = mode.changed() => {
                        if changed.is_err() {
                            // The executor is gone (its `run` future was dropped).
                            tasks.shutdown().await;
                            return;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_subscribe_codes() {
        for code in [
            Code::InvalidArgument,
            Code::Unimplemented,
            Code::Unauthenticated,
            Code::PermissionDenied,
        ] {
            assert!(is_fatal(code), "{code:?}");
        }
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
            Code::Internal,
            Code::Unknown,
            Code::Cancelled,
            Code::NotFound,
        ] {
            assert!(!is_fatal(code), "{code:?}");
        }
    }
}
