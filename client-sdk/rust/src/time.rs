//! Conversions between `std::time` and the protobuf well-known types.

use std::time::{Duration, SystemTime};

use crate::error::{malformed, Error};

/// A `std` duration as a protobuf duration. Durations past `i64::MAX` seconds (about 292
/// billion years) saturate instead of failing, since nothing meaningful is lost.
pub(crate) fn duration_to_proto(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    })
}

/// A protobuf duration as a `std` duration. The server never sends negative durations; should
/// one appear, zero is the closest meaningful value for a delay or timeout.
pub(crate) fn duration_from_proto(d: prost_types::Duration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}

pub(crate) fn time_to_proto(t: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(t)
}

/// A timestamp the API always sets. Its absence, or a value this platform cannot represent,
/// means the response does not match the contract.
pub(crate) fn required_time(
    field: &str,
    t: Option<prost_types::Timestamp>,
) -> Result<SystemTime, Error> {
    let t = t.ok_or_else(|| malformed(format_args!("{field} is missing")))?;
    SystemTime::try_from(t).map_err(|e| malformed(format_args!("{field}: {e}")))
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn durations_round_trip() {
        for d in [
            Duration::ZERO,
            Duration::from_millis(1_500),
            Duration::from_nanos(1),
            Duration::from_secs(86_400 * 365),
        ] {
            let p = duration_to_proto(d);
            assert_eq!(duration_from_proto(p), d);
        }
        assert_eq!(
            duration_to_proto(Duration::from_millis(2_250)),
            prost_types::Duration {
                seconds: 2,
                nanos: 250_000_000
            }
        );
    }

    #[test]
    fn huge_duration_saturates() {
        let p = duration_to_proto(Duration::MAX);
        assert_eq!(p.seconds, i64::MAX);
    }

    #[test]
    fn negative_duration_reads_as_zero() {
        let p = prost_types::Duration {
            seconds: -3,
            nanos: 0,
        };
        assert_eq!(duration_from_proto(p), Duration::ZERO);
    }

    #[test]
    fn timestamps_round_trip() {
        for t in [
            UNIX_EPOCH,
            UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789),
            UNIX_EPOCH - Duration::new(10, 500_000_000),
        ] {
            let p = time_to_proto(t);
            assert_eq!(required_time("t", Some(p)).unwrap(), t);
        }
        // Before the epoch, nanos stay positive and seconds round down, as protobuf requires.
        assert_eq!(
            time_to_proto(UNIX_EPOCH - Duration::from_millis(1_500)),
            prost_types::Timestamp {
                seconds: -2,
                nanos: 500_000_000
            }
        );
    }

    #[test]
    fn missing_required_time_is_an_internal_error() {
        let e = required_time("due_time", None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Internal);
        assert!(e.to_string().contains("due_time is missing"), "{e}");
    }
}
