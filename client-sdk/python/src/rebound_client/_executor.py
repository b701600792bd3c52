"""The asyncio executor runtime: subscribe to every node of the ring, run a handler per
delivery with bounded concurrency, keep long handlers' deadlines extended, acknowledge each
delivery (in ``AckBatch`` calls when acks queue up), reconnect with jittered backoff, and stop
gracefully."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import grpc
import grpc.aio

from rebound.v1 import executor_pb2, executor_pb2_grpc

from . import _overload
from ._errors import RETRYABLE_CODES, ReboundError
from ._time import from_timestamp, to_duration
from ._transport import Tls, aio_channel, auth_metadata

log = logging.getLogger("rebound_client")

#: Subscribe failures that retrying cannot fix: ``run`` raises them.
FATAL_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)
#: The server's limit on an ack's error text.
MAX_ERROR_BYTES = 8192
#: The node's limit on a hold's reason.
MAX_HOLD_REASON_BYTES = 1024
#: Acks in one AckBatch call, and ack calls in flight per node.
MAX_ACK_BATCH = 500
ACK_CALLS = 4
RPC_TIMEOUT = 10.0
#: Codes after which an ack is sent again (a few times, with backoff). RESOURCE_EXHAUSTED is
#: not among them: a shed ack is already made again after the node's hint (``_overload``).
ACK_AGAIN_CODES = RETRYABLE_CODES - {grpc.StatusCode.RESOURCE_EXHAUSTED}


@dataclass(frozen=True)
class Job:
    """One delivery of a due retry."""

    delivery_id: str
    service: str
    transaction_id: str
    #: This delivery's attempt number (the caller's own tries included).
    attempt: int
    payload: bytes
    attributes: dict[str, str]
    due_time: datetime | None
    first_enqueued_at: datetime | None
    ack_deadline: datetime | None
    last_error: str
    #: The trace context stored at the first enqueue (empty when none).
    traceparent: str
    tracestate: str
    #: The node that sent it (acks and extensions go back to it).
    node: str
    #: The dependency the retry names (empty: none); ``Outcome.hold`` holds it.
    dependency: str = ""

    @classmethod
    def from_proto(cls, d: executor_pb2.Delivery, node: str) -> Job:
        return cls(
            delivery_id=d.delivery_id,
            service=d.service,
            transaction_id=d.transaction_id,
            attempt=d.attempt,
            payload=d.payload,
            attributes=dict(d.attributes),
            due_time=from_timestamp(d.due_time),
            first_enqueued_at=from_timestamp(d.first_enqueued_at),
            ack_deadline=from_timestamp(d.ack_deadline),
            last_error=d.last_error,
            traceparent=d.trace_context.traceparent,
            tracestate=d.trace_context.tracestate,
            node=node,
            dependency=d.dependency,
        )


@dataclass(frozen=True)
class Outcome:
    """What a handler answers; build one with the class methods."""

    kind: int
    error: str = ""
    after: timedelta | None = None
    snoozed: bool = False
    error_class: str = ""
    #: For ``Outcome.hold``: how long to hold the retry's dependency.
    hold_for: timedelta | None = None

    @classmethod
    def success(cls) -> Outcome:
        return cls(executor_pb2.ACK_OUTCOME_SUCCEEDED)

    @classmethod
    def retry(cls, error: str = "", *, after: timedelta | float | None = None) -> Outcome:
        """Try again: after ``after`` when given, else after the policy's backoff."""
        if after is not None and not isinstance(after, timedelta):
            after = timedelta(seconds=after)
        return cls(executor_pb2.ACK_OUTCOME_RETRY, error, after)

    @classmethod
    def fail(cls, error: str = "") -> Outcome:
        """A failure that retrying will not fix: dead-letter the retry now."""
        return cls(executor_pb2.ACK_OUTCOME_FAILED, error)

    @classmethod
    def snooze(cls, after: timedelta | float, reason: str = "") -> Outcome:
        """Not tried, only postponed: run again after ``after`` without using an attempt."""
        if not isinstance(after, timedelta):
            after = timedelta(seconds=after)
        return cls(executor_pb2.ACK_OUTCOME_RETRY, reason, after, True)

    @classmethod
    def hold(cls, duration: timedelta | float, reason: str = "") -> Outcome:
        """The dependency the retry names (``Job.dependency``) is down for ``duration`` (the
        Retry-After it answered, say): hold it, so that no retry naming it is delivered, in any
        service, until then, and postpone this one without using an attempt. 1 s to 24 h; the
        node refuses it for a retry that names no dependency."""
        if not isinstance(duration, timedelta):
            duration = timedelta(seconds=duration)
        return cls(executor_pb2.ACK_OUTCOME_RETRY, reason, hold_for=duration)

    def with_error_class(self, error_class: str) -> Outcome:
        """Tags the outcome with a machine-readable class (e.g. ``"http.404"``); a RETRY whose
        class the policy lists as non-retryable dead-letters at once."""
        return Outcome(self.kind, self.error, self.after, self.snoozed, error_class, self.hold_for)

    def to_ack(self, delivery_id: str) -> executor_pb2.AckRequest:
        error = self.error.encode()[:MAX_ERROR_BYTES].decode(errors="ignore")
        a = executor_pb2.AckRequest(
            delivery_id=delivery_id,
            outcome=self.kind,  # type: ignore[arg-type]
            error=error,
            snooze=self.snoozed,
            error_class=self.error_class,
        )
        if self.after is not None:
            a.retry_after.CopyFrom(to_duration(self.after))
        if self.hold_for is not None:
            a.hold.duration.CopyFrom(to_duration(self.hold_for))
            a.hold.reason = error.encode()[:MAX_HOLD_REASON_BYTES].decode(errors="ignore")
        return a


Handler = Callable[[Job], Awaitable["Outcome | None"]]


def backoff(attempt: int, base: float = 0.1, cap: float = 5.0) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)]."""
    return random.uniform(0, min(cap, base * (2 ** min(attempt, 30))))


class _Acker:
    """Sends one node's acks: one Ack when alone, AckBatch for those that queued meanwhile."""

    def __init__(
        self,
        stub: executor_pb2_grpc.ExecutorServiceStub,
        metadata: tuple[tuple[str, str], ...],
        overload_retries: int,
    ) -> None:
        self._stub = stub
        self._metadata = metadata
        self._overload_retries = overload_retries
        self._queue: deque[executor_pb2.AckRequest] = deque()
        self._wake = asyncio.Event()
        self._calls: set[asyncio.Task[None]] = set()
        self._closed = False
        self.acked = 0
        self.refused = 0
        self._task = asyncio.create_task(self._run())

    def put(self, ack: executor_pb2.AckRequest) -> None:
        self._queue.append(ack)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            while not self._queue:
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
            while len(self._calls) >= ACK_CALLS:
                await asyncio.wait(set(self._calls), return_when=asyncio.FIRST_COMPLETED)
            batch = [self._queue.popleft() for _ in range(min(MAX_ACK_BATCH, len(self._queue)))]
            t = asyncio.create_task(self._send(batch))
            self._calls.add(t)
            t.add_done_callback(self._calls.discard)

    async def _send(self, batch: list[executor_pb2.AckRequest]) -> None:
        md, retries = self._metadata, self._overload_retries
        acks = executor_pb2.AckBatchRequest(acks=batch)
        for attempt in range(6):
            try:
                if len(batch) == 1:
                    await _overload.acall(
                        lambda: self._stub.Ack(batch[0], timeout=RPC_TIMEOUT, metadata=md),
                        retries=retries,
                    )
                    self.acked += 1
                else:
                    r = await _overload.acall(
                        lambda: self._stub.AckBatch(acks, timeout=RPC_TIMEOUT, metadata=md),
                        retries=retries,
                    )
                    for item in r.results:
                        if item.HasField("response"):
                            self.acked += 1
                        else:
                            self.refused += 1
                            log.info("ack refused: %s", item.error.message)
                return
            except grpc.aio.AioRpcError as e:
                if e.code() in ACK_AGAIN_CODES and attempt < 5:
                    await asyncio.sleep(backoff(attempt))
                    continue
                # NOT_FOUND / FAILED_PRECONDITION: already handed to another executor.
                self.refused += len(batch)
                log.info("ack not accepted (%s): %s", e.code().name, e.details())
                return
            except Exception as e:  # the channel closed under the call, ...
                self.refused += len(batch)
                log.warning("ack failed: %r", e)
                return

    async def close(self) -> None:
        """Sends what is queued, waits for the calls out, and ends."""
        self._closed = True
        self._wake.set()
        await self._task
        if self._calls:
            await asyncio.wait(set(self._calls))


class _Node:
    """One subscription, over a channel of its own, to one node of the ring."""

    def __init__(
        self,
        address: str,
        channel: grpc.aio.Channel,
        metadata: tuple[tuple[str, str], ...],
        overload_retries: int,
    ) -> None:
        self.address = address
        self.channel = channel
        self.stub = executor_pb2_grpc.ExecutorServiceStub(channel)  # type: ignore[no-untyped-call]
        self.acker = _Acker(self.stub, metadata, overload_retries)
        self.call: grpc.aio.UnaryStreamCall | None = None  # type: ignore[type-arg]
        self.task: asyncio.Task[None] | None = None
        self.retiring = False
        #: Deliveries received and not yet acked, and an event set while there are none.
        self.held = 0
        self.idle = asyncio.Event()
        self.idle.set()

    def take(self) -> None:
        self.held += 1
        self.idle.clear()

    def done(self) -> None:
        self.held -= 1
        if self.held == 0:
            self.idle.set()


class Executor:
    """Runs ``handler`` for every due retry of ``service``.

    ``address``: any node (or a load balancer): it is asked for the ring (``GetRing``) at start
    and every ``ring_refresh`` seconds, and every node listed gets a subscription; without a
    ring the address itself is subscribed to. ``concurrency``: handlers at once across all
    nodes (also each stream's ``max_in_flight``). A handler returns an :class:`Outcome`
    (``None`` means success); an exception it raises becomes RETRY with its message.
    ``drain_timeout``: how long :meth:`stop` lets running handlers finish and ack.
    ``max_overload_retries``: how many times an ack, ack batch or deadline extension the node
    sheds under load (RESOURCE_EXHAUSTED) is sent again, after the node's
    ``grpc-retry-pushback-ms`` hint times [1, 1.5) (without one: 100 ms, x2, capped at 5 s,
    +/-20 %), within 30 s of waiting (an extension: within the delivery's deadline); default 9.
    """

    def __init__(
        self,
        address: str,
        service: str,
        handler: Handler,
        *,
        concurrency: int = 16,
        token: str | None = None,
        tls: Tls | None = None,
        executor_id: str | None = None,
        follow_ring: bool = True,
        ring_refresh: float = 5.0,
        drain_timeout: float = 30.0,
        max_overload_retries: int = _overload.DEFAULT_RETRIES,
    ) -> None:
        if concurrency < 1:
            raise ValueError("executor concurrency must be at least 1")
        if max_overload_retries < 0:
            raise ValueError("max_overload_retries cannot be negative")
        self.address = address
        self.service = service
        self.handler = handler
        self.concurrency = concurrency
        self.executor_id = (
            executor_id or f"{socket.gethostname()}-{os.getpid()}-{random.getrandbits(16):04x}"
        )
        self.follow_ring = follow_ring
        self.ring_refresh = ring_refresh
        self.drain_timeout = drain_timeout
        self.max_overload_retries = max_overload_retries
        self._tls = tls
        self._metadata = auth_metadata(token)
        self._nodes: dict[str, _Node] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._retiring: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self._fatal: ReboundError | None = None
        self._sem: asyncio.Semaphore | None = None
        #: Deliveries received, and acks the nodes accepted (across all nodes, ever).
        self.delivered = 0
        self._acked_gone = 0

    @property
    def acked(self) -> int:
        return self._acked_gone + sum(n.acker.acked for n in self._nodes.values())

    @property
    def nodes(self) -> list[str]:
        """The addresses subscribed to now."""
        return sorted(a for a, n in self._nodes.items() if not n.retiring)

    def stop(self) -> None:
        """Asks :meth:`run` to stop: no new handler starts, running ones finish and ack (up to
        ``drain_timeout``), then the streams close and ``run`` returns."""
        self._stop.set()

    async def run(self) -> None:
        """Runs until :meth:`stop`; raises :class:`ReboundError` when ``Subscribe`` fails in a
        way retrying cannot fix (INVALID_ARGUMENT, UNIMPLEMENTED, UNAUTHENTICATED,
        PERMISSION_DENIED), after draining."""
        self._sem = asyncio.Semaphore(self.concurrency)
        seed = aio_channel(self.address, self._tls)
        seed_stub = executor_pb2_grpc.ExecutorServiceStub(seed)  # type: ignore[no-untyped-call]
        ring_task: asyncio.Task[None] | None = None
        try:
            await self._refresh(seed_stub)
            if self.follow_ring:
                ring_task = asyncio.create_task(self._follow(seed_stub))
            await self._stop.wait()
        finally:
            self._stop.set()
            if ring_task is not None:
                ring_task.cancel()
            await self._drain()
            await seed.close(None)
        if self._fatal is not None:
            raise self._fatal

    # The ring.

    async def _ring(self, stub: executor_pb2_grpc.ExecutorServiceStub) -> list[str] | None:
        try:
            ring = await stub.GetRing(
                executor_pb2.GetRingRequest(), timeout=RPC_TIMEOUT, metadata=self._metadata
            )
        except grpc.aio.AioRpcError:
            return None
        return sorted({n.address for n in ring.nodes if n.address}) or None

    async def _refresh(self, seed_stub: executor_pb2_grpc.ExecutorServiceStub) -> None:
        addresses = await self._ring(seed_stub) if self.follow_ring else None
        if addresses is None and self.follow_ring:
            for n in list(self._nodes.values()):
                if not n.retiring and (addresses := await self._ring(n.stub)) is not None:
                    break
        if addresses is None:
            if self._nodes:
                return  # a failed GetRing leaves the subscriptions as they are
            addresses = [self.address]
        for a in addresses:
            if a not in self._nodes and not self._stop.is_set():
                self._subscribe(a)
        for a, n in list(self._nodes.items()):
            if a not in addresses and not n.retiring:
                log.info("node %s left the ring: unsubscribing once its jobs are acked", a)
                n.retiring = True
                t = asyncio.create_task(self._retire(n))
                self._retiring.add(t)
                t.add_done_callback(self._retiring.discard)

    async def _follow(self, seed_stub: executor_pb2_grpc.ExecutorServiceStub) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(self.ring_refresh * random.uniform(0.8, 1.2))
            await self._refresh(seed_stub)

    def _subscribe(self, address: str) -> None:
        node = _Node(
            address, aio_channel(address, self._tls), self._metadata, self.max_overload_retries
        )
        self._nodes[address] = node
        node.task = asyncio.create_task(self._subscription(node))

    async def _retire(self, node: _Node) -> None:
        await node.idle.wait()
        await node.acker.close()
        if node.call is not None:
            node.call.cancel()
        if node.task is not None:
            node.task.cancel()
        await node.channel.close(None)
        if self._nodes.get(node.address) is node:
            del self._nodes[node.address]
            self._acked_gone += node.acker.acked

    # One subscription.

    async def _subscription(self, node: _Node) -> None:
        assert self._sem is not None
        attempt = 0
        request = executor_pb2.SubscribeRequest(
            service=self.service, executor_id=self.executor_id, max_in_flight=self.concurrency
        )
        while not self._stop.is_set() and not node.retiring:
            try:
                node.call = node.stub.Subscribe(request, metadata=self._metadata)
                async for d in node.call:
                    attempt = 0
                    if self._stop.is_set() or node.retiring:
                        continue  # the node redelivers it once the stream closes
                    received = time.time()
                    node.take()
                    self.delivered += 1
                    await self._sem.acquire()
                    if self._stop.is_set():
                        self._sem.release()
                        node.done()
                        continue
                    job = Job.from_proto(d, node.address)
                    t = asyncio.create_task(self._handle(node, job, received))
                    self._handlers.add(t)
                    t.add_done_callback(self._handlers.discard)
                log.info("stream from %s ended; subscribing again", node.address)
            except asyncio.CancelledError:
                raise
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.CANCELLED and (self._stop.is_set() or node.retiring):
                    return
                if e.code() in FATAL_CODES:
                    log.error("subscribe to %s refused: %s", node.address, e.details())
                    self._fatal = ReboundError(e.code(), e.details() or "")
                    self._stop.set()
                    return
                log.warning(
                    "stream from %s failed (%s): %s", node.address, e.code().name, e.details()
                )
            attempt += 1
            try:
                await asyncio.wait_for(self._stop.wait(), backoff(attempt))
            except asyncio.TimeoutError:
                pass

    async def _handle(self, node: _Node, job: Job, received: float) -> None:
        assert self._sem is not None
        extender = asyncio.create_task(self._keep_extended(node, job, received))
        try:
            try:
                outcome = await self.handler(job)
                if outcome is None:
                    outcome = Outcome.success()
                elif not isinstance(outcome, Outcome):
                    outcome = Outcome.retry(f"handler returned {outcome!r}, not an Outcome")
            except Exception as e:  # a handler's exception retries the job
                outcome = Outcome.retry(f"{type(e).__name__}: {e}")
            node.acker.put(outcome.to_ack(job.delivery_id))
        finally:
            extender.cancel()
            self._sem.release()
            node.done()

    async def _keep_extended(self, node: _Node, job: Job, received: float) -> None:
        """Calls ExtendDeadline when half of the time left has passed, each time by the ack
        timeout the delivery came with (as observed: deadline - arrival, at least 1 s)."""
        if job.ack_deadline is None:
            return
        deadline = job.ack_deadline.timestamp()
        span = max(1.0, deadline - received)
        extend = executor_pb2.ExtendDeadlineRequest(
            delivery_id=job.delivery_id, extension=to_duration(span)
        )
        while True:
            await asyncio.sleep(max(0.05, (deadline - time.time()) / 2))
            try:
                # Shed extensions are sent again, but not past the deadline they would extend.
                r = await _overload.acall(
                    lambda: node.stub.ExtendDeadline(
                        extend, timeout=RPC_TIMEOUT, metadata=self._metadata
                    ),
                    retries=self.max_overload_retries,
                    deadline=time.monotonic() + (deadline - time.time()),
                )
                new = from_timestamp(r.ack_deadline)
                if new is not None:
                    deadline = new.timestamp()
            except grpc.aio.AioRpcError as e:
                if e.code() not in RETRYABLE_CODES or time.time() > deadline:
                    return

    # Stopping.

    async def _drain(self) -> None:
        for t in list(self._retiring):
            t.cancel()
        if self._handlers:
            _, pending = await asyncio.wait(set(self._handlers), timeout=self.drain_timeout)
            for t in pending:
                t.cancel()
            if pending:
                log.warning("%d handlers still running at the drain timeout: aborted", len(pending))
                await asyncio.wait(pending)
        for n in list(self._nodes.values()):
            await n.acker.close()
        for n in list(self._nodes.values()):
            if n.call is not None:
                n.call.cancel()
            if n.task is not None:
                n.task.cancel()
        for n in list(self._nodes.values()):
            if n.task is not None:
                try:
                    await n.task
                except (asyncio.CancelledError, Exception):
                    pass
            await n.channel.close(None)
