"""Output streams and line parts through the runner protocol and the session API (issue 27
items 4 and 6): a job's ``stderr`` batches are numbered apart from its ``stdout`` ones, each
line is stored with its stream (a row stored before the streams reads as ``stdout``) and a
part with its number; one bound covers both streams; bad bodies change nothing."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from ledger import session_lines
from runner_assembly.runner.output_bound import NOTICE_ROOM, Bounded, Tally, notice
from tests.support import snapshot
from tests.test_runner_protocol import JOBS, auth, protocol_on


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(database_url)
    yield connection
    await connection.close()


async def test_streams_and_parts_are_stored_and_read_and_bad_bodies_change_nothing(
    client: httpx.AsyncClient, database_url: str, tmp_path: Path, conn: asyncpg.Connection
) -> None:
    async with protocol_on(database_url, tmp_path) as protocol:
        token = await protocol.issue("job_s", session_id="ses_s", run_id="run_s")
    headers = auth(token)
    await client.post(f"{JOBS}/job_s/claim", json={"claimant": "r1"}, headers=headers)
    # a line stored before the streams existed (no stream column given)
    await conn.execute("INSERT INTO session_line (session_id, channel, seq, runner_job_id, "
                       "line, recorded_at) VALUES ('ses_s', 'output', 1, 'job_old', 'old', "
                       "now())")
    await conn.execute("INSERT INTO session_line_head VALUES ('ses_s', 'output', 1)")
    before = await snapshot(database_url)
    part = {"text": "x", "part": 1, "parts": 2}
    for body in ({"channel": "output", "seq": 1, "lines": ["a"], "stream": "stdin"},
                 {"channel": "trace", "seq": 1, "lines": ["a"], "stream": "stderr"},
                 {"channel": "output", "seq": 1, "lines": [{**part, "part": 3}]},
                 {"channel": "output", "seq": 1, "lines": [{**part, "parts": 1}]},
                 {"channel": "output", "seq": 1, "lines": [{"text": "x", "part": 1}]},
                 {"channel": "output", "seq": 1, "lines": [{**part, "extra": 1}]}):
        answer = await client.post(f"{JOBS}/job_s/lines", json=body, headers=headers)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"]["code"] == "invalid-request"
    assert await snapshot(database_url) == before, "refusals change nothing"
    sent = [{"channel": "output", "seq": 1, "lines": ["out 1"]},
            {"channel": "output", "seq": 1, "lines": ["err 1"], "stream": "stderr"},
            {"channel": "output", "seq": 2, "stream": "stderr",
             "lines": [{"text": "ab", "part": 1, "parts": 2}, {**part, "part": 2}]},
            {"channel": "output", "seq": 2, "lines": ["out 2"], "stream": "stdout"}]
    for body in sent:
        answer = await client.post(f"{JOBS}/job_s/lines", json=body, headers=headers)
        assert answer.json()["accepted"] is True, answer.text
    again = await client.post(f"{JOBS}/job_s/lines", json=sent[1], headers=headers)
    assert again.json()["accepted"] is False, "a resent stderr batch is taken once"
    stored, _last = await session_lines.page(conn, "ses_s", "output", 0, 100)
    assert [(item.line, item.stream, item.part, item.parts) for item in stored] == [
        ("old", "stdout", None, None), ("out 1", "stdout", None, None),
        ("err 1", "stderr", None, None), ("ab", "stderr", 1, 2), ("x", "stderr", 2, 2),
        ("out 2", "stdout", None, None)]


async def test_one_bound_covers_both_streams(conn: asyncpg.Connection) -> None:
    line = "y" * 99  # 100 bytes with its newline
    assert await session_lines.append_batch(conn, "ses_b", "job_b", "output", 1, [line] * 3,
                                            500)
    assert await session_lines.append_batch(conn, "ses_b", "job_b", "output", 1, [line] * 3,
                                            500, "stderr")
    assert await session_lines.append_batch(conn, "ses_b", "job_b", "output", 2, [line], 500,
                                            "stderr")
    stored, _last = await session_lines.page(conn, "ses_b", "output", 0, 100)
    assert [item.stream for item in stored] == ["stdout"] * 3 + ["stderr"] * 3
    assert stored[-1].line.startswith("[svc] the manager stores no more"), \
        "the stderr batch crossing the bound of both streams ends in the notice"
    assert [item.line for item in stored[:5]] == [line] * 5


async def test_a_page_of_long_lines_is_bounded_in_bytes(conn: asyncpg.Connection) -> None:
    line = "z" * (64 * 1024 - 1)
    for batch in range(1, 4):
        assert await session_lines.append_batch(conn, "ses_p", "job_p", "output", batch,
                                                [line] * 40)
    first, last = await session_lines.page(conn, "ses_p", "output", 0, 1000)
    assert last == 120 and len(first) == session_lines.MAX_PAGE_BYTES // len(line) + 1
    rest, _ = await session_lines.page(conn, "ses_p", "output", first[-1].seq, 1000)
    assert [item.seq for item in first + rest] == list(range(1, 121)), "nothing skipped"


def test_the_runner_bounds_both_streams_together() -> None:
    tally = Tally()
    output, errors = io.BytesIO(), io.BytesIO()
    stdout = Bounded(output, 1000, tally=tally)
    stderr = Bounded(errors, 1000, with_notice=False, tally=tally)
    for _ in range(30):
        stderr.write(b"e" * 19 + b"\n")
        stdout.write(b"o" * 19 + b"\n")
    kept = output.getvalue() + errors.getvalue()
    assert len(kept) <= 1000 and output.getvalue().endswith(notice(1000))
    lines = len(kept) - len(notice(1000))
    assert 1000 - NOTICE_ROOM - 40 < lines <= 1000 - NOTICE_ROOM, "both share the room"
    assert stderr.dropped_bytes + stdout.dropped_bytes == 1200 - lines
