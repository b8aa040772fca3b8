"""The writer's one-statement commit across processes: fresh tasks are numbered where the head
is and never race; a batch decided from stored rows is written only while the head it was
decided after is still the head, otherwise nothing of it is written and it is decided again
(after repeated lost races, under the head lock)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import asyncpg
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import intake, store
from ledger.database import DbConnection, create_pool
from ledger.events import TaskCancelled
from ledger.streams import RecordedEntry, stream_kind_for
from ledger.task import CancelTask
from ledger.together import Statement
from ledger.writer import OPTIMISTIC_TRIES, LedgerWriter, Outcome, utc_now
from projections.fold import fold
from projections.projection import SEQ_COLUMN, Rows
from projections.registry import REGISTRY
from projections.replay import replay
from projections.store import plan_projection
from tests.support import replay_report, task_body


@dataclass
class Side:
    """One server process's writer: its own pool, and every statement its connection sent."""

    pool: asyncpg.Pool
    writer: LedgerWriter
    sent: list[str] = field(default_factory=list)

    async def submit(self, title: str) -> Outcome:
        command = intake.submit_command(task_body(title=title), actor="test")
        return await self.writer.execute(command, "test")

    async def cancel(self, task_id: str) -> Outcome:
        return await self.writer.execute(CancelTask(task_id, None), "test")


@pytest.fixture
async def sides(database_url: str) -> AsyncIterator[list[Side]]:
    made: list[Side] = []
    for _ in range(2):
        pool = await create_pool(database_url, min_size=1, max_size=1, transactions_only=True)
        made.append(Side(pool, LedgerWriter(pool, plan_projection)))
        await made[-1].writer.start()
        async with pool.acquire() as held:
            held.add_query_logger(lambda record, side=made[-1]: side.sent.append(record.query))
    yield made
    for side in made:
        await side.writer.close()
        await side.pool.close()


def _kinds(sent: list[str]) -> list[str]:
    """What each statement was: the one write, a head read or lock, a stream read, …"""
    def kind(query: str) -> str:
        if query.startswith("WITH a AS MATERIALIZED (SELECT * FROM ledger_advance"):
            return "write"
        if query.startswith("SELECT last_seq, last_hash, epoch FROM ledger_head"):
            return "head" if "FOR UPDATE" not in query else "lock"
        if query.startswith("SELECT change_seq, stream_type"):
            return "streams"
        return query.split()[0].lower()
    introspection = ("typeinfo", "set_config('jit'", "current_setting('jit')")  # asyncpg's
    kinds = [kind(query) for query in sent if not any(part in query for part in introspection)]
    return [k for k in kinds if k != "select"]  # less the projection rows a batch loads


async def _replays(database_url: str, *, events: int) -> None:
    """The ledger holds ``events`` entries and replays to the live projections."""
    report = await replay_report(database_url)
    assert report.ok and report.events == events, report


async def test_fresh_tasks_from_two_writers_never_race(
        sides: list[Side], database_url: str) -> None:
    first, _ = sides
    for n in range(3):
        for side in sides:
            side.sent.clear()
            outcome = await side.submit(f"{n}")
            assert _kinds(side.sent) == ["write"]
            assert outcome.change_seq == 2 * n + (1 if side is first else 2)
    await _replays(database_url, events=6)


async def test_a_writer_whose_head_moved_decides_again_after_the_other(
        sides: list[Side], database_url: str) -> None:
    first, second = sides
    mine = (await first.submit("a1")).stream_id
    theirs = (await second.submit("b1")).stream_id
    first.sent.clear()
    assert (await first.cancel(mine)).change_seq == 3
    # It decided after the head it knew (1), which had moved: the write matched nothing, it
    # read the head, read the stream again and wrote after 2.
    assert _kinds(first.sent) == ["streams", "write", "head", "streams", "write"]
    first.sent.clear()
    assert (await first.cancel(theirs)).change_seq == 4
    assert _kinds(first.sent) == ["streams", "write"]  # its own commit is the head it knows
    await _replays(database_url, events=4)


async def test_a_write_after_a_moved_head_writes_nothing(
        sides: list[Side], database_url: str) -> None:
    first, _ = sides
    task_id = (await first.submit("t")).stream_id
    conn = await asyncpg.connect(database_url)
    try:
        read = await store.read_head(conn)
        kind = stream_kind_for(CancelTask(task_id, None))

        async def cancel_after(head: store.Head) -> tuple[store.Prepared, list[Statement]]:
            pending = [store.PendingEvent(kind.stream_type, task_id, 2, TaskCancelled(), "t",
                                          utc_now())]
            prepared = store.prepare_append(head.last_seq, pending)
            statements = await plan_projection(conn, prepared.recorded)
            assert statements is not None
            return prepared, statements

        stale = await cancel_after(read)
        await first.submit("moves the head")
        tables = ("ledger", "task_summary", "queue_stats", "commander_view")
        before = {t: await conn.fetch(f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables}
        head = await store.read_head(conn)
        assert await store.commit(conn, read, *stale) is None
        assert {t: await conn.fetch(f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables} == \
            before
        assert await store.read_head(conn) == head
        committed = await store.commit(conn, head, *await cancel_after(head))
        assert committed is not None and committed.shift == 0
        assert committed.head.last_seq == head.last_seq + 1
    finally:
        await conn.close()
    assert (await replay_report(database_url)).ok


async def test_a_batch_decided_before_a_projection_repair_decides_again(
        sides: list[Side], database_url: str) -> None:
    first, _ = sides
    task_id = (await first.submit("before")).stream_id
    conn = await asyncpg.connect(database_url)
    try:
        epoch = (await store.read_head(conn)).epoch
        assert (await replay(conn, repair=True)).repaired
        assert (await store.read_head(conn)).epoch == epoch + 1
    finally:
        await conn.close()
    first.sent.clear()
    assert (await first.cancel(task_id)).change_seq == 2
    assert _kinds(first.sent) == ["streams", "write", "head", "streams", "write"]
    assert (await replay_report(database_url)).ok


async def test_after_lost_races_the_writer_locks_the_head_before_deciding(
        database_url: str) -> None:
    other_pool = await create_pool(database_url, min_size=1, max_size=1)
    other = LedgerWriter(other_pool, plan_projection)
    await other.start()
    calls = 0

    async def racing_projection(conn: DbConnection, entries: list[RecordedEntry], *,
                                numbered_by_postgres: bool = False) -> Sequence[Statement] | None:
        """Every optimistic try loses: another process commits while this one decides."""
        nonlocal calls
        calls += 1
        if calls <= OPTIMISTIC_TRIES:
            await other.execute(intake.submit_command(task_body(title=f"o{calls}"),
                                                      actor="other"), "other")
        return await plan_projection(conn, entries, numbered_by_postgres=numbered_by_postgres)

    pool = await create_pool(database_url, min_size=1, max_size=1, transactions_only=True)
    writer = LedgerWriter(pool, racing_projection)
    await writer.start()
    sent: list[str] = []
    try:
        task_id = (await other.execute(intake.submit_command(task_body(title="mine"),
                                                             actor="test"), "test")).stream_id
        async with pool.acquire() as held:
            held.add_query_logger(lambda record: sent.append(record.query))
        outcome = await writer.execute(CancelTask(task_id, None), "test")
    finally:
        await writer.close()
        await other.close()
        await pool.close()
        await other_pool.close()
    assert calls == OPTIMISTIC_TRIES + 1
    assert outcome.change_seq == OPTIMISTIC_TRIES + 2  # after the submit and three commits
    kinds = _kinds(sent)
    assert kinds.count("write") == OPTIMISTIC_TRIES + 1 and kinds[-5:] == [
        "begin;", "lock", "streams", "write", "commit;"], kinds
    await _replays(database_url, events=OPTIMISTIC_TRIES + 2)


@given(queues=st.lists(st.sampled_from(["a", "a/fast", "b"]), min_size=1, max_size=6),
       profiles=st.lists(st.sampled_from([None, "p1", "p2"]), min_size=6, max_size=6),
       base=st.integers(1, 10**12))
@settings(max_examples=50, deadline=None)
def test_fresh_task_rows_differ_only_in_change_seq_by_the_shift(
        queues: list[str], profiles: list[str | None], base: int) -> None:
    """Postgres numbers a fresh-task batch where the head is and adds the shift to every
    projection row's ``change_seq`` (``projection.SEQ_COLUMN``): that is right only if the
    rows folded from entries numbered from 1 equal, shifted so, those folded from the real
    numbers. A projection that copies a changeSeq anywhere else fails here."""
    pending = []
    for queue, profile in zip(queues, profiles, strict=False):
        command = intake.submit_command(task_body(queue=queue, backendProfile=profile),
                                        actor="t")
        assert command.creates_stream
        kind = stream_kind_for(command)
        pending += [store.PendingEvent(kind.stream_type, command.stream_id, 1, event, "t",
                                       utc_now()) for event in kind.decide(None, command)]
    from_one = fold(Rows(), store.prepare_append(0, pending).recorded)
    real = fold(Rows(), store.prepare_append(base, pending).recorded)
    for projection in REGISTRY:
        shifted = [msgspec.structs.replace(row, **{SEQ_COLUMN: getattr(row, SEQ_COLUMN) + base})
                   if SEQ_COLUMN in projection.columns else row
                   for row in from_one.rows(projection)]
        assert shifted == real.rows(projection), projection.table


async def _waiting_writes(conn: asyncpg.Connection, database: str) -> int:
    """How many of the writer's statements wait at the head row now."""
    return int(await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'"
        " AND query LIKE 'WITH a AS MATERIALIZED (SELECT * FROM ledger_advance%'", database))


async def _until_waiting(conn: asyncpg.Connection, database: str, count: int) -> None:
    """Wait (10 s at most) until ``count`` of the writer's statements wait at the head row."""
    for _ in range(500):
        if await _waiting_writes(conn, database) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"fewer than {count} writes waited at the head row")


async def test_batches_of_fresh_tasks_overlap_and_others_wait_for_them(
        database_url: str) -> None:
    pool = await create_pool(database_url, min_size=1, max_size=3, transactions_only=True)
    writer = LedgerWriter(pool, plan_projection)
    await writer.start()
    task_id = (await writer.execute(intake.submit_command(task_body(), actor="t"), "t")).stream_id
    holder = await asyncpg.connect(database_url)  # holds the head row
    watcher = await asyncpg.connect(database_url)  # outside it: activity is read per transaction
    database = await holder.fetchval("SELECT current_database()")
    try:
        holding = holder.transaction()
        await holding.start()
        await holder.execute("SELECT 1 FROM ledger_head WHERE id = 1 FOR UPDATE")

        def submit(title: str) -> asyncio.Task[Outcome]:
            command = intake.submit_command(task_body(title=title), actor="t")
            return asyncio.ensure_future(writer.execute(command, "t"))

        first = submit("first")
        await _until_waiting(watcher, database, 1)
        second = submit("second")  # sent while the first waits: both wait at the head row
        await _until_waiting(watcher, database, 2)
        cancel = asyncio.ensure_future(writer.execute(CancelTask(task_id, None), "t"))
        third = submit("third")  # behind the cancel: it waits for the two to end
        await asyncio.sleep(0.3)
        assert await _waiting_writes(watcher, database) == 2
        assert not any(t.done() for t in (first, second, cancel, third))
        await holding.rollback()
        seqs = [(await t).change_seq for t in (first, second, cancel, third)]
    finally:
        await holder.close()
        await watcher.close()
        await writer.close()
        await pool.close()
    assert seqs == [2, 3, 4, 5], seqs
    assert (await replay_report(database_url)).ok
