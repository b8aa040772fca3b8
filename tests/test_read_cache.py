"""The hot GET reads are encoded once per ledger head: same bytes as the views, and any
commit (the caller's own included) is seen by the next read."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import msgspec

from api import views
from api.read_cache import ReadCache, SharedHead
from ledger.database import create_pool
from projections import queries
from runner_assembly.settings import RunnerSettings
from tests.support import task_body

TASKS = "/api/v1/queue/tasks"
READS = (TASKS + "?limit=5", "/api/v1/queue/stats", "/api/v1/queue/commander?readerId=r1")


def test_an_answer_is_kept_for_its_head_only() -> None:
    cache = ReadCache(max_entries=2, max_age_s=60)
    cache.put("a", 5, b"five")
    assert cache.get("a", 5) == b"five"
    assert cache.get("a", 6) is None  # a commit moved the head: recomputed
    cache.put("a", 4, b"four")  # a slower request that saw an older snapshot
    assert cache.get("a", 5) == b"five" and cache.get("a", 4) is None
    cache.put("b", 5, b"b")
    cache.put("c", 5, b"c")
    assert cache.get("a", 5) is None and cache.get("c", 5) == b"c"  # bounded, LRU


def test_an_answer_expires() -> None:
    cache = ReadCache(max_age_s=0.05)
    cache.put("a", 1, b"one")
    time.sleep(0.06)
    assert cache.get("a", 1) is None


async def test_each_read_answers_what_the_views_encode(
        client: Any, app_url: str, runner_settings: RunnerSettings) -> None:
    ids = [(await client.post(TASKS, json=task_body(title=f"t{i}"))).json()["taskId"]
           for i in range(3)]
    await client.post(f"{TASKS}/{ids[0]}/read", json={"readerId": "r1"})
    pool = await create_pool(app_url, min_size=1, max_size=1)
    try:
        budgets = runner_settings.timeout_budgets
        page = await queries.list_tasks(pool, queue=None, state=None, cursor=None, limit=5,
                                        updated_after=None)
        stats = await queries.stats(pool, None)
        commander = await queries.commander(pool, queue=None, reader_id="r1", limit=20)
        found = await queries.get_task(pool, ids[1])
    finally:
        await pool.close()
    assert found is not None
    expected = {
        READS[0]: views.task_list(page, budgets),
        READS[1]: views.queue_stats(None, stats),
        READS[2]: views.commander(None, "r1", commander, budgets),
        f"{TASKS}/{ids[1]}": views.task_detail(*found, budgets),
    }
    for path, view in expected.items():
        for _ in range(2):  # computed, then from the cache
            answer = await client.get(path)
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("application/json")
            assert answer.content == msgspec.json.encode(view), path


async def test_every_commit_is_seen_by_the_next_read(client: Any) -> None:
    first = (await client.post(TASKS, json=task_body(title="first"))).json()
    before = {path: (await client.get(path)).json() for path in READS}
    show = f"{TASKS}/{first['taskId']}"
    assert (await client.get(show)).json()["state"] == "pending"
    second = (await client.post(TASKS, json=task_body(title="second"))).json()
    listed = (await client.get(READS[0])).json()
    assert listed["items"][0]["taskId"] == second["taskId"]
    assert listed["changeSeq"] > before[READS[0]]["changeSeq"]
    assert (await client.get(READS[1])).json() != before[READS[1]]
    await client.post(f"{show}/cancel", json={})
    assert (await client.get(show)).json()["state"] == "cancelled"
    commander = (await client.get(READS[2])).json()
    assert commander != before[READS[2]]
    polled = (await client.get(TASKS, params={"updatedAfter": listed["changeSeq"]})).json()
    assert [item["taskId"] for item in polled["items"]] == [first["taskId"]]


async def test_a_missing_task_is_not_found_every_time(client: Any) -> None:
    for _ in range(2):
        answer = await client.get(f"{TASKS}/tsk_missing")
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not-found"


async def test_a_shared_head_read_sees_every_commit_before_it(app_url: str) -> None:
    """Readers share head queries, yet a read begun after a commit never answers less."""
    pool = await create_pool(app_url, min_size=1, max_size=1, transactions_only=True)
    writer = await asyncpg.connect(app_url)
    head = SharedHead(pool)
    queries_sent = 0

    def count(_: object) -> None:
        nonlocal queries_sent
        queries_sent += 1

    async def keep_reading(until: asyncio.Event) -> None:
        while not until.is_set():
            await head.read()

    try:
        async with pool.acquire() as conn:
            conn.add_query_logger(count)
        done = asyncio.Event()
        background = [asyncio.create_task(keep_reading(done)) for _ in range(8)]
        for _ in range(40):
            committed = await writer.fetchval(
                "UPDATE ledger_head SET last_seq = last_seq + 1 WHERE id = 1 RETURNING last_seq")
            assert await head.read() >= committed
        done.set()
        await asyncio.gather(*background)
        await head.read()  # no query left running
        before = queries_sent
        answers = await asyncio.gather(*(head.read() for _ in range(50)))
        assert len(set(answers)) == 1 and queries_sent - before <= 2  # one query for many
    finally:
        await writer.close()
        await pool.close()
