"""Polling by ``updatedAfter`` under concurrent writers misses no change.

Two real API processes on one database (each with its own pool and group-commit writer)
take concurrent submits, reads and cancels while a poller loops on ``updatedAfter``.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from projections.replay import replay
from tests.conftest import running_api
from tests.support import task_body

TASKS = "/api/v1/queue/tasks"
WRITERS_PER_APP = 8
TASKS_PER_WRITER = 25


async def _writer(client: Any, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(TASKS_PER_WRITER):
        task = (await client.post(TASKS, json=task_body(title=f"w{seed}-{i}"))).json()
        if rng.random() < 0.5:
            await client.post(f"{TASKS}/{task['taskId']}/read", json={"readerId": f"r{seed}"})
        if rng.random() < 0.4:
            await client.post(f"{TASKS}/{task['taskId']}/cancel", json={})


async def _poll_once(client: Any, after: int, seen: dict[str, int]) -> int:
    """One page after ``after``; returns where the next poll starts."""
    page = (await client.get(TASKS, params={"updatedAfter": after, "limit": 7})).json()
    for item in page["items"]:
        assert item["changeSeq"] > after
        seen[item["taskId"]] = max(seen.get(item["taskId"], 0), item["version"])
    if page["nextCursor"] is not None:
        return int(page["items"][-1]["changeSeq"])
    return int(page["changeSeq"])


async def test_poller_sees_every_final_version_under_concurrent_writers(
    database_url: str, tmp_path: Path,
) -> None:
    async with running_api(database_url, tmp_path) as first, \
            running_api(database_url, tmp_path) as second:
        await _write_while_polling(database_url, first, second)


async def test_poller_misses_nothing_with_two_workers_behind_one_port(
    database_url: str, tmp_path: Path,
) -> None:
    async with running_api(database_url, tmp_path, {"SVC_WORKERS": "2"}) as base:
        await _write_while_polling(database_url, base, base)


async def _write_while_polling(database_url: str, first: str, second: str) -> None:
    """Writers on both APIs while a poller follows ``updatedAfter`` on the first; then the
    poller saw every final version, changeSeq has no gap and the projections replay."""
    seen: dict[str, int] = {}
    async with httpx.AsyncClient(base_url=first) as one, \
            httpx.AsyncClient(base_url=second) as two:
        writers = [asyncio.create_task(_writer(client, seed))
                   for seed, client in enumerate([one, two] * WRITERS_PER_APP)]
        after, polls = 0, 0
        while not all(w.done() for w in writers):
            after = await _poll_once(one, after, seen)
            polls += 1
            await asyncio.sleep(0.005)
        await asyncio.gather(*writers)
        while True:  # drain what is left
            previous, after = after, await _poll_once(two, after, seen)
            if after == previous:
                break
    conn = await asyncpg.connect(database_url)
    try:
        final = {r["task_id"]: r["version"]
                 for r in await conn.fetch("SELECT task_id, version FROM task_summary")}
        seqs = [r["change_seq"] for r in await conn.fetch(
            "SELECT change_seq FROM ledger ORDER BY change_seq")]
        report = await replay(conn)
    finally:
        await conn.close()
    assert len(final) == 2 * WRITERS_PER_APP * TASKS_PER_WRITER
    print(f"polls={polls} tasks={len(final)} entries={len(seqs)}")
    assert seen == final, "the poller missed a change"
    assert polls > 10, f"the poller polled only {polls} times while writers ran"
    assert seqs == list(range(1, len(seqs) + 1)), "changeSeq has gaps"
    assert after == seqs[-1]
    assert report.ok, report
