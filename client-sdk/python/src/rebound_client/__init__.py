"""Python client and asyncio executor for Rebound, retry-as-a-service over gRPC.

A producer that hits a transient failure hands the work to Rebound with
:meth:`Client.enqueue` and goes back to serving traffic; Rebound delivers it to the service's
executors when it is due::

    from datetime import timedelta
    from rebound_client import Client, RetryPolicy

    client = Client("127.0.0.1:50051")
    client.enqueue("payments", "charge-7f3a", payload=b'{"order": "7f3a"}',
                   delay=timedelta(seconds=30), last_error="card processor timed out",
                   policy=RetryPolicy(max_attempts=8))

The service's workers run an :class:`Executor`::

    import asyncio
    from rebound_client import Executor, Job, Outcome

    async def charge(job: Job) -> Outcome:
        return Outcome.success()

    asyncio.run(Executor("127.0.0.1:50051", "payments", charge, concurrency=8).run())

The generated messages and stubs are in ``rebound.v1`` (``retry_pb2``, ``executor_pb2``, ...).
"""

from ._client import (
    Attempt,
    AttemptOutcome,
    Cancelled,
    Chain,
    ChainStep,
    Client,
    Compensation,
    Enqueued,
    EnqueueRequest,
    Retry,
    RetryStatus,
    RetrySummary,
)
from ._errors import ItemError, ReboundError
from ._executor import Executor, Job, Outcome, backoff
from ._policy import RetryPolicy
from ._transport import Tls

__all__ = [
    "Attempt",
    "AttemptOutcome",
    "Cancelled",
    "Chain",
    "ChainStep",
    "Client",
    "Compensation",
    "EnqueueRequest",
    "Enqueued",
    "Executor",
    "ItemError",
    "Job",
    "Outcome",
    "ReboundError",
    "Retry",
    "RetryPolicy",
    "RetryStatus",
    "RetrySummary",
    "Tls",
    "backoff",
]
