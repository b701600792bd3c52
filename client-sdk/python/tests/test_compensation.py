"""Compensations on an enqueue and the chain a ``get`` shows, without a node."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from rebound.v1 import retry_pb2, types_pb2
from rebound_client import (
    Chain,
    ChainStep,
    Client,
    Compensation,
    EnqueueRequest,
    Retry,
    RetryPolicy,
    RetryStatus,
)


def test_enqueue_request_carries_compensations_in_order() -> None:
    r = EnqueueRequest(
        "saga-orders",
        "charge-1",
        compensations=[
            Compensation(
                "saga-undo",
                "refund-1",
                payload=b"refund charge-1",
                attributes={"tenant": "acme"},
                policy=RetryPolicy(max_attempts=4, initial_backoff=timedelta(seconds=2)),
            ),
            Compensation("saga-stock", "release-1", payload=b"release stock"),
        ],
    ).to_proto()
    assert [(m.service, m.transaction_id, m.payload) for m in r.compensations] == [
        ("saga-undo", "refund-1", b"refund charge-1"),
        ("saga-stock", "release-1", b"release stock"),
    ]
    first, second = r.compensations
    assert dict(first.attributes) == {"tenant": "acme"}
    assert first.HasField("policy") and first.policy.max_attempts == 4
    assert first.policy.initial_backoff.seconds == 2
    assert not second.attributes and not second.HasField("policy")
    assert not EnqueueRequest("s", "t").to_proto().compensations


def test_client_enqueue_sends_compensations() -> None:
    sent: list[retry_pb2.EnqueueRetryRequest] = []

    class Stub:
        def EnqueueRetry(self, message: retry_pb2.EnqueueRetryRequest, **_: Any) -> Any:
            sent.append(message)
            return retry_pb2.EnqueueRetryResponse(transaction_id=message.transaction_id)

    # The channel is lazy: nothing connects to this address.
    with Client("127.0.0.1:1") as c:
        c._stub = Stub()  # type: ignore[assignment]
        c.enqueue(
            "saga-orders",
            "charge-1",
            dependency="payments-gateway",
            compensations=[
                Compensation("saga-undo", "refund-1", payload=b"a"),
                Compensation("saga-undo", "release-1", payload=b"b"),
            ],
        )
    (message,) = sent
    assert [(m.transaction_id, m.payload) for m in message.compensations] == [
        ("refund-1", b"a"),
        ("release-1", b"b"),
    ]
    assert message.dependency == "payments-gateway"


def test_retry_chain_maps_unspecified_to_none() -> None:
    raw = types_pb2.Retry(
        service="saga-undo",
        transaction_id="refund-1",
        status=types_pb2.RETRY_STATUS_SCHEDULED,
        chain=types_pb2.CompensationChain(
            saga_service="saga-orders",
            saga_transaction_id="charge-1",
            position=1,
            compensations=[
                types_pb2.CompensationProgress(
                    service="saga-undo",
                    transaction_id="refund-1",
                    status=types_pb2.RETRY_STATUS_SCHEDULED,
                ),
                types_pb2.CompensationProgress(service="saga-undo", transaction_id="release-1"),
            ],
        ),
    )
    assert Retry.from_proto(raw).chain == Chain(
        "saga-orders",
        "charge-1",
        1,
        [
            ChainStep("saga-undo", "refund-1", RetryStatus.SCHEDULED),
            ChainStep("saga-undo", "release-1", None),
        ],
    )
    assert Retry.from_proto(types_pb2.Retry(service="s", transaction_id="t")).chain is None


def test_enqueue_counts_the_failed_call_as_attempt_1_unless_told() -> None:
    # As the CLI and every SDK: the first delivery is then attempt 2.
    assert EnqueueRequest("s", "t").to_proto().attempt == 1
    assert EnqueueRequest("s", "t", attempt=0).to_proto().attempt == 0
    assert EnqueueRequest("s", "t", attempt=3).to_proto().attempt == 3
