"""Conversions between Python times and the protobuf well-known types."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from google.protobuf import duration_pb2, timestamp_pb2


def to_duration(d: timedelta | float) -> duration_pb2.Duration:
    """A protobuf Duration from a timedelta or a number of seconds (at least 0)."""
    seconds = d.total_seconds() if isinstance(d, timedelta) else float(d)
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative: {seconds} s")
    out = duration_pb2.Duration()
    whole = int(seconds)
    out.seconds = whole
    out.nanos = int(round((seconds - whole) * 1e9))
    if out.nanos >= 1_000_000_000:
        out.seconds += 1
        out.nanos -= 1_000_000_000
    return out


def from_duration(d: duration_pb2.Duration) -> timedelta:
    return timedelta(seconds=d.seconds, microseconds=d.nanos // 1000)


def to_timestamp(t: datetime) -> timestamp_pb2.Timestamp:
    """A protobuf Timestamp; a naive datetime is taken as UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(t.astimezone(timezone.utc))
    return out


def from_timestamp(t: timestamp_pb2.Timestamp) -> datetime | None:
    """An aware UTC datetime, or None for an unset (zero) timestamp."""
    if t.seconds == 0 and t.nanos == 0:
        return None
    return datetime.fromtimestamp(t.seconds + t.nanos / 1e9, tz=timezone.utc)
