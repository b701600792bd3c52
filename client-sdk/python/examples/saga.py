"""A three-step order saga: reserve stock (done), charge the card (always declined here), ship
(never reached). The charge is retried three times; then its compensations run in reverse
order of the steps: void the card authorisation, then release the stock, each once.

    python client-sdk/python/examples/saga.py 127.0.0.1:50051
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from datetime import timedelta

from rebound_client import Client, Compensation, Executor, Job, Outcome, RetryPolicy, RetryStatus


async def main(address: str) -> int:
    order = f"order-{os.getpid()}"
    with Client(address) as client:
        # Step 1 reserved the stock; step 2, the charge, failed: retry it, and name what undoes
        # the steps before it, in the order to run them.
        client.enqueue(
            "checkout",
            f"{order}/charge",
            payload=json.dumps({"order": order, "cents": 1200}).encode(),
            last_error="card network timeout",
            policy=RetryPolicy(max_attempts=3, initial_backoff=timedelta(milliseconds=200)),
            delay=0,
            compensations=[
                Compensation("checkout", f"{order}/void-authorisation"),
                Compensation("stock", f"{order}/release", payload=order.encode()),
            ],
        )

        # Each service's executor: the charge is declined every time; a compensation succeeds.
        ran: list[str] = []

        async def handler(job: Job) -> Outcome:
            if job.transaction_id.endswith("/charge"):
                print(f"charge attempt {job.attempt}: declined")
                return Outcome.retry("card declined")
            print(f"compensating: {job.transaction_id}")
            ran.append(job.transaction_id)
            return Outcome.success()

        executors = [Executor(address, service, handler) for service in ("checkout", "stock")]
        tasks = [asyncio.create_task(e.run()) for e in executors]
        try:
            # Wait until the charge's chain says every compensation succeeded (the client is
            # synchronous: its calls go to a thread, so that the handlers keep running).
            deadline = time.monotonic() + 60
            while True:
                charge = await asyncio.to_thread(client.get, "checkout", f"{order}/charge")
                assert charge.chain is not None, "the charge carries its compensations"
                if all(c.status == RetryStatus.SUCCEEDED for c in charge.chain.compensations):
                    print(
                        f"charge {charge.status.name} after {charge.attempt} attempts; "
                        "saga compensated"
                    )
                    break
                if time.monotonic() > deadline:
                    print("the saga did not finish", file=sys.stderr)
                    return 1
                await asyncio.sleep(0.2)
        finally:
            for e in executors:
                e.stop()
            await asyncio.gather(*tasks)

    expected = [f"{order}/void-authorisation", f"{order}/release"]
    if ran != expected:
        print(f"compensations ran {ran}, expected {expected}: in order, each once", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051")))
