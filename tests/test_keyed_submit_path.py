"""A submit under an idempotency key is taken as new first: one statement, nothing read,
numbered by Postgres. A key used before makes the ledger's unique stream version refuse
that statement whole, and the command is decided from the stored stream: the original
task (replay) or a conflict, never a twin."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from ledger import intake
from ledger.database import create_pool
from ledger.errors import IdempotencyConflict
from ledger.task import SubmitTask
from ledger.writer import LedgerWriter
from projections.store import plan_projection
from tests.support import replay_report, task_body
from tests.test_optimistic_commit import _kinds


async def _ledger(url: str) -> list[tuple[str, int]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(row) for row in await conn.fetch(
            "SELECT stream_id, stream_version FROM ledger ORDER BY change_seq")]
    finally:
        await conn.close()


async def test_a_new_key_is_one_statement_and_a_used_key_is_decided_from_the_ledger(
        database_url: str) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1, transactions_only=True)
    sent: list[str] = []
    async with pool.acquire() as held:
        held.add_query_logger(lambda record: sent.append(record.query))
    writer = LedgerWriter(pool, plan_projection)
    await writer.start()

    def keyed(title: str = "t") -> SubmitTask:
        return intake.submit_command(task_body(title=title), actor="t", idempotency_key="k")

    try:
        first = await writer.execute(keyed(), "t")
        new_key = _kinds(sent)
        sent.clear()
        again = await writer.execute(keyed(), "t")
        used_key = _kinds(sent)
        with pytest.raises(IdempotencyConflict):
            await writer.execute(keyed("another body"), "t")
        together = await asyncio.gather(*(writer.execute(keyed(), "t") for _ in range(5)))
    finally:
        await writer.close()
        await pool.close()
    assert new_key == ["write"]  # no head, no stream read
    assert used_key[0] == "write" and "streams" in used_key  # refused, then read
    assert first.entries and first.before is None
    assert not again.entries and again.stream_id == first.stream_id
    assert all(not outcome.entries for outcome in together)
    assert await _ledger(database_url) == [(first.stream_id, 1)]
    assert (await replay_report(database_url)).ok
