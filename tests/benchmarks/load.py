"""Fill a database with tasks through the real ledger writer (large batches, many in flight)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from ledger.database import create_pool
from ledger.intake import submit_command
from ledger.task import CancelTask, MarkTaskRead
from ledger.writer import LedgerWriter
from projections.store import plan_projection

QUEUES = ["alpha", "alpha/fast", "beta", "gamma", "delta/slow"]
PROFILES = [None, "profile-1", "profile-2", "profile-3", "profile-4"]
IN_FLIGHT = 2000


async def _run_all(writer: LedgerWriter, commands: list[Any]) -> None:
    for start in range(0, len(commands), IN_FLIGHT):
        chunk = commands[start:start + IN_FLIGHT]
        await asyncio.gather(*(writer.execute(c, "bench") for c in chunk))


async def load(url: str, *, tasks: int, reads: int, cancels: int, seed: int = 7) -> int:
    """Submit ``tasks`` tasks, then ``reads`` reads and ``cancels`` cancels; return events."""
    rng = random.Random(seed)
    pool = await create_pool(url, min_size=1, max_size=2)
    writer = LedgerWriter(pool, plan_projection, max_batch=1000)
    await writer.start()
    try:
        submits = [
            submit_command({"tenantId": "bench", "projectId": "bench",
                            "queue": rng.choice(QUEUES), "title": f"bench task {i}",
                            "payload": {"prompt": "benchmark prompt " * 4},
                            "backendProfile": rng.choice(PROFILES)}, actor="bench")
            for i in range(tasks)
        ]
        await _run_all(writer, submits)
        ids = [c.task_id for c in submits]
        await _run_all(writer, [MarkTaskRead(ids[i % len(ids)], f"reader-{i // len(ids)}")
                                for i in range(reads)])
        await _run_all(writer, [CancelTask(task_id, "bench")
                                for task_id in rng.sample(ids, min(cancels, len(ids)))])
    finally:
        await writer.close()
        await pool.close()
    return tasks + reads + min(cancels, tasks)
