"""scripts/sdk-roundtrip python ADDR SERVICE N: enqueue N retries due in about a second, run an
executor until all N are acknowledged, print the counts."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid

from rebound_client import Client, EnqueueRequest, Executor, Job, Outcome


async def main(address: str, service: str, n: int) -> int:
    token = os.environ.get("REBOUND_TOKEN") or None
    run = uuid.uuid4().hex[:8]
    with Client(address, token=token) as client:
        enqueued = 0
        for start in range(0, n, 500):
            batch = [
                EnqueueRequest(service, f"roundtrip-{run}-{i}", payload=b"x", delay=1.0)
                for i in range(start, min(n, start + 500))
            ]
            results = client.enqueue_batch(batch)
            enqueued += sum(1 for r in results if not isinstance(r, Exception))
    mine: set[str] = set()

    async def handler(job: Job) -> Outcome:
        if job.transaction_id.startswith(f"roundtrip-{run}-"):
            mine.add(job.transaction_id)
        return Outcome.success()

    ex = Executor(address, service, handler, concurrency=64, token=token)
    task = asyncio.create_task(ex.run())
    deadline = time.monotonic() + float(os.environ.get("ROUNDTRIP_TIMEOUT", "120"))
    while (len(mine) < n or ex.acked < n) and time.monotonic() < deadline and not task.done():
        await asyncio.sleep(0.05)
    ex.stop()
    await task
    print(f"roundtrip: {enqueued} enqueued, {len(mine)} delivered, {ex.acked} acked")
    return 0 if enqueued == n and len(mine) == n and ex.acked >= n else 1


if __name__ == "__main__":
    addr, svc, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.exit(asyncio.run(main(addr, svc, count)))
