"""Group commit of the runners' reports (ledger/grouped.py): reports arriving together are
written in one statement, each answered as if written alone; a lone report never waits.

The scheduling is tested with writers that record what they were given; the statements with
the real Postgres, a group against the same batches written one by one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from ledger import leases, session_lines
from ledger.database import create_pool
from ledger.errors import InvalidTransition
from ledger.grouped import GroupCancelled, Grouped
from runner_assembly.orchestration.runner_protocol import token_hash
from tests.test_runner_protocol import protocol_on

Item = tuple[str, int]


class Recorder:
    """Writers that answer an item with its number doubled, and record each group."""

    def __init__(self, fail_group: bool = False, fail_one: set[int] | None = None,
                 pause_s: float = 0.0) -> None:
        self.groups: list[list[Item]] = []
        self.alone: list[Item] = []
        self.writing = 0
        self.most_writing = 0
        self.busy_keys: set[str] = set()
        self.fail_group = fail_group
        self.fail_one = fail_one or set()
        self.pause_s = pause_s

    async def group(self, items: Sequence[Item]) -> list[int]:
        self.groups.append(list(items))
        self.writing += 1
        self.most_writing = max(self.most_writing, self.writing)
        try:
            await asyncio.sleep(self.pause_s)
        finally:
            self.writing -= 1
        if self.fail_group:
            raise RuntimeError("deadlock detected")
        return [number * 2 for _, number in items]

    async def one(self, item: Item) -> int:
        assert item[0] not in self.busy_keys, "a key's reports are written one at a time"
        self.busy_keys.add(item[0])
        self.alone.append(item)
        await asyncio.sleep(self.pause_s)
        self.busy_keys.discard(item[0])
        if item[1] in self.fail_one:
            raise ValueError(f"item {item[1]} refused")
        return item[1] * 2

    def grouped(self, **options: Any) -> Grouped[Item, int]:
        return Grouped(self.group, self.one, key=lambda item: item[0], **options)


async def test_a_lone_report_and_one_jobs_reports_are_written_at_once() -> None:
    recorder = Recorder()
    grouped = recorder.grouped(gather_s=5.0)
    started = time.monotonic()
    assert await grouped.write(("job_a", 1)) == 2
    for number in range(2, 6):  # one job reporting fast: nothing to gather for
        assert await grouped.write(("job_a", number)) == number * 2
    assert time.monotonic() - started < 2.0, "no report waited for the gathering"
    assert recorder.groups == [[("job_a", n)] for n in range(1, 6)]


async def test_reports_of_several_jobs_go_in_groups_ordered_by_job() -> None:
    recorder = Recorder(pause_s=0.02)
    grouped = recorder.grouped(gather_s=0.05)
    items = [(f"job_{letter}", number) for number, letter in enumerate("qwertyuiopasdfgh")]
    answers = await asyncio.gather(*(grouped.write(item) for item in items))
    assert answers == [number * 2 for _, number in items], "each its own answer, in order"
    assert sorted(item for group in recorder.groups for item in group) == sorted(items)
    assert len(recorder.groups) <= 3, recorder.groups
    assert max(len(group) for group in recorder.groups) >= 8
    for group in recorder.groups:
        assert [job for job, _ in group] == sorted(job for job, _ in group)
    assert (grouped.groups, grouped.items) == (len(recorder.groups), len(items))


async def test_a_failed_group_answers_each_report_alone() -> None:
    recorder = Recorder(fail_group=True, fail_one={3})
    grouped = recorder.grouped(gather_s=0.05)
    outcomes = await asyncio.gather(*(grouped.write((f"job_{n}", n)) for n in range(6)),
                                    return_exceptions=True)
    assert outcomes[:3] == [0, 2, 4] and outcomes[4:] == [8, 10]
    assert isinstance(outcomes[3], ValueError) and "item 3 refused" in str(outcomes[3])
    assert sorted(recorder.alone) == sorted((f"job_{n}", n) for n in range(6))


async def test_a_group_keeps_within_its_count_and_weight() -> None:
    recorder = Recorder(pause_s=0.02)
    weights = {n: 60 if n == 7 else 10 for n in range(20)}
    grouped: Grouped[Item, int] = Grouped(recorder.group, recorder.one,
                                          key=lambda item: item[0],
                                          weight=lambda item: weights[item[1]],
                                          gather_s=0.05, max_items=5, max_weight=45)
    await asyncio.gather(*(grouped.write((f"job_{n:02d}", n)) for n in range(20)))
    assert all(len(group) <= 5 and (len(group) == 1 or sum(weights[n] for _, n in group) <= 45)
               for group in recorder.groups), recorder.groups
    assert [group for group in recorder.groups if ("job_07", 7) in group] == [
        [("job_07", 7)]], "a report heavier than a group is a group of its own"
    assert recorder.most_writing <= 2, "two groups in flight at most"


async def test_a_report_whose_caller_left_before_its_group_is_not_written() -> None:
    recorder = Recorder(pause_s=0.2)
    grouped = recorder.grouped(gather_s=0.05)
    first = asyncio.ensure_future(grouped.write(("job_a", 1)))
    await asyncio.sleep(0.01)  # the first group is in flight
    second = asyncio.ensure_future(grouped.write(("job_b", 2)))
    third = asyncio.ensure_future(grouped.write(("job_c", 3)))
    await asyncio.sleep(0)
    second.cancel()
    assert await first == 2 and await third == 6
    assert ("job_b", 2) not in [item for group in recorder.groups for item in group]


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    db = await create_pool(database_url, max_size=4)
    yield db
    await db.close()


async def held(pool: asyncpg.Pool, jobs: dict[str, str], at: datetime) -> None:
    """Lease rows holding the token ``tok_<job>`` of each job (job: session)."""
    for job, session in jobs.items():
        await leases.renew(pool, job, at, token_hash(f"tok_{job}"), session)


def batch(job: str, seq: int, lines: list[str | session_lines.Piece], at: datetime,
          channel: str = "output", stream: str = "stdout",
          token: str | None = None) -> session_lines.HeldBatch:
    holder = session_lines.Holder(token_hash(token or f"tok_{job}"), at)
    return session_lines.HeldBatch(holder, job, channel, seq, session_lines.prepared(lines),
                                   stream)


def script(prefix: str, at: datetime) -> list[session_lines.HeldBatch]:
    """Batches of every kind of answer, for jobs named with ``prefix``."""
    long_line = [session_lines.Piece("ab", 1, 2), session_lines.Piece("cd", 2, 2)]
    return [
        batch(f"{prefix}a", 1, ["a1", "a2", "a3"], at),
        batch(f"{prefix}a", 2, [], at),
        batch(f"{prefix}a", 1, ["a4 in the trace"], at, channel="trace"),
        batch(f"{prefix}b", 1, ["b1", *long_line, "b2"], at),
        batch(f"{prefix}b", 1, ["resent"], at),
        batch(f"{prefix}b", 1, ["b stderr"], at, stream="stderr"),
        batch(f"{prefix}c", 3, ["gap"], at),
        batch(f"{prefix}d", 1, ["not held"], at, token="tok_someone_else"),
        batch(f"{prefix}a", 3, ["a5", "a6"], at),
    ]


async def stored(pool: asyncpg.Pool, session_prefix: str) -> list[tuple[Any, ...]]:
    rows = await pool.fetch(
        "SELECT substr(session_id, length($1) + 1), channel, seq, substr(runner_job_id, "
        "length($1) + 1), line, stream, part, parts FROM session_line "
        "WHERE session_id LIKE $1 || '%' ORDER BY session_id, channel, seq", session_prefix)
    return [tuple(row.values()) for row in rows]


async def test_a_group_appends_as_its_batches_would_one_by_one(pool: asyncpg.Pool) -> None:
    at = datetime.now(UTC)
    for prefix in ("g_", "o_"):
        await held(pool, {f"{prefix}a": f"{prefix}s1", f"{prefix}b": f"{prefix}s1",
                          f"{prefix}c": f"{prefix}s2"}, at - timedelta(minutes=5))
    grouped_rows = await session_lines.append_held_group(pool, script("g_", at))
    alone_rows = [await session_lines.append_held(pool, one) for one in script("o_", at)]
    outcomes = [(row["outcome"], row["expected_seq"]) for row in grouped_rows]
    assert outcomes == [(row["outcome"], row["expected_seq"]) for row in alone_rows]
    assert outcomes == [("stored", None), ("stored", None), ("stored", None),
                        ("stored", None), ("taken", None), ("stored", None), ("gap", 1),
                        ("unheld", None), ("stored", None)]
    assert [row["held_session"] for row in grouped_rows][:3] == ["g_s1"] * 3
    group_lines = await stored(pool, "g_")
    assert group_lines == await stored(pool, "o_")
    assert [(channel, seq, line) for _, channel, seq, _, line, *_ in group_lines] == [
        ("output", 1, "a1"), ("output", 2, "a2"), ("output", 3, "a3"), ("output", 4, "b1"),
        ("output", 5, "ab"), ("output", 6, "cd"), ("output", 7, "b2"),
        ("output", 8, "b stderr"), ("output", 9, "a5"), ("output", 10, "a6"),
        ("trace", 1, "a4 in the trace")]
    renewed = await pool.fetch("SELECT runner_job_id, last_seen FROM runner_job_leases "
                               "WHERE runner_job_id LIKE 'g_%' ORDER BY 1")
    assert [(row[0], row[1] == at) for row in renewed] == [
        ("g_a", True), ("g_b", True), ("g_c", True)], "each held batch renewed its lease"
    with pytest.raises(InvalidTransition):
        await session_lines.settle(pool, grouped_rows[6], "g_c", "output", 3,
                                   session_lines.prepared(["gap"]), None, "stdout")


async def test_a_group_of_beats_renews_as_each_beat_alone(pool: asyncpg.Pool) -> None:
    before, at = datetime.now(UTC) - timedelta(minutes=5), datetime.now(UTC)
    await held(pool, {"h_a": "h_s1", "h_b": "h_s2"}, before)
    beats = [leases.Beat("h_b", token_hash("tok_h_b"), at),
             leases.Beat("h_a", token_hash("tok_nobody"), at),
             leases.Beat("h_none", token_hash("tok_h_none"), at),
             leases.Beat("h_a", token_hash("tok_h_a"), at)]
    assert await leases.renew_held_group(pool, beats) == [True, False, False, True]
    rows = await pool.fetch("SELECT runner_job_id, last_seen, renewals FROM runner_job_leases "
                            "WHERE runner_job_id LIKE 'h_%' ORDER BY 1")
    assert [(row[0], row[1] == at) for row in rows] == [("h_a", True), ("h_b", True)]
    assert [await leases.renew_held(pool, *beat) for beat in beats] == [True, False, False,
                                                                       True]


async def test_many_jobs_reporting_at_once_are_written_in_groups_and_lose_nothing(
    database_url: str, tmp_path: Path, pool: asyncpg.Pool
) -> None:
    jobs = {f"m_{n:02d}": f"m_s{n % 3}" for n in range(24)}
    await held(pool, jobs, datetime.now(UTC))
    async with protocol_on(database_url, tmp_path) as protocol:

        async def ship(job: str) -> None:
            for seq in range(1, 6):
                assert await protocol.lines(job, f"tok_{job}", "output", seq,
                                            [f"{job} {seq} {n}" for n in range(2)])
                await protocol.heartbeat(job, f"tok_{job}")

        await asyncio.gather(*(ship(job) for job in jobs))
        assert protocol.line_groups.items == 24 * 5
        assert protocol.line_groups.groups < protocol.line_groups.items / 2, \
            "reports arriving together share a statement"
        assert protocol.beat_groups.items == 24 * 5
    for session in ("m_s0", "m_s1", "m_s2"):
        rows = await pool.fetch("SELECT seq, line FROM session_line WHERE session_id = $1 "
                                "ORDER BY seq", session)
        assert [row["seq"] for row in rows] == list(range(1, 8 * 5 * 2 + 1))
        for job in (job for job, owner in jobs.items() if owner == session):
            assert [row["line"] for row in rows if row["line"].startswith(f"{job} ")] == \
                [f"{job} {seq} {n}" for seq in range(1, 6) for n in range(2)]


async def test_a_full_group_does_not_wait_out_its_gathering() -> None:
    recorder = Recorder(pause_s=0.01)
    grouped = recorder.grouped(gather_s=30.0, max_items=4)
    started = time.monotonic()
    first = asyncio.ensure_future(grouped.write(("job_a", 0)))  # alone: at once
    rest = [asyncio.ensure_future(grouped.write((f"job_{n}", n))) for n in range(1, 9)]
    assert await asyncio.wait_for(asyncio.gather(first, *rest), 10) == [n * 2 for n in
                                                                        range(9)]
    assert time.monotonic() - started < 5
    assert [len(group) for group in recorder.groups] == [1, 4, 4]


async def test_a_failed_groups_reports_of_one_job_are_retried_in_their_order() -> None:
    recorder = Recorder(fail_group=True, pause_s=0.01)
    grouped = recorder.grouped(gather_s=0.05)
    items = [("job_a", 1), ("job_b", 2), ("job_a", 3), ("job_a", 4), ("job_b", 5)]
    assert await asyncio.gather(*(grouped.write(item) for item in items)) == [2, 4, 6, 8, 10]
    assert [item for item in recorder.alone if item[0] == "job_a"] == \
        [("job_a", 1), ("job_a", 3), ("job_a", 4)]


async def test_an_outage_answers_the_group_without_retrying_it() -> None:
    recorder = Recorder(fail_group=True)
    grouped: Grouped[Item, int] = Grouped(recorder.group, recorder.one,
                                          key=lambda item: item[0],
                                          retry_alone=lambda error: False, gather_s=0.05)
    outcomes = await asyncio.gather(*(grouped.write((f"job_{n}", n)) for n in range(4)),
                                    return_exceptions=True)
    assert all(isinstance(outcome, RuntimeError) for outcome in outcomes)
    assert recorder.alone == []


async def test_a_cancelled_group_write_answers_its_callers_and_frees_its_place() -> None:
    async def cancelled(items: Sequence[Item]) -> list[int]:
        raise asyncio.CancelledError

    async def one(item: Item) -> int:
        return item[1]

    grouped: Grouped[Item, int] = Grouped(cancelled, one, key=lambda item: item[0],
                                          max_in_flight=1)
    for attempt in range(3):  # the place in flight is given back each time
        with pytest.raises(GroupCancelled):
            await asyncio.wait_for(grouped.write(("job_a", attempt)), 5)


async def test_a_job_whose_row_is_locked_elsewhere_does_not_hold_up_its_group(
    database_url: str, tmp_path: Path, pool: asyncpg.Pool
) -> None:
    jobs = {f"k_{n}": f"k_s{n}" for n in (1, 0, 2, 3)}  # k_1 alone, then a group with k_0
    await held(pool, jobs, datetime.now(UTC))
    blocker = await asyncpg.connect(database_url)
    try:
        locked = blocker.transaction()
        await locked.start()
        await blocker.execute("SELECT FROM runner_job_leases WHERE runner_job_id = 'k_0' "
                              "FOR UPDATE")
        async with protocol_on(database_url, tmp_path) as protocol:
            try:
                calls = {job: asyncio.ensure_future(protocol.lines(
                    job, f"tok_{job}", "output", 1, [f"{job} line"])) for job in jobs}
                others = [calls[job] for job in jobs if job != "k_0"]
                assert all(await asyncio.wait_for(asyncio.gather(*others), 10)), \
                    "the jobs not locked are answered while k_0 waits"
                assert not calls["k_0"].done()
                assert protocol.line_groups.groups == 2, "k_0 was in a group with others"
                await locked.rollback()
                assert await asyncio.wait_for(calls["k_0"], 10) is True
            finally:  # the pool closes only once the lock is gone
                await blocker.close()
    finally:
        await blocker.close()
    rows = await pool.fetch("SELECT session_id, line FROM session_line "
                            "WHERE session_id LIKE 'k_%' ORDER BY 1")
    assert [(row[0], row[1]) for row in rows] == [(f"k_s{n}", f"k_{n} line")
                                                  for n in range(4)]


async def test_batches_crossing_the_bound_in_a_group_keep_what_fits_and_one_notice(
    database_url: str, tmp_path: Path, pool: asyncpg.Pool
) -> None:
    jobs = {f"n_{n}": f"n_s{n}" for n in range(6)}
    await held(pool, jobs, datetime.now(UTC))
    async with protocol_on(database_url, tmp_path) as protocol:
        protocol.output_max_bytes = 25  # each job's two batches of 20 bytes cross it
        grouped = protocol.line_groups = Grouped(
            lambda batches: session_lines.append_held_group(pool, batches, 25),
            lambda one: session_lines.append_held(pool, one, 25),
            key=lambda one: one.runner_job_id, gather_s=0.05)

        async def ship(job: str) -> None:
            for seq in (1, 2):
                assert await protocol.lines(job, f"tok_{job}", "output", seq,
                                            [f"{job} {seq}a", f"{job} {seq}b"])

        await asyncio.gather(*(ship(job) for job in jobs))
        assert grouped.groups < grouped.items
    for n in range(6):
        rows = await pool.fetch("SELECT line FROM session_line WHERE session_id = $1 "
                                "ORDER BY seq", f"n_s{n}")
        lines = [row[0] for row in rows]
        assert lines[:3] == [f"n_{n} 1a", f"n_{n} 1b", f"n_{n} 2a"]
        assert len(lines) == 4 and "past its bound of 25 bytes" in lines[3]


async def test_a_group_of_beats_leaves_the_flush_setting_to_its_own_transaction(
    database_url: str
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await leases.renew(conn, "f_a", datetime.now(UTC), token_hash("tok_f_a"), "f_s")
        assert await leases.renew_held_group(conn, [leases.Beat(
            "f_a", token_hash("tok_f_a"), datetime.now(UTC))]) == [True]
        assert await conn.fetchval("SHOW synchronous_commit") == "on"
        assert await conn.fetchval("SHOW lock_timeout") == "0"
    finally:
        await conn.close()
