"""A turn's output is bounded (``SVC_OUTPUT_MAX_BYTES``, issue 26 item 6, DESIGN 13).

The runner keeps whole lines up to the bound (its one notice included), drops the rest
while draining the backend, traces one ``output-bounded`` event with the count, and the turn
ends as it would have; the manager stores no more of a job's channel past the bound either.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from ledger import session_lines
from runner_assembly.runner.output_bound import NOTICE_ROOM, Bounded, notice
from runner_assembly.settings import RunnerSettings
from tests.test_dispatch import dispatch, settle, submit
from tests.test_driver_conformance import (  # noqa: F401  (the fixtures)
    SESSIONS,
    Harness,
    harness,
    kube,
    lines,
    ref,
)

BOUND = 64 * 1024
PRINTED = 20_000
"""Numbered lines the backend prints: about 190 KB, three times the bound."""


@pytest.fixture
def runner_settings(runner_settings: RunnerSettings) -> RunnerSettings:
    """The harness's settings with a small output bound."""
    return dataclasses.replace(runner_settings, output_max_bytes=BOUND)


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(database_url)
    yield connection
    await connection.close()


def test_the_sink_keeps_whole_lines_within_the_bound_then_one_notice_and_counts_the_rest(
) -> None:
    file = io.BytesIO()
    sink = Bounded(file, 1000)
    rows = [b"row %d\n" % n for n in range(400)]
    printed = b"".join(rows)
    for start in range(0, len(rows), 7):  # the relay hands on whole lines, several at once
        sink.write(b"".join(rows[start:start + 7]))
    sink.write(b"a last line without its newline")
    kept = file.getvalue()
    assert len(kept) <= 1000 and kept.endswith(notice(1000))
    body = kept.removesuffix(notice(1000))
    assert body.endswith(b"\n") and printed.startswith(body)
    assert len(body) <= 1000 - NOTICE_ROOM
    assert sink.dropped_bytes == len(printed) - len(body) + len(b"a last line without its newline")
    assert sink.dropped_lines == 400 - body.count(b"\n") + 1
    assert kept.count(b"[svc]") == 1


def test_the_sink_closes_a_cut_line_before_its_notice_and_keeps_all_below_the_bound() -> None:
    file = io.BytesIO()
    sink = Bounded(file, NOTICE_ROOM + 10)
    sink.write(b"0123456")  # a piece of a long line, kept
    sink.write(b"789abcdef\nnext\n")
    assert file.getvalue() == b"0123456\n" + notice(NOTICE_ROOM + 10)
    assert (sink.dropped_bytes, sink.dropped_lines) == (len(b"789abcdef\nnext\n"), 2)
    small = io.BytesIO()
    quiet = Bounded(small, 100, with_notice=False)
    quiet.write(b"x\n" * 10)
    assert small.getvalue() == b"x\n" * 10 and not quiet.cut


async def test_the_manager_stores_a_job_channel_up_to_the_bound_then_one_notice(
    conn: asyncpg.Connection
) -> None:
    batch = [f"line {n:04d}" for n in range(100)]  # 9 bytes each, 10 with the newline
    session, job = "ses_flood", "job_flood"
    assert await session_lines.append_batch(conn, session, job, "output", 1, batch, 500)
    assert await session_lines.append_batch(conn, session, job, "output", 2, batch, 500)
    assert not await session_lines.append_batch(conn, session, job, "output", 2, batch, 500)
    stored, last = await session_lines.page(conn, session, "output", 0, 1000)
    texts = [line.line for line in stored]
    assert texts[:-1] == batch[:50] and "past its bound of 500 bytes" in texts[-1]
    assert last == 51
    assert await conn.fetchval("SELECT byte_offset FROM session_line_source "
                               "WHERE runner_job_id = $1", job) == 2 * 100 * 10
    other = await session_lines.append_batch(conn, session, "job_next", "output", 1, batch[:3],
                                             500)
    assert other and (await session_lines.last_seq(conn, session, "output")) == 54


async def all_lines(client: httpx.AsyncClient, session_id: str) -> list[str]:
    """Every stored output line of the session, page by page."""
    found: list[str] = []
    after = 0
    while True:
        page = (await client.get(f"{SESSIONS}/{session_id}/output",
                                 params={"afterSeq": after, "limit": 1000})).json()
        found += [item["line"] for item in page["items"]]
        if not page["items"]:
            return found
        after = page["nextAfterSeq"]


async def test_a_backend_printing_past_the_bound_completes_with_its_output_cut_and_counted(
    harness: Harness,  # noqa: F811
) -> None:
    client = harness.client
    task_id = await submit(client, f"lines: {PRINTED}", sessionRef=ref("ses_flood"))
    await dispatch(client, task_id)
    done = await settle(client, task_id, timeout=120)
    assert done["state"] == "completed", done
    output = await all_lines(client, "ses_flood")
    assert sum(len(line.encode()) + 1 for line in output) <= BOUND
    assert output[-1] == notice(BOUND).decode().rstrip("\n")
    numbered = [line for line in output if line.startswith("line ")]
    last_kept = int(numbered[-1].split()[1])
    assert numbered == [f"line {n}" for n in range(1, last_kept + 1)]
    assert last_kept < PRINTED
    trace = [json.loads(line) for line in await lines(client, "ses_flood", "trace")]
    bounded = [event for event in trace if event["kind"] == "output-bounded"]
    assert len(bounded) == 1, trace
    dropped = range(last_kept + 1, PRINTED + 1)
    assert bounded[0]["maxBytes"] == BOUND
    assert bounded[0]["droppedLines"] == len(dropped)
    assert bounded[0]["droppedBytes"] == sum(len(f"line {n}\n") for n in dropped)
    exits = [event for event in trace if event["kind"] == "backend-exit"]
    assert exits[-1]["state"] == "completed" and exits[-1]["exitCode"] == 0
