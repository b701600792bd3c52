//! Keeping a delivery's ack deadline ahead of a long-running handler.

use std::time::{Duration, SystemTime};

use rebound_proto::v1::{self as pb, executor_service_client::ExecutorServiceClient};
use tokio::time::{sleep, timeout, Instant};
use tonic::Code;

use crate::transport::Transport;

use crate::{error::is_retryable_code, time::duration_to_proto};

use super::RPC_TIMEOUT;

/// Never extend more often than this, however close the deadline: bounds the calls per
/// delivery when the deadline is (or seems, with clock skew) already due.
pub(crate) const MIN_EXTENSION_INTERVAL: Duration = Duration::from_millis(50);

/// The server's smallest ack timeout; a shorter observed span is clock skew or latency.
pub(crate) const MIN_EXTENSION: Duration = Duration::from_secs(1);

/// How long to wait before the next `ExtendDeadline`, with `remaining` left until the ack
/// deadline: half of it, so a slow or failed call still leaves time for another, and at most
/// `every` when set.
pub(crate) fn next_extension_in(remaining: Duration, every: Option<Duration>) -> Duration {
    let half = remaining / 2;
    every
        .map_or(half, |every| half.min(every))
        .max(MIN_EXTENSION_INTERVAL)
}

/// How far each `ExtendDeadline` pushes the deadline: the configured span, or else the ack
/// timeout the delivery came with, as observed between its arrival and its deadline.
pub(crate) fn extension_span(
    configured: Option<Duration>,
    ack_deadline: SystemTime,
    received: SystemTime,
) -> Duration {
    configured.unwrap_or_else(|| {
        ack_deadline
            .duration_since(received)
            .unwrap_or(Duration::ZERO)
            .max(MIN_EXTENSION)
    })
}

/// A server timestamp on the local monotonic clock, given a reading of both local clocks.
/// A time in the past maps to `now`.
pub(crate) fn local_instant(t: SystemTime, now_wall: SystemTime, now: Instant) -> Instant {
    now + t.duration_since(now_wall).unwrap_or(Duration::ZERO)
}

/// Extends the deadline of `delivery_id` before it comes, for as long as it is polled.
///
/// Returns when extending is no longer possible: the server no longer knows the delivery
/// (it was redelivered, or its stream closed), or the deadline passed while calls failed.
/// The handler keeps running either way; its ack will likely be rejected as stale.
pub(crate) async fn keep_extended(
    mut client: ExecutorServiceClient<Transport>,
    delivery_id: String,
    mut deadline: Instant,
    span: Duration,
    every: Option<Duration>,
) {
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        sleep(next_extension_in(remaining, every)).await;
        let request = pb::ExtendDeadlineRequest {
            delivery_id: delivery_id.clone(),
            extension: Some(duration_to_proto(span)),
        };
        let sent = Instant::now();
        let sent_wall = SystemTime::now();
        let status = match timeout(RPC_TIMEOUT, client.extend_deadline(request)).await {
            Ok(Ok(response)) => {
                let new_deadline = response
                    .into_inner()
                    .ack_deadline
                    .and_then(|t| SystemTime::try_from(t).ok())
                    .map(|t| local_instant(t, sent_wall, sent))
                    // A deadline that is missing or seems past (clock skew): assume the
                    // server pushed it by `span` from when it got the call.
                    .filter(|t| *t > sent)
                    .unwrap_or(sent + span);
                tracing::debug!(
                    delivery_id,
                    extended_by = ?span,
                    remaining = ?new_deadline.saturating_duration_since(Instant::now()),
                    "extended the ack deadline"
                );
                deadline = new_deadline;
                continue;
            }
            Ok(Err(status)) => status,
            Err(_) => tonic::Status::deadline_exceeded("ExtendDeadline timed out"),
        };
        match status.code() {
            Code::NotFound | Code::FailedPrecondition => {
                tracing::warn!(
                    delivery_id,
                    code = ?status.code(),
                    message = status.message(),
                    "cannot extend the ack deadline: the server has given the delivery up \
                     (it will be or was redelivered); its ack will likely be rejected"
                );
                return;
            }
            code if is_retryable_code(code) && Instant::now() < deadline => {
                tracing::warn!(
                    delivery_id,
                    ?code,
                    message = status.message(),
                    "extending the ack deadline failed; trying again"
                );
            }
            code => {
                tracing::warn!(
                    delivery_id,
                    ?code,
                    message = status.message(),
                    "extending the ack deadline failed; giving up, the delivery may be \
                     redelivered while the handler runs"
                );
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn extends_at_half_the_remaining_time() {
        assert_eq!(next_extension_in(30 * S, None), 15 * S);
        assert_eq!(
            next_extension_in(3 * S, None),
            1_500 * Duration::from_millis(1)
        );
        // `every` caps the interval but never delays past half the remaining time.
        assert_eq!(next_extension_in(30 * S, Some(5 * S)), 5 * S);
        assert_eq!(next_extension_in(4 * S, Some(5 * S)), 2 * S);
        // A deadline that is due (or past) is extended right away, but not in a busy loop.
        assert_eq!(
            next_extension_in(Duration::ZERO, None),
            MIN_EXTENSION_INTERVAL
        );
        assert_eq!(
            next_extension_in(Duration::from_millis(20), Some(Duration::ZERO)),
            MIN_EXTENSION_INTERVAL
        );
    }

    #[test]
    fn extension_span_is_the_observed_ack_timeout() {
        let received = UNIX_EPOCH + 1_000 * S;
        assert_eq!(extension_span(None, received + 30 * S, received), 30 * S);
        assert_eq!(
            extension_span(Some(120 * S), received + 30 * S, received),
            120 * S
        );
        // Skew or latency can make the observed span tiny or negative; 1 s is the server's
        // minimum ack timeout.
        assert_eq!(
            extension_span(None, received + Duration::from_millis(300), received),
            MIN_EXTENSION
        );
        assert_eq!(
            extension_span(None, received - 5 * S, received),
            MIN_EXTENSION
        );
    }

    #[test]
    fn server_times_map_onto_the_monotonic_clock() {
        let now = Instant::now();
        let wall = UNIX_EPOCH + 1_000 * S;
        assert_eq!(local_instant(wall + 10 * S, wall, now), now + 10 * S);
        assert_eq!(local_instant(wall - 10 * S, wall, now), now);
    }
}
