"""Retry policy overrides carried on an enqueue."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from rebound.v1 import types_pb2

from ._time import from_duration, to_duration


@dataclass
class RetryPolicy:
    """Overrides of the service's retry policy; ``None`` keeps the service's (then the node's)
    default: 1 s initial backoff, x2, +/-20 % jitter, 5 attempts, 30 s ack timeout. Retries stop
    at whichever of ``max_attempts`` and ``max_retry_duration`` comes first. The server
    validates every field and names the one it refuses."""

    max_attempts: int | None = None
    initial_backoff: timedelta | None = None
    max_backoff: timedelta | None = None
    multiplier: float | None = None
    jitter: float | None = None
    max_retry_duration: timedelta | None = None
    ack_timeout: timedelta | None = None
    max_deliveries_per_attempt: int | None = None
    non_retryable_error_classes: Sequence[str] = field(default_factory=list)
    unlimited_attempts: bool | None = None

    def to_proto(self) -> types_pb2.RetryPolicy:
        p = types_pb2.RetryPolicy()
        if self.max_attempts is not None:
            p.max_attempts = self.max_attempts
        if self.initial_backoff is not None:
            p.initial_backoff.CopyFrom(to_duration(self.initial_backoff))
        if self.max_backoff is not None:
            p.max_backoff.CopyFrom(to_duration(self.max_backoff))
        if self.multiplier is not None:
            p.multiplier = self.multiplier
        if self.jitter is not None:
            p.jitter = self.jitter
        if self.max_retry_duration is not None:
            p.max_retry_duration.CopyFrom(to_duration(self.max_retry_duration))
        if self.ack_timeout is not None:
            p.ack_timeout.CopyFrom(to_duration(self.ack_timeout))
        if self.max_deliveries_per_attempt is not None:
            p.max_deliveries_per_attempt = self.max_deliveries_per_attempt
        p.non_retryable_error_classes.extend(self.non_retryable_error_classes)
        if self.unlimited_attempts is not None:
            p.unlimited_attempts = self.unlimited_attempts
        return p

    @classmethod
    def from_proto(cls, p: types_pb2.RetryPolicy) -> RetryPolicy:
        def dur(name: str) -> timedelta | None:
            return from_duration(getattr(p, name)) if p.HasField(name) else None

        return cls(
            max_attempts=p.max_attempts if p.HasField("max_attempts") else None,
            initial_backoff=dur("initial_backoff"),
            max_backoff=dur("max_backoff"),
            multiplier=p.multiplier if p.HasField("multiplier") else None,
            jitter=p.jitter if p.HasField("jitter") else None,
            max_retry_duration=dur("max_retry_duration"),
            ack_timeout=dur("ack_timeout"),
            max_deliveries_per_attempt=(
                p.max_deliveries_per_attempt if p.HasField("max_deliveries_per_attempt") else None
            ),
            non_retryable_error_classes=list(p.non_retryable_error_classes),
            unlimited_attempts=(p.unlimited_attempts if p.HasField("unlimited_attempts") else None),
        )
