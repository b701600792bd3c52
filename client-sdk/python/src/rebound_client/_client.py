"""The synchronous client: enqueue (one or a batch), get and cancel."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import TracebackType
from typing import TypeVar

import grpc

from rebound.v1 import retry_pb2, retry_pb2_grpc, types_pb2

from . import _overload
from ._errors import ItemError, ReboundError, code_of
from ._policy import RetryPolicy
from ._time import from_duration, from_timestamp, to_duration, to_timestamp
from ._transport import Tls, auth_metadata, sync_channel, trace_metadata

T = TypeVar("T")


class RetryStatus(enum.Enum):
    UNSPECIFIED = types_pb2.RETRY_STATUS_UNSPECIFIED
    #: Waiting for its due window, or delivered and not yet acknowledged.
    SCHEDULED = types_pb2.RETRY_STATUS_SCHEDULED
    SUCCEEDED = types_pb2.RETRY_STATUS_SUCCEEDED
    #: Retries exhausted or a non-retryable failure; a dead letter exists.
    DEAD = types_pb2.RETRY_STATUS_DEAD
    CANCELLED = types_pb2.RETRY_STATUS_CANCELLED
    #: In listings only (``list_retries(statuses=[RetryStatus.IN_FLIGHT])``): scheduled,
    #: delivered and awaiting its ack.
    IN_FLIGHT = types_pb2.RETRY_STATUS_IN_FLIGHT


@dataclass
class Compensation:
    """A compensation of a saga step, for ``compensations=`` on an enqueue: a retry of its own,
    of ``service`` with the idempotency key ``transaction_id``, which that service's executors
    run like any other delivery (so its handler must be idempotent).

    A step's compensations run in the order given when its retry ends DEAD (attempts or
    duration exhausted, FAILED, a non-retryable class): Rebound enqueues the first, and each
    next one only once the one before it was acknowledged SUCCEEDED; so list them in the order
    they must run (usually the reverse of the steps they undo). None runs when the retry ends
    SUCCEEDED or CANCELLED. At most 32 per enqueue, with at most ``REBOUND_MAX_PAYLOAD_BYTES``
    of payloads in all. Unless ``policy`` says otherwise, each is retried with unlimited
    attempts for at most 24 hours, then dead-lettered for a human."""

    service: str
    transaction_id: str
    #: Opaque bytes handed to the compensation's executor.
    payload: bytes = b""
    attributes: Mapping[str, str] = field(default_factory=dict)
    #: Overrides of the compensation service's policy.
    policy: RetryPolicy | None = None

    def to_proto(self) -> types_pb2.Compensation:
        c = types_pb2.Compensation(
            service=self.service,
            transaction_id=self.transaction_id,
            payload=self.payload,
            attributes=dict(self.attributes),
        )
        if self.policy is not None:
            c.policy.CopyFrom(self.policy.to_proto())
        return c


@dataclass
class EnqueueRequest:
    """One retry to schedule. ``delay`` or ``due_time`` (not both); neither: the policy's
    backoff for ``attempt``. ``attempt`` counts the tries the caller already made."""

    service: str
    transaction_id: str
    payload: bytes = b""
    delay: timedelta | float | None = None
    due_time: datetime | None = None
    policy: RetryPolicy | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)
    attempt: int = 1
    last_error: str = ""
    #: The W3C trace context of the call that failed, when it is not the current one.
    traceparent: str = ""
    tracestate: str = ""
    #: The downstream dependency the retry waits on (e.g. ``"payments-gateway"``): while it
    #: is held, the retry is not delivered and uses no attempt. Empty: none.
    dependency: str = ""
    #: The compensations of this saga step, in the order they must run should it end DEAD
    #: (see :class:`Compensation`).
    compensations: Sequence[Compensation] = field(default_factory=list)

    def to_proto(self) -> retry_pb2.EnqueueRetryRequest:
        if self.delay is not None and self.due_time is not None:
            raise ValueError("enqueue: set delay or due_time, not both")
        r = retry_pb2.EnqueueRetryRequest(
            service=self.service,
            transaction_id=self.transaction_id,
            payload=self.payload,
            attributes=dict(self.attributes),
            attempt=self.attempt,
            last_error=self.last_error,
            dependency=self.dependency,
            compensations=[c.to_proto() for c in self.compensations],
        )
        if self.delay is not None:
            r.delay.CopyFrom(to_duration(self.delay))
        elif self.due_time is not None:
            r.due_time.CopyFrom(to_timestamp(self.due_time))
        if self.policy is not None:
            r.policy.CopyFrom(self.policy.to_proto())
        if self.traceparent:
            r.trace_context.traceparent = self.traceparent
            r.trace_context.tracestate = self.tracestate
        return r


@dataclass(frozen=True)
class Enqueued:
    transaction_id: str
    #: When the retry first becomes eligible for delivery (the end of its window).
    due_time: datetime | None
    generation: int
    #: True when the transaction was already pending and this call rescheduled or confirmed it.
    deduplicated: bool

    @classmethod
    def from_proto(cls, r: retry_pb2.EnqueueRetryResponse) -> Enqueued:
        return cls(r.transaction_id, from_timestamp(r.due_time), r.generation, r.deduplicated)


class AttemptOutcome(enum.Enum):
    """How an attempt ended (:attr:`Attempt.outcome`)."""

    UNSPECIFIED = types_pb2.ATTEMPT_OUTCOME_UNSPECIFIED
    SUCCEEDED = types_pb2.ATTEMPT_OUTCOME_SUCCEEDED
    #: Acked RETRY: the attempt failed and counts.
    RETRY = types_pb2.ATTEMPT_OUTCOME_RETRY
    FAILED = types_pb2.ATTEMPT_OUTCOME_FAILED
    #: Not acknowledged before its ack deadline, ``max_deliveries_per_attempt`` times.
    DEADLINE_EXPIRED = types_pb2.ATTEMPT_OUTCOME_DEADLINE_EXPIRED
    #: Acked RETRY with a hold of its dependency: no attempt used.
    HELD = types_pb2.ATTEMPT_OUTCOME_HELD
    #: Acked RETRY as a snooze: no attempt used.
    SNOOZED = types_pb2.ATTEMPT_OUTCOME_SNOOZED
    #: Not attempts: an operator's action (ActOnRetries); ``executor_id`` names who acted,
    #: ``error`` the reason given.
    RUN_NOW = types_pb2.ATTEMPT_OUTCOME_RUN_NOW
    RESCHEDULED = types_pb2.ATTEMPT_OUTCOME_RESCHEDULED
    CANCELLED = types_pb2.ATTEMPT_OUTCOME_CANCELLED
    DEAD_LETTERED = types_pb2.ATTEMPT_OUTCOME_DEAD_LETTERED


@dataclass(frozen=True)
class Attempt:
    """One attempt of a retry (:attr:`Retry.attempts`)."""

    #: Its number: the ``Delivery.attempt`` it was delivered with.
    attempt: int
    delivered_at: datetime | None
    ended_at: datetime | None
    #: How long the executor took.
    duration: timedelta
    #: The node that delivered it, and the executor it went to (``push`` for a push target).
    node_id: str
    executor_id: str
    outcome: AttemptOutcome
    #: The ack's error (its first 512 bytes) and error class.
    error: str
    error_class: str
    #: The ``retry_after`` the ack asked for; None: none.
    retry_after: timedelta | None
    #: Deliveries the attempt took (more than 1 after expired ack deadlines).
    deliveries: int

    @classmethod
    def from_proto(cls, a: types_pb2.Attempt) -> Attempt:
        try:
            outcome = AttemptOutcome(a.outcome)
        except ValueError:
            outcome = AttemptOutcome.UNSPECIFIED
        return cls(
            attempt=a.attempt,
            delivered_at=from_timestamp(a.delivered_at),
            ended_at=from_timestamp(a.ended_at),
            duration=from_duration(a.duration),
            node_id=a.node_id,
            executor_id=a.executor_id,
            outcome=outcome,
            error=a.error,
            error_class=a.error_class,
            retry_after=from_duration(a.retry_after) if a.HasField("retry_after") else None,
            deliveries=a.deliveries,
        )


@dataclass(frozen=True)
class ChainStep:
    """One compensation of a :class:`Chain`."""

    service: str
    transaction_id: str
    #: None: not enqueued yet (or its record has expired).
    status: RetryStatus | None


@dataclass(frozen=True)
class Chain:
    """Where a compensation chain stands (:attr:`Retry.chain`), as read when ``get`` answered."""

    #: The saga step whose retry ended DEAD and started the chain.
    saga_service: str
    saga_transaction_id: str
    #: The retry's place in the chain: 0 for the step itself, k for the k-th compensation.
    position: int
    #: Every compensation of the chain, in order.
    compensations: list[ChainStep]

    @classmethod
    def from_proto(cls, c: types_pb2.CompensationChain) -> Chain:
        def status(s: int) -> RetryStatus | None:
            try:
                known = RetryStatus(s)
            except ValueError:
                return None
            return None if known == RetryStatus.UNSPECIFIED else known

        return cls(
            saga_service=c.saga_service,
            saga_transaction_id=c.saga_transaction_id,
            position=c.position,
            compensations=[
                ChainStep(m.service, m.transaction_id, status(m.status)) for m in c.compensations
            ],
        )


@dataclass(frozen=True)
class Retry:
    """The state of one retry, as ``GetRetry`` returns it (``raw``: the whole message)."""

    service: str
    transaction_id: str
    status: RetryStatus
    attempt: int
    generation: int
    due_time: datetime | None
    last_error: str
    payload: bytes
    attributes: dict[str, str]
    policy: RetryPolicy
    first_enqueued_at: datetime | None
    last_enqueued_at: datetime | None
    updated_at: datetime | None
    enqueue_count: int
    delivery_count: int
    raw: types_pb2.Retry
    #: For a saga step or a compensation: where its compensation chain stands (None: neither).
    chain: Chain | None = None
    #: What each attempt did, oldest first: the first and the most recent, 10 in all.
    attempts: list[Attempt] = field(default_factory=list)
    #: Attempts left out between the first and the rest.
    attempts_dropped: int = 0

    @classmethod
    def from_proto(cls, r: types_pb2.Retry) -> Retry:
        return cls(
            service=r.service,
            transaction_id=r.transaction_id,
            status=RetryStatus(r.status),
            attempt=r.attempt,
            generation=r.generation,
            due_time=from_timestamp(r.due_time),
            last_error=r.last_error,
            payload=r.payload,
            attributes=dict(r.attributes),
            policy=RetryPolicy.from_proto(r.policy),
            first_enqueued_at=from_timestamp(r.first_enqueued_at),
            last_enqueued_at=from_timestamp(r.last_enqueued_at),
            updated_at=from_timestamp(r.updated_at),
            enqueue_count=r.enqueue_count,
            delivery_count=r.delivery_count,
            raw=r,
            chain=Chain.from_proto(r.chain) if r.HasField("chain") else None,
            attempts=[Attempt.from_proto(a) for a in r.attempts],
            attempts_dropped=r.attempts_dropped,
        )


@dataclass(frozen=True)
class RetrySummary:
    """One retry of a listing (:meth:`Client.list_retries`); :meth:`Client.get` gives the rest."""

    transaction_id: str
    status: RetryStatus
    attempt: int
    due_time: datetime | None
    last_error: str
    dependency: str
    #: Its place in a compensation chain (0: a saga step or none) and the chain's step.
    chain_position: int
    saga_transaction_id: str
    enqueue_count: int
    delivery_count: int
    attributes: dict[str, str]

    @classmethod
    def from_proto(cls, r: retry_pb2.RetrySummary) -> RetrySummary:
        return cls(
            transaction_id=r.transaction_id,
            status=RetryStatus(r.status),
            attempt=r.attempt,
            due_time=from_timestamp(r.due_time),
            last_error=r.last_error,
            dependency=r.dependency,
            chain_position=r.chain_position,
            saga_transaction_id=r.saga_transaction_id,
            enqueue_count=r.enqueue_count,
            delivery_count=r.delivery_count,
            attributes=dict(r.attributes),
        )


@dataclass(frozen=True)
class Cancelled:
    #: CANCELLED, or the terminal status the retry already had.
    status: RetryStatus
    #: False when the retry had already finished before this call.
    cancelled: bool


class Client:
    """A synchronous client of one Rebound node (or a load balancer in front of several).

    ``address``: ``host:port``, ``http://host:port`` or ``https://host:port``. ``token``: the
    bearer token when the node has credentials. ``tls``: TLS options (https implies TLS).
    ``timeout``: seconds per call, its retries under overload included. Thread-safe; one per
    process is enough.

    A call the node sheds under load (RESOURCE_EXHAUSTED: it did nothing) is made again after
    the node's ``grpc-retry-pushback-ms`` hint times [1, 1.5) (without a hint: 100 ms, x2 per
    retry, capped at 5 s, +/-20 %), up to ``max_overload_retries`` times (default 9: ten calls
    in all), 30 s of waiting and the call's ``timeout``; then it raises RESOURCE_EXHAUSTED.
    ``max_overload_retries=0`` turns this off. No other code is retried.
    """

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        tls: Tls | None = None,
        timeout: float = 30.0,
        max_overload_retries: int = _overload.DEFAULT_RETRIES,
    ) -> None:
        if max_overload_retries < 0:
            raise ValueError("max_overload_retries cannot be negative")
        self.address = address
        self._token = token
        self._timeout = timeout
        self._overload_retries = max_overload_retries
        self._channel = sync_channel(address, tls)
        self._stub = retry_pb2_grpc.RetryServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return auth_metadata(self._token) + trace_metadata()

    def _call(self, fn: Callable[[float], T]) -> T:
        """``fn(timeout)``, again while the node sheds it, within the client's timeout; a
        failure raises :class:`ReboundError`."""
        end = time.monotonic() + self._timeout
        try:
            return _overload.call(
                lambda: fn(max(0.001, end - time.monotonic())),
                retries=self._overload_retries,
                deadline=end,
            )
        except grpc.RpcError as e:
            raise ReboundError.from_rpc(e) from None

    def enqueue(
        self,
        service: str,
        transaction_id: str,
        *,
        payload: bytes = b"",
        delay: timedelta | float | None = None,
        due_time: datetime | None = None,
        policy: RetryPolicy | None = None,
        attributes: Mapping[str, str] | None = None,
        attempt: int = 1,
        last_error: str = "",
        dependency: str = "",
        compensations: Sequence[Compensation] = (),
    ) -> Enqueued:
        """Schedules a retry. Idempotent by (service, transaction_id): a repeat reschedules or
        confirms the pending retry (``deduplicated``) and never doubles it, so re-sending after
        a retryable error is safe.

        ``compensations``: for a saga step, what undoes it and the steps before it, in the
        order they must run. They run when the retry ends DEAD (attempts or duration
        exhausted, FAILED, a non-retryable class), each only after the one before it was
        acknowledged SUCCEEDED; none runs when it ends SUCCEEDED or CANCELLED. At most 32, with
        at most ``REBOUND_MAX_PAYLOAD_BYTES`` of payloads in all; each is retried by default
        with unlimited attempts for at most 24 hours (see :class:`Compensation`)."""
        request = EnqueueRequest(
            service=service,
            transaction_id=transaction_id,
            payload=payload,
            delay=delay,
            due_time=due_time,
            policy=policy,
            attributes=attributes or {},
            attempt=attempt,
            last_error=last_error,
            dependency=dependency,
            compensations=list(compensations),
        )
        message, metadata = request.to_proto(), self._metadata()
        r = self._call(lambda t: self._stub.EnqueueRetry(message, timeout=t, metadata=metadata))
        return Enqueued.from_proto(r)

    def enqueue_batch(self, requests: Sequence[EnqueueRequest]) -> list[Enqueued | ItemError]:
        """Many enqueues in one call; each item gets its own result, in order, and a bad item
        fails alone (its :class:`ItemError` is returned, not raised)."""
        batch = retry_pb2.EnqueueRetryBatchRequest(requests=[r.to_proto() for r in requests])
        metadata = self._metadata()
        r = self._call(lambda t: self._stub.EnqueueRetryBatch(batch, timeout=t, metadata=metadata))
        out: list[Enqueued | ItemError] = []
        for item in r.results:
            if item.HasField("response"):
                out.append(Enqueued.from_proto(item.response))
            else:
                out.append(ItemError(code_of(item.error.code), item.error.message))
        return out

    def get(self, service: str, transaction_id: str) -> Retry:
        """The state of a retry; NOT_FOUND when there is none (or it expired)."""
        message = retry_pb2.GetRetryRequest(service=service, transaction_id=transaction_id)
        metadata = self._metadata()
        r = self._call(lambda t: self._stub.GetRetry(message, timeout=t, metadata=metadata))
        return Retry.from_proto(r)

    def list_retries(
        self,
        service: str,
        *,
        statuses: Sequence[RetryStatus] = (),
        attributes: Mapping[str, str] | None = None,
        error_contains: str = "",
        dependency: str = "",
        saga_transaction_id: str = "",
        due_after: datetime | None = None,
        due_before: datetime | None = None,
        page_size: int = 100,
    ) -> Iterator[RetrySummary]:
        """The service's retries that match, fetched a page at a time as the iteration goes on
        (``ListRetries``): scheduled ones by due time, unless ``statuses`` names others
        (``IN_FLIGHT``, ``DEAD``, ``SUCCEEDED``, ``CANCELLED``; listed in that order, the
        finished ones in the order they finished)."""
        token = ""
        metadata = self._metadata()
        while True:
            message = retry_pb2.ListRetriesRequest(
                service=service,
                statuses=[s.value for s in statuses],
                attributes=dict(attributes or {}),
                error_contains=error_contains,
                dependency=dependency,
                saga_transaction_id=saga_transaction_id,
                page_size=page_size,
                page_token=token,
            )
            if due_after is not None:
                message.due_after.CopyFrom(to_timestamp(due_after))
            if due_before is not None:
                message.due_before.CopyFrom(to_timestamp(due_before))
            r = self._list_page(message, metadata)
            for row in r.retries:
                yield RetrySummary.from_proto(row)
            token = r.next_page_token
            if not token:
                return

    def _list_page(
        self, message: retry_pb2.ListRetriesRequest, metadata: tuple[tuple[str, str], ...]
    ) -> retry_pb2.ListRetriesResponse:
        r: retry_pb2.ListRetriesResponse = self._call(
            lambda t: self._stub.ListRetries(message, timeout=t, metadata=metadata)
        )
        return r

    def cancel(self, service: str, transaction_id: str) -> Cancelled:
        """Stops a pending retry; a finished one keeps its status (``cancelled`` False)."""
        message = retry_pb2.CancelRetryRequest(service=service, transaction_id=transaction_id)
        metadata = self._metadata()
        r = self._call(lambda t: self._stub.CancelRetry(message, timeout=t, metadata=metadata))
        return Cancelled(RetryStatus(r.status), r.cancelled)
