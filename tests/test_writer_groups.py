"""``LedgerWriter.execute_all``: commands in order, one transaction, stop at the first refusal."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from ledger.database import create_pool
from ledger.errors import InvalidTransition, NotFound
from ledger.intake import submit_command
from ledger.task import CancelTask, MarkTaskRead
from ledger.writer import LedgerWriter
from projections.store import plan_projection
from tests.support import task_body


@pytest.fixture
async def writer(database_url: str) -> AsyncIterator[LedgerWriter]:
    pool = await create_pool(database_url, min_size=1, max_size=2)
    started = LedgerWriter(pool, plan_projection)
    await started.start()
    try:
        yield started
    finally:
        await started.close()
        await pool.close()


async def _ledger(url: str) -> list[tuple[int, str, str]]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT change_seq, stream_id, event_type FROM ledger "
                                "ORDER BY change_seq")
        return [(r["change_seq"], r["stream_id"], r["event_type"]) for r in rows]
    finally:
        await conn.close()


async def test_a_group_commits_in_order_in_one_transaction(
        database_url: str, writer: LedgerWriter) -> None:
    submit = submit_command(task_body(), actor="t")
    task_id = submit.task_id
    outcomes = await writer.execute_all(
        [submit, MarkTaskRead(task_id, "r1"), CancelTask(task_id, "done")], "t")
    assert [len(o.events) for o in outcomes] == [1, 1, 1]
    assert outcomes[-1].state.state == "cancelled"
    seqs = [o.change_seq for o in outcomes]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    entries = await _ledger(database_url)
    assert [e[2] for e in entries] == ["task-submitted", "task-read-cursor-advanced",
                                      "task-cancelled"]
    conn = await asyncpg.connect(database_url)
    try:  # one transaction: the three entries share one xmin
        xmins = await conn.fetch("SELECT DISTINCT xmin::text FROM ledger")
    finally:
        await conn.close()
    assert len(xmins) == 1


async def test_a_refusal_stops_the_group_and_keeps_what_came_before(
        database_url: str, writer: LedgerWriter) -> None:
    submit = submit_command(task_body(), actor="t")
    task_id = submit.task_id
    with pytest.raises(InvalidTransition):
        await writer.execute_all([submit, CancelTask(task_id), CancelTask(task_id),
                                  MarkTaskRead(task_id, "never")], "t")
    assert [e[2] for e in await _ledger(database_url)] == ["task-submitted",
                                                            "task-cancelled"]
    with pytest.raises(NotFound):  # refused first: nothing after it runs
        await writer.execute_all([CancelTask("tsk_missing"),
                                  MarkTaskRead(task_id, "never")], "t")
    assert len(await _ledger(database_url)) == 2
