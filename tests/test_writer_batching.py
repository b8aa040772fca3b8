"""How the writer forms batches: commands arriving while a batch commits gather into the next
one instead of following it one by one, and a command taken into a batch that was never sent
fails unchanged when the writer stops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from ledger.database import create_pool
from ledger.errors import CommitUnknown, LedgerUnavailable
from ledger.intake import submit_command
from ledger.streams import RecordedEntry
from ledger.task import CancelTask
from ledger.writer import LedgerWriter, Outcome
from projections.store import plan_projection
from tests.support import task_body


@asynccontextmanager
async def _head_held(url: str) -> AsyncIterator[asyncpg.Connection]:
    """Hold the ledger head row (every commit waits) until the block ends."""
    conn = await asyncpg.connect(url)
    transaction = conn.transaction()
    await transaction.start()
    await conn.execute("SELECT 1 FROM ledger_head FOR UPDATE")
    try:
        yield conn
    finally:
        await transaction.rollback()
        await conn.close()


async def _until_blocked(holder: asyncpg.Connection) -> None:
    for _ in range(200):
        if await holder.fetchval("SELECT count(*) FROM pg_stat_activity "
                                 "WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))"):
            return
        await asyncio.sleep(0.01)
    pytest.fail("no commit reached the head row")


def _submit(writer: LedgerWriter) -> asyncio.Future[Outcome]:
    return asyncio.ensure_future(writer.execute(submit_command(task_body(), actor="t"), "t"))


async def test_commands_arriving_while_a_batch_commits_gather_into_one(
        database_url: str) -> None:
    batches: list[list[RecordedEntry]] = []
    pool = await create_pool(database_url, min_size=1, max_size=3, transactions_only=True)
    writer = LedgerWriter(pool, plan_projection, on_commit=batches.append)
    await writer.start()
    try:
        for _ in range(3):  # commits that take ~150 ms: about half of it to gather in
            async with _head_held(database_url) as holder:
                one = _submit(writer)
                await _until_blocked(holder)
                await asyncio.sleep(0.15)
            await one
        batches.clear()
        async with _head_held(database_url) as holder:
            first = _submit(writer)
            await _until_blocked(holder)
            following = [_submit(writer)]
            await asyncio.sleep(0.005)
            following += [_submit(writer) for _ in range(4)]
            await asyncio.sleep(0.3)
        await asyncio.gather(first, *following)
    finally:
        await writer.close()
        await pool.close()
    assert [len(batch) for batch in batches] == [1, 5]


async def test_a_command_taken_but_never_sent_fails_unchanged_when_the_writer_stops(
        database_url: str) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=3, transactions_only=True)
    writer = LedgerWriter(pool, plan_projection)
    await writer.start()
    try:
        async with _head_held(database_url) as holder:
            fresh = _submit(writer)  # in flight, waiting at the head row
            await _until_blocked(holder)
            # a cancel reads its stream: it waits in the writer for the batch ahead of it
            cancel = asyncio.ensure_future(writer.execute(
                CancelTask("tsk_0000000000000000000000000a", None), "t"))
            await asyncio.sleep(0.05)
            await writer.close()
            with pytest.raises(CommitUnknown):
                await asyncio.wait_for(fresh, 5)
            with pytest.raises(LedgerUnavailable) as refused:
                await asyncio.wait_for(cancel, 5)  # before: never answered
            assert "shutting down" in str(refused.value)
    finally:
        await writer.close()
        await pool.close()


async def test_a_kept_connection_serves_the_next_batch_and_a_dead_one_is_replaced(
        database_url: str) -> None:
    """The writer keeps the connection a batch left clean for the next batch (no release
    and acquire per batch); one Postgres ended while it was kept is never used: the next
    submit commits on a fresh one, and stopping the writer gives every connection back."""
    pool = await create_pool(database_url, min_size=1, max_size=3, transactions_only=True)
    writer = LedgerWriter(pool, plan_projection)
    await writer.start()
    try:
        await _submit(writer)
        first = await _backend_pids(database_url)
        await _submit(writer)
        assert await _backend_pids(database_url) == first  # the same one served both
        admin = await asyncpg.connect(database_url)
        try:
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE pid = ANY($1::int[])", list(first))
        finally:
            await admin.close()
        await asyncio.sleep(0.2)  # the kept connection sees its end
        outcome = await _submit(writer)
        assert outcome.entries, "the submit committed on a fresh connection"
        assert not (await _backend_pids(database_url)) & first
    finally:
        await writer.close()
    assert pool.get_idle_size() == pool.get_size()  # nothing kept past the stop
    await pool.close()


async def _backend_pids(url: str) -> set[int]:
    """The backends of the writer's pool (application ``svc``) that served a statement, in
    this test's database only: a neighbouring test's writer (another xdist worker, another
    database) runs the same statement, and ending its backend would fail that test."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT pid FROM pg_stat_activity WHERE application_name = "
                                "'svc' AND query LIKE 'WITH a AS MATERIALIZED%' "
                                "AND datname = current_database()")
    finally:
        await conn.close()
    return {row["pid"] for row in rows}
