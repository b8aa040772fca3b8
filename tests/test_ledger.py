"""The ledger table itself: append-only, hash-chained, gap-free, versioned per stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from ledger import intake, session_lines, store, together
from ledger.database import create_pool
from ledger.errors import InvalidRequest, StreamVersionConflict
from ledger.events import TaskCancelled
from ledger.migrate import available_migrations, migrate, pending_migrations
from ledger.writer import LedgerWriter, utc_now
from projections.replay import replay
from projections.store import plan_projection
from projections.task_summary import COLUMNS
from tests.support import replay_report, task_body


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(database_url)
    yield connection
    await connection.close()


async def _submit_some(client: AsyncTestClient, n: int) -> list[str]:  # type: ignore[type-arg]
    ids = []
    for i in range(n):
        response = await client.post("/api/v1/queue/tasks", json=task_body(title=f"t{i}"))
        ids.append(response.json()["taskId"])
    return ids


@pytest.mark.parametrize("statement", [
    "UPDATE ledger SET actor = 'mallory'",
    "DELETE FROM ledger",
    "TRUNCATE ledger",
    "UPDATE ledger SET payload = '{}' WHERE change_seq = 1",
])
async def test_the_ledger_refuses_update_delete_and_truncate(
    client: Any, conn: asyncpg.Connection, statement: str
) -> None:
    await _submit_some(client, 2)
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
        await conn.execute(statement)
    assert await conn.fetchval("SELECT count(*) FROM ledger") == 2


async def test_replay_detects_a_tampered_entry(client: Any, conn: asyncpg.Connection) -> None:
    await _submit_some(client, 3)
    assert (await replay(conn)).ok
    await conn.execute("ALTER TABLE ledger DISABLE TRIGGER ledger_no_update_delete")
    await conn.execute("UPDATE ledger SET actor = 'mallory' WHERE change_seq = 2")
    await conn.execute("ALTER TABLE ledger ENABLE TRIGGER ledger_no_update_delete")
    report = await replay(conn)
    assert not report.ok
    assert report.chain_error == "changeSeq 2: hash does not match its content"


async def test_replay_detects_a_drifted_projection(client: Any, conn: asyncpg.Connection) -> None:
    ids = await _submit_some(client, 2)
    await conn.execute("UPDATE task_summary SET title = 'edited' WHERE task_id = $1", ids[0])
    await conn.execute("UPDATE queue_stats SET task_count = task_count + 5")
    report = await replay(conn)
    assert not report.ok
    assert report.differences["task_summary"] == 2  # the live row and the rebuilt one
    assert report.samples["task_summary"] == [ids[0]]
    assert report.differences["queue_stats"] == 2
    repaired = await replay(conn, repair=True)
    assert repaired.repaired
    assert (await replay(conn)).ok
    assert await conn.fetchval("SELECT title FROM task_summary WHERE task_id = $1", ids[0]) \
        == "t0"


async def test_a_stale_stream_version_is_a_conflict(client: Any, conn: asyncpg.Connection) -> None:
    (task_id,) = await _submit_some(client, 1)
    async with conn.transaction():
        head = await store.lock_head(conn)
        stale = store.PendingEvent("task", task_id, 1, TaskCancelled(), "test", utc_now())
        with pytest.raises(StreamVersionConflict) as caught:
            await store.append(conn, head, [stale])
    assert isinstance(caught.value.__cause__, asyncpg.UniqueViolationError)
    assert await conn.fetchval("SELECT count(*) FROM ledger") == 1


async def test_migrations_are_recorded_and_idempotent(conn: asyncpg.Connection) -> None:
    assert await pending_migrations(conn) == []
    assert await migrate(conn) == []
    versions = [r["version"] for r in await conn.fetch(
        "SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [m.version for m in available_migrations()]


async def test_migrations_produce_the_columns_the_code_writes(conn: asyncpg.Connection) -> None:
    columns = [r["column_name"] for r in await conn.fetch(
        "SELECT column_name FROM information_schema.columns"
        " WHERE table_name = 'task_summary' ORDER BY ordinal_position")]
    assert tuple(columns) == COLUMNS
    ledger_columns = {r["column_name"] for r in await conn.fetch(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'ledger'")}
    assert ledger_columns == {"change_seq", "stream_type", "stream_id", "stream_version",
                              "event_type", "payload", "actor", "recorded_at", "prev_hash",
                              "hash"}


async def test_replay_detects_an_edited_contract(client: Any, conn: asyncpg.Connection) -> None:
    (task_id,) = await _submit_some(client, 1)
    await conn.execute(
        "UPDATE task_contract SET contract = '{\"title\": \"forged\"}' WHERE task_id = $1", task_id)
    report = await replay(conn)
    assert report.differences["task_contract"] == 2
    assert report.samples["task_contract"] == [task_id]


async def test_a_nul_character_is_refused_as_invalid_and_appends_nothing(
    client: Any, conn: asyncpg.Connection
) -> None:
    (task_id,) = await _submit_some(client, 1)
    async with conn.transaction():
        head = await store.lock_head(conn)
        nul = store.PendingEvent("task", task_id, 2, TaskCancelled(reason="stop\x00now"), "test",
                                 utc_now())
        with pytest.raises(InvalidRequest, match="NUL"):
            await store.append(conn, head, [nul])
    escaped = store.PendingEvent("task", task_id, 2, TaskCancelled(reason="a \\u0000 b"),
                                 "test", utc_now())
    async with conn.transaction():  # the six characters `\u0000` are ordinary text
        await store.append(conn, await store.lock_head(conn), [escaped])
    assert await conn.fetchval("SELECT count(*) FROM ledger") == 2
    assert await conn.fetchval(
        "SELECT payload->>'reason' FROM ledger WHERE change_seq = 2") == "a \\u0000 b"


async def test_backend_output_with_nul_and_invalid_utf8_keeps_flowing(
    conn: asyncpg.Connection
) -> None:
    chunks = b"before\nnul \x00 here\nbad \xff byte\nafter\n"

    async def read(offset: int) -> tuple[bytes, bool]:
        return chunks[offset:], True

    taken = await session_lines.take_in(conn, "ses_nul", "job_nul", "output", read, final=True)
    lines, _ = await session_lines.page(conn, "ses_nul", "output", 0, 10)
    assert taken == 4
    assert [line.line for line in lines] == [
        "before", "nul \ufffd here", "bad \ufffd byte", "after"]


async def test_sequenced_writes_apply_each_with_its_own_arguments_after_the_head(
        conn: asyncpg.Connection) -> None:
    await conn.execute("CREATE TEMP TABLE t_a (n int, s text); CREATE TEMP TABLE t_b (n int)")
    writes = [("INSERT INTO t_a SELECT * FROM unnest($1::int[], $2::text[])",
               ([1, 2], ["one $1", "two"])),
              ("INSERT INTO t_b SELECT n + (SELECT k FROM a) FROM unnest($1::int[]) AS u(n)",
               ([7, 8],))]
    moved = ("SELECT k FROM (VALUES ($1::int)) AS v(k) WHERE k > $2::int", (100, 0))
    text, arguments = together.sequenced(moved, writes)
    assert await conn.fetchval(text, *arguments) == 100
    assert [tuple(r) for r in await conn.fetch("SELECT * FROM t_a ORDER BY n")] == [
        (1, "one $1"), (2, "two")]
    assert [r["n"] for r in await conn.fetch("SELECT n FROM t_b ORDER BY n")] == [107, 108]
    # The head part returned no row: no write happens.
    text, arguments = together.sequenced(
        ("SELECT k FROM (VALUES ($1::int)) AS v(k) WHERE k > $2::int", (100, 500)), writes)
    assert await conn.fetchval(text, *arguments) is None
    assert await conn.fetchval("SELECT count(*) FROM t_a") == 2
    assert await conn.fetchval("SELECT count(*) FROM t_b") == 2
    with pytest.raises(ValueError, match="array parameters"):
        together.sequenced(moved, [("INSERT INTO t_b VALUES ($1)", (1,))])


async def test_a_batch_of_submits_takes_one_round_trip(database_url: str) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=1, transactions_only=True)
    writer = LedgerWriter(pool, plan_projection)
    await writer.start()
    sent: list[str] = []
    try:
        async with pool.acquire() as held:
            held.add_query_logger(lambda record: sent.append(record.query))

        def submit(n: int) -> Any:
            return writer.execute(intake.submit_command(task_body(title=f"b{n}"),
                                                        actor="test"), "test")

        await submit(0)  # the first use of the connection also introspects types
        ours = [q for q in sent if q.startswith(("SELECT last_seq", "WITH a AS", "BEGIN"))]
        assert [q.split()[0] for q in ours] == ["WITH"], ours  # no head read: one write
        sent.clear()
        outcomes = await asyncio.gather(*(submit(n) for n in range(1, 9)))
    finally:
        await writer.close()
        await pool.close()
    assert [o.change_seq for o in sorted(outcomes, key=lambda o: o.change_seq or 0)] == \
        list(range(2, 10))
    # Fresh tasks depend on nothing stored: each batch is one statement (the head lock, the
    # numbering and hash chain, the append, the projections and the commit).
    assert sent and all(q.startswith("WITH a AS MATERIALIZED (SELECT * FROM ledger_advance")
                        for q in sent), sent
    assert len(sent) <= 8
    report = await replay_report(database_url)
    assert report.ok, report


async def test_a_writer_pool_keeps_even_a_long_batch_statement_prepared(
        database_url: str) -> None:
    # A dispatch's record batch is one statement of ~17 KiB; asyncpg keeps only statements
    # up to 15 KiB prepared unless told otherwise, and one it does not keep is parsed and
    # planned again at every commit.
    long = "SELECT 1 AS one" + " " * (20 * 1024) + "-- padded past asyncpg's default"
    for generic_plans, kept in ((True, True), (False, False)):
        pool = await create_pool(database_url, min_size=1, max_size=1,
                                 transactions_only=True, generic_plans=generic_plans)
        try:
            async with pool.acquire() as conn:
                for _ in range(2):
                    assert await conn.fetchval(long) == 1
                prepared = await conn.fetchval(
                    "SELECT count(*) FROM pg_prepared_statements WHERE statement = $1", long)
        finally:
            await pool.close()
        assert (prepared == 1) is kept, (generic_plans, prepared)
