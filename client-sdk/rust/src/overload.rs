//! Calls a node shed under load: a node whose request byte budget is full answers
//! RESOURCE_EXHAUSTED before it reads the request (nothing was done), with a
//! `grpc-retry-pushback-ms` hint. Such a call is made again after the hint (or a capped
//! exponential backoff when there is none), a bounded number of times, and only then does
//! the caller see the error. No other code is retried here.

use std::{future::Future, time::Duration};

use tonic::{Code, Status};

use crate::executor::backoff::Backoff;

/// Most calls of one request while the node sheds it (the first included).
pub const OVERLOAD_ATTEMPTS: u32 = 10;
/// Most time spent waiting between them.
pub const OVERLOAD_WAIT: Duration = Duration::from_secs(30);

/// Without a hint: 100 ms, 200 ms, ... up to 5 s, with jitter.
const NO_HINT: Backoff = Backoff {
    initial: Duration::from_millis(100),
    max: Duration::from_secs(5),
};

/// The node's retry hint of a shed call, when it gave a valid one.
pub(crate) fn pushback(status: &Status) -> Option<Duration> {
    let ms: u64 = status
        .metadata()
        .get("grpc-retry-pushback-ms")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_millis(ms.min(60_000)))
}

/// How long to wait before the next call after `shed` answers, `unit` a jitter draw in [0, 1].
pub(crate) fn wait_before(retry: u32, status: &Status, unit: f64) -> Duration {
    match pushback(status) {
        // At the hint or up to half again: callers shed together do not come back together.
        Some(hint) => hint.mul_f64(1.0 + 0.5 * unit.clamp(0.0, 1.0)),
        None => NO_HINT.delay_with(retry, unit),
    }
}

/// Makes the call `call()` makes, again while the node sheds it.
pub(crate) async fn shed_aware<T, F, Fut>(mut call: F) -> Result<T, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let mut waited = Duration::ZERO;
    let mut retry = 0;
    loop {
        match call().await {
            Err(status) if status.code() == Code::ResourceExhausted => {
                let wait = wait_before(retry, &status, rand::random::<f64>());
                retry += 1;
                if retry >= OVERLOAD_ATTEMPTS || waited + wait > OVERLOAD_WAIT {
                    return Err(status);
                }
                waited += wait;
                tracing::debug!(
                    ?wait,
                    message = status.message(),
                    "the node shed the call; calling again"
                );
                tokio::time::sleep(wait).await;
            }
            other => return other,
        }
    }
}

/// [`shed_aware`] for a generated client's call: each call gets its own clone of `client`
/// and of `request` (tonic's calls take both by value or `&mut`).
pub(crate) async fn call_shed_aware<C, R, T, F, Fut>(
    client: &C,
    request: &R,
    call: F,
) -> Result<T, Status>
where
    C: Clone,
    R: Clone,
    F: Fn(C, R) -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    shed_aware(|| call(client.clone(), request.clone())).await
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn shed(hint: Option<&str>) -> Status {
        let mut s = Status::resource_exhausted("full");
        if let Some(h) = hint {
            s.metadata_mut()
                .insert("grpc-retry-pushback-ms", h.parse().unwrap());
        }
        s
    }

    #[test]
    fn the_hint_is_followed_with_up_to_half_again() {
        let s = shed(Some("250"));
        assert_eq!(wait_before(0, &s, 0.0), Duration::from_millis(250));
        assert_eq!(wait_before(5, &s, 1.0), Duration::from_millis(375));
        // Malformed or negative hints are ignored: the backoff applies.
        for bad in ["-5", "soon", ""] {
            assert_eq!(pushback(&shed(Some(bad))), None, "{bad}");
        }
        assert_eq!(wait_before(0, &shed(None), 1.0), Duration::from_millis(100));
        assert_eq!(wait_before(3, &shed(None), 1.0), Duration::from_millis(800));
    }

    #[tokio::test]
    async fn a_shed_call_is_made_again_and_other_errors_are_not() {
        let calls = AtomicU32::new(0);
        let r = shed_aware(|| async {
            match calls.fetch_add(1, Ordering::Relaxed) {
                0 | 1 => Err(shed(Some("1"))),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(r.unwrap(), 7);
        assert_eq!(calls.load(Ordering::Relaxed), 3);

        calls.store(0, Ordering::Relaxed);
        let r: Result<(), _> = shed_aware(|| async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err(Status::unavailable("down"))
        })
        .await;
        assert_eq!(r.unwrap_err().code(), Code::Unavailable);
        assert_eq!(calls.load(Ordering::Relaxed), 1);

        // Shed every time: given up after the bound, with the node's error.
        calls.store(0, Ordering::Relaxed);
        let r: Result<(), _> = shed_aware(|| async {
            calls.fetch_add(1, Ordering::Relaxed);
            Err(shed(Some("1")))
        })
        .await;
        assert_eq!(r.unwrap_err().code(), Code::ResourceExhausted);
        assert_eq!(calls.load(Ordering::Relaxed), OVERLOAD_ATTEMPTS);
    }
}
