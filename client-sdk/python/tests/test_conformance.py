"""The scenarios of client-sdk/CONFORMANCE.md, against a live node (named as there)."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import grpc
import pytest
from conftest import Cluster, Node, credentials_file, free_port, make_certs

from rebound_client import (
    AttemptOutcome,
    Client,
    Compensation,
    EnqueueRequest,
    Executor,
    ItemError,
    Job,
    Outcome,
    ReboundError,
    RetryPolicy,
    RetryStatus,
    Tls,
)

SERVICE = "pysdk"


async def run_until(ex: Executor, done: Callable[[], bool], within: float = 30.0) -> None:
    """Runs ``ex`` until ``done()`` holds (failing after ``within`` s), then stops it."""
    task = asyncio.create_task(ex.run())
    deadline = time.monotonic() + within
    try:
        while not done():
            if task.done():
                task.result()
                pytest.fail("the executor stopped early")
            if time.monotonic() > deadline:
                pytest.fail("timed out")
            await asyncio.sleep(0.05)
    finally:
        ex.stop()
        await task


def test_enqueue_get_cancel(node: Node) -> None:
    with Client(node.address) as c:
        e = c.enqueue(
            SERVICE,
            "tx-1",
            payload=b"charge 7f3a",
            delay=timedelta(minutes=5),
            attributes={"tenant": "acme"},
            attempt=2,
            last_error="card processor timed out",
            policy=RetryPolicy(max_attempts=8, initial_backoff=timedelta(seconds=30)),
        )
        assert e.transaction_id == "tx-1" and not e.deduplicated
        assert e.due_time is not None and e.due_time > datetime.now(timezone.utc)
        r = c.get(SERVICE, "tx-1")
        assert r.status == RetryStatus.SCHEDULED
        assert (r.attempt, r.payload, r.attributes) == (2, b"charge 7f3a", {"tenant": "acme"})
        assert r.last_error == "card processor timed out"
        assert r.policy.max_attempts == 8
        assert r.policy.initial_backoff == timedelta(seconds=30)
        cancelled = c.cancel(SERVICE, "tx-1")
        assert (cancelled.status, cancelled.cancelled) == (RetryStatus.CANCELLED, True)
        again = c.cancel(SERVICE, "tx-1")
        assert (again.status, again.cancelled) == (RetryStatus.CANCELLED, False)
        assert c.get(SERVICE, "tx-1").status == RetryStatus.CANCELLED


def test_deduplicated_reenqueue(node: Node) -> None:
    with Client(node.address) as c:
        due = datetime.now(timezone.utc) + timedelta(minutes=10)
        first = c.enqueue(SERVICE, "tx-dup", due_time=due)
        second = c.enqueue(SERVICE, "tx-dup", due_time=due)
        assert not first.deduplicated and second.deduplicated
        assert c.get(SERVICE, "tx-dup").enqueue_count == 2
        results = c.enqueue_batch(
            [EnqueueRequest(SERVICE, "tx-dup", due_time=due), EnqueueRequest(SERVICE, "tx-new")]
        )
        assert [getattr(r, "deduplicated", None) for r in results] == [True, False]


def test_bad_input_names_field(node: Node) -> None:
    with Client(node.address) as c:
        with pytest.raises(ReboundError) as e:
            c.enqueue(SERVICE, "x" * 300)
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "transaction_id" in e.value.message and "256" in e.value.message
        assert not e.value.is_retryable
        with pytest.raises(ReboundError) as e:
            c.enqueue(SERVICE, "tx-bad", policy=RetryPolicy(multiplier=0.5))
        assert "multiplier" in e.value.message
        with pytest.raises(ReboundError) as e:
            c.get(SERVICE, "tx-bad")
        assert e.value.code == grpc.StatusCode.NOT_FOUND
        results = c.enqueue_batch(
            [EnqueueRequest("bad service!", "tx-a"), EnqueueRequest(SERVICE, "tx-b")]
        )
        assert isinstance(results[0], ItemError) and "service" in results[0].message
        assert results[0].code == grpc.StatusCode.INVALID_ARGUMENT
        assert not isinstance(results[1], ItemError)
        with pytest.raises(ValueError):
            c.enqueue(SERVICE, "tx-c", delay=1.0, due_time=datetime.now(timezone.utc))


async def test_delivery_and_ack(node: Node) -> None:
    with Client(node.address) as c:
        c.enqueue(SERVICE, "tx-d", payload=b"p", attributes={"k": "v"}, delay=0)
        jobs: list[Job] = []

        async def handler(job: Job) -> Outcome:
            jobs.append(job)
            return Outcome.success()

        ex = Executor(node.address, SERVICE, handler, concurrency=4)
        await run_until(ex, lambda: ex.acked >= 1)
        (job,) = jobs
        assert (job.transaction_id, job.payload, job.attributes) == ("tx-d", b"p", {"k": "v"})
        assert job.attempt == 2 and job.node == node.address
        assert c.get(SERVICE, "tx-d").status == RetryStatus.SUCCEEDED


async def test_retry_after_reschedules(node: Node) -> None:
    with Client(node.address) as c:
        c.enqueue(SERVICE, "tx-r", delay=0)
        seen: list[tuple[int, float]] = []

        async def handler(job: Job) -> Outcome:
            seen.append((job.attempt, time.time()))
            if len(seen) == 1:
                return Outcome.retry("busy", after=timedelta(seconds=2))
            return Outcome.success()

        ex = Executor(node.address, SERVICE, handler)
        await run_until(ex, lambda: ex.acked >= 2)
        (a1, t1), (a2, t2) = seen
        assert a2 == a1 + 1
        assert t2 - t1 >= 2.0
        r = c.get(SERVICE, "tx-r")
        assert r.status == RetryStatus.SUCCEEDED and r.delivery_count == 2
        # attempt_history: each attempt, as its ack ended it.
        assert [(a.attempt, a.outcome) for a in r.attempts] == [
            (a1, AttemptOutcome.RETRY),
            (a2, AttemptOutcome.SUCCEEDED),
        ]
        first = r.attempts[0]
        assert first.error == "busy" and first.retry_after == timedelta(seconds=2)
        assert first.executor_id and first.node_id and first.deliveries == 1
        assert first.delivered_at is not None and first.ended_at is not None
        assert r.attempts[1].retry_after is None and r.attempts_dropped == 0


def test_list_filters_and_pages(node: Node) -> None:
    # list_retries: scheduled retries that match, every page followed.
    with Client(node.address) as c:
        for i in range(7):
            c.enqueue(
                "pylist",
                f"l-{i}",
                delay=timedelta(hours=1),
                attributes={"customer": "42" if i % 2 == 0 else "7"},
                last_error="card declined" if i < 3 else "gateway: 503",
            )
        assert sorted(r.transaction_id for r in c.list_retries("pylist", page_size=2)) == [
            f"l-{i}" for i in range(7)
        ]
        mine = list(
            c.list_retries("pylist", attributes={"customer": "42"}, error_contains="declined")
        )
        assert sorted(r.transaction_id for r in mine) == ["l-0", "l-2"]
        assert all(r.status == RetryStatus.SCHEDULED and r.attempt == 1 for r in mine)
        assert mine[0].attributes == {"customer": "42"} and mine[0].due_time is not None
        # Other statuses: none of these is in flight or dead.
        assert (
            list(c.list_retries("pylist", statuses=[RetryStatus.IN_FLIGHT, RetryStatus.DEAD])) == []
        )
        with pytest.raises(ReboundError) as e:
            list(c.list_retries("pylist", page_size=501))
        assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


async def test_snooze_uses_no_attempt(node: Node) -> None:
    with Client(node.address) as c:
        c.enqueue(SERVICE, "tx-s", delay=0, policy=RetryPolicy(max_attempts=2))
        attempts: list[int] = []

        async def handler(job: Job) -> Outcome:
            attempts.append(job.attempt)
            if len(attempts) < 3:
                return Outcome.snooze(timedelta(seconds=1), "dependency in maintenance")
            return Outcome.success()

        ex = Executor(node.address, SERVICE, handler)
        await run_until(ex, lambda: ex.acked >= 3)
        # Two snoozes with max_attempts 2: no attempt used, so the third delivery still runs.
        assert attempts == [2, 2, 2]
        assert c.get(SERVICE, "tx-s").status == RetryStatus.SUCCEEDED


async def test_dependency_hold_defers_without_using_attempts(node: Node) -> None:
    with Client(node.address) as c:
        one_attempt = RetryPolicy(max_attempts=2)
        c.enqueue(SERVICE, "tx-h1", delay=0, policy=one_attempt, dependency="payments-gateway")
        seen: list[tuple[str, int, float]] = []

        async def handler(job: Job) -> Outcome:
            seen.append((job.transaction_id, job.attempt, time.monotonic()))
            assert job.dependency == "payments-gateway"
            if len(seen) == 1:
                # The first answer holds the gateway for 2 s; then the second retry naming it
                # is enqueued, in another service, while the hold lasts.
                c.enqueue(
                    "py-other", "tx-h2", delay=0, policy=one_attempt, dependency="payments-gateway"
                )
                return Outcome.hold(timedelta(seconds=2), "503, Retry-After: 2")
            return Outcome.success()

        ex = Executor(node.address, SERVICE, handler)
        other = Executor(node.address, "py-other", handler)
        other_task = asyncio.create_task(other.run())
        try:
            await run_until(ex, lambda: ex.acked >= 2 and other.acked >= 1)
        finally:
            other.stop()
            await other_task
        held_at = seen[0][2]
        assert [t for t, _, _ in seen].count("tx-h1") == 2
        # Nothing naming the gateway during the hold, and no attempt used by it.
        assert all(at - held_at >= 1.9 for _, _, at in seen[1:]), seen
        assert all(attempt == 2 for _, attempt, _ in seen), seen
        assert c.get(SERVICE, "tx-h1").status == RetryStatus.SUCCEEDED
        assert c.get("py-other", "tx-h2").status == RetryStatus.SUCCEEDED


async def test_compensation_chain_runs_in_reverse_on_exhaustion(node: Node) -> None:
    with Client(node.address) as c:
        c.enqueue(
            "saga-orders",
            "charge-1",
            attempt=1,
            policy=RetryPolicy(max_attempts=2, initial_backoff=timedelta(milliseconds=100)),
            delay=0,
            # In the order they must run: the reverse of the steps they undo.
            compensations=[
                Compensation("saga-undo", "refund-1", payload=b"refund charge-1"),
                Compensation("saga-undo", "release-1", payload=b"release stock"),
            ],
        )
        undone: list[tuple[str, bytes]] = []

        async def charge(job: Job) -> Outcome:
            return Outcome.retry("card declined")

        async def undo(job: Job) -> Outcome:
            undone.append((job.transaction_id, job.payload))
            return Outcome.success()

        orders = Executor(node.address, "saga-orders", charge)
        undoer = Executor(node.address, "saga-undo", undo)
        tasks = [asyncio.create_task(orders.run()), asyncio.create_task(undoer.run())]
        try:
            deadline = time.monotonic() + 40
            while True:
                chain = c.get("saga-orders", "charge-1").chain
                if chain is not None and all(
                    m.status == RetryStatus.SUCCEEDED for m in chain.compensations
                ):
                    break
                for t in tasks:
                    if t.done():
                        t.result()
                        pytest.fail("an executor stopped early")
                if time.monotonic() > deadline:
                    pytest.fail(f"the compensations did not both succeed: {chain}")
                await asyncio.sleep(0.2)
            # Each ran once: nothing more arrives.
            await asyncio.sleep(3)
        finally:
            orders.stop()
            undoer.stop()
            for t in tasks:
                await t
        assert undone == [("refund-1", b"refund charge-1"), ("release-1", b"release stock")]
        step = c.get("saga-orders", "charge-1")
        assert (step.status, step.attempt) == (RetryStatus.DEAD, 2)
        assert step.chain is not None
        assert (step.chain.position, len(step.chain.compensations)) == (0, 2)
        last = c.get("saga-undo", "release-1").chain
        assert last is not None
        assert (last.saga_service, last.saga_transaction_id, last.position) == (
            "saga-orders",
            "charge-1",
            2,
        )


async def test_failed_goes_to_dead_letters(node: Node) -> None:
    with Client(node.address) as c:
        c.enqueue(SERVICE, "tx-f", delay=0)

        async def handler(job: Job) -> Outcome:
            return Outcome.fail("card declined").with_error_class("card.declined")

        ex = Executor(node.address, SERVICE, handler)
        await run_until(ex, lambda: ex.acked >= 1)
        r = c.get(SERVICE, "tx-f")
        assert r.status == RetryStatus.DEAD and r.last_error == "card declined"


async def test_handler_exception_retries(node: Node) -> None:
    with Client(node.address) as c:
        c.enqueue(SERVICE, "tx-e", delay=0, policy=RetryPolicy(initial_backoff=timedelta(0)))
        jobs: list[Job] = []

        async def handler(job: Job) -> Outcome:
            jobs.append(job)
            if len(jobs) == 1:
                raise ConnectionError("inventory service unreachable")
            return Outcome.success()

        ex = Executor(node.address, SERVICE, handler)
        await run_until(ex, lambda: ex.acked >= 2)
        assert jobs[1].attempt == jobs[0].attempt + 1
        assert "ConnectionError: inventory service unreachable" in jobs[1].last_error
        assert c.get(SERVICE, "tx-e").status == RetryStatus.SUCCEEDED


async def test_two_nodes_one_address(cluster: Cluster) -> None:
    a = cluster.start("py-a")
    b = cluster.start("py-b")
    n = 40
    # Written through both nodes: each writes under its own instances, whose tokens fall in
    # either node's slots.
    for i in range(n):
        with Client((a, b)[i % 2].address) as c:
            c.enqueue(SERVICE, f"tx-{i}", delay=0)
    done: set[str] = set()
    by_node: dict[str, int] = {}

    async def handler(job: Job) -> Outcome:
        done.add(job.transaction_id)
        by_node[job.node] = by_node.get(job.node, 0) + 1
        return Outcome.success()

    # Given only node A's address, the executor finds B through GetRing.
    ex = Executor(a.address, SERVICE, handler, ring_refresh=0.5)
    await run_until(ex, lambda: len(done) == n and ex.nodes == sorted([a.address, b.address]), 60)
    assert ex.nodes == sorted([a.address, b.address])
    assert len(done) == n


async def test_stop_drains_in_flight(node: Node) -> None:
    with Client(node.address) as c:
        for i in range(3):
            c.enqueue(SERVICE, f"tx-{i}", delay=0)
        started: set[str] = set()
        finished: set[str] = set()

        async def handler(job: Job) -> Outcome:
            started.add(job.transaction_id)
            await asyncio.sleep(1.5)
            finished.add(job.transaction_id)
            return Outcome.success()

        ex = Executor(node.address, SERVICE, handler, concurrency=3)
        task = asyncio.create_task(ex.run())
        deadline = time.monotonic() + 30
        while len(started) < 3:
            assert time.monotonic() < deadline, "not all three started"
            await asyncio.sleep(0.02)
        ex.stop()
        await task
        # run() returned only after the running handlers finished and were acked.
        assert finished == started and ex.acked == 3
        for i in range(3):
            assert c.get(SERVICE, f"tx-{i}").status == RetryStatus.SUCCEEDED


async def test_token_refused_and_accepted(cluster: Cluster, tmp_path: Path) -> None:
    creds = credentials_file(tmp_path, [("payments", "s3cret", [SERVICE], False)])
    node = cluster.start(REBOUND_CREDENTIALS_FILE=str(creds))
    for token in (None, "wrong"):
        with Client(node.address, token=token) as c, pytest.raises(ReboundError) as e:
            c.enqueue(SERVICE, "tx-t", delay=0)
        assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    with Client(node.address, token="s3cret") as c:
        c.enqueue(SERVICE, "tx-t", delay=0)
        with pytest.raises(ReboundError) as e:
            c.enqueue("other", "tx-t")
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED

    async def handler(job: Job) -> Outcome:
        return Outcome.success()

    refused = Executor(node.address, SERVICE, handler, token="wrong")
    with pytest.raises(ReboundError) as e:
        await asyncio.wait_for(refused.run(), 30)
    assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    ex = Executor(node.address, SERVICE, handler, token="s3cret")
    await run_until(ex, lambda: ex.acked >= 1)


async def test_long_handler_extends_deadline(node: Node) -> None:
    with Client(node.address) as c:
        c.enqueue(SERVICE, "tx-l", delay=0, policy=RetryPolicy(ack_timeout=timedelta(seconds=1)))
        deliveries: list[Job] = []

        async def handler(job: Job) -> Outcome:
            deliveries.append(job)
            await asyncio.sleep(3.5)
            return Outcome.success()

        ex = Executor(node.address, SERVICE, handler)
        await run_until(ex, lambda: ex.acked >= 1)
        assert len(deliveries) == 1
        r = c.get(SERVICE, "tx-l")
        assert r.status == RetryStatus.SUCCEEDED and r.delivery_count == 1


async def test_tls_mutual_auth(cluster: Cluster, tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    creds = tmp_path / "credentials.toml"
    creds.write_text(f'[[credential]]\nname = "sdk-client"\nservices = ["{SERVICE}"]\n')
    node = cluster.start(
        REBOUND_TLS_CERT_FILE=str(certs / "node.pem"),
        REBOUND_TLS_KEY_FILE=str(certs / "node.key"),
        REBOUND_TLS_CLIENT_CA_FILE=str(certs / "ca.pem"),
        REBOUND_CREDENTIALS_FILE=str(creds),
    )
    tls = Tls(
        ca_file=str(certs / "ca.pem"),
        cert_file=str(certs / "client.pem"),
        key_file=str(certs / "client.key"),
    )
    with Client(node.address, tls=tls) as c:
        c.enqueue(SERVICE, "tx-tls", delay=0, payload=b"over tls")
        deliveries: list[Job] = []

        async def handler(job: Job) -> Outcome:
            deliveries.append(job)
            return Outcome.success()

        ex = Executor(node.address, SERVICE, handler, tls=tls)
        await run_until(ex, lambda: ex.acked >= 1)
        assert deliveries[0].payload == b"over tls"
        assert c.get(SERVICE, "tx-tls").status == RetryStatus.SUCCEEDED
    for refused in (Tls(ca_file=str(certs / "ca.pem")), Tls(ca_file=str(certs / "other-ca.pem"))):
        with Client(node.address, tls=refused) as c, pytest.raises(ReboundError) as e:
            c.enqueue(SERVICE, "tx-tls-refused", delay=0)
        assert e.value.code == grpc.StatusCode.UNAVAILABLE


def shed_total(http: str) -> float:
    """``rebound_requests_shed_total{reason="inflight_bytes"}`` on a node's ``/metrics``."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://{http}/metrics", timeout=5) as r:
                text = r.read().decode()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    m = re.search(r'^rebound_requests_shed_total\{reason="inflight_bytes"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def test_overload_is_shed_and_retried(cluster: Cluster) -> None:
    http = f"127.0.0.1:{free_port()}"
    # Room for about one of the 0.85 MiB batches below at a time: the others are shed.
    node = cluster.start(
        REBOUND_MAX_PAYLOAD_BYTES="16384",
        REBOUND_MAX_INFLIGHT_BYTES="7200000",
        REBOUND_HTTP_LISTEN=http,
    )
    payload = b"x" * 16384
    with Client(node.address) as c, ThreadPoolExecutor(8) as pool:
        for round in range(5):
            batches = [
                [
                    EnqueueRequest(SERVICE, f"tx-{round}-{b}-{i}", payload, delay=600)
                    for i in range(50)
                ]
                for b in range(8)
            ]
            # Every batch goes through, the shed ones made again by the client.
            for results in pool.map(c.enqueue_batch, batches):
                assert len(results) == 50
                assert not [r for r in results if isinstance(r, ItemError)]
            if shed_total(http) > 0:
                break
        assert shed_total(http) > 0, "8 batches at once against room for one: some were shed"
        for tx in (f"tx-{round}-0-0", f"tx-{round}-7-49"):
            r = c.get(SERVICE, tx)
            assert r.status == RetryStatus.SCHEDULED and r.payload == payload
