"""Exactly-once start through the claim: the server is killed (SIGKILL) at the step boundaries
of dispatch it can reach, restarted, and the dispatch replayed; every job's backend starts at
most once and every line arrives exactly once. ``SVC_KILL_ROUNDS`` (default 2) sets the
rounds per crash point."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from projections.replay import replay
from tests.conftest import SERVER_PIDS, free_port, running_api
from tests.support import TASKS, refresh_until_settled, task_body

LINES = 25
POINTS = ("crash-after-reserve", "crash-after-spawn", "crash-after-create")
ROUNDS = int(os.environ.get("SVC_KILL_ROUNDS", "2"))


async def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        await asyncio.sleep(0.05)
    raise AssertionError("the server did not die")


async def lines_of(http: httpx.AsyncClient, session_id: str, channel: str) -> list[str]:
    found: list[str] = []
    after = 0
    while True:
        page = (await http.get(f"/api/v1/sessions/{session_id}/{channel}",
                               params={"afterSeq": after, "limit": 1000})).json()
        found += [item["line"] for item in page["items"]]
        if not page["items"]:
            return found
        after = page["nextAfterSeq"]


@pytest.mark.parametrize("point", POINTS)
async def test_a_killed_dispatch_replayed_starts_the_backend_once_and_loses_no_line(
    database_url: str, tmp_path: Path, point: str
) -> None:
    double_starts = lost_or_doubled = 0
    port = free_port()  # a restarted manager answers where its runners report
    for round_ in range(ROUNDS):
        prompt = f"round {round_}\nlines: {LINES}"
        async with running_api(database_url, tmp_path, {"SVC_FAULTS": point}, port) as base, \
                httpx.AsyncClient(base_url=base, timeout=60) as http:
            pid = SERVER_PIDS[base]
            task = (await http.post(TASKS, json=task_body(payload={"prompt": prompt}))).json()
            with contextlib.suppress(httpx.HTTPError):  # the server dies mid-dispatch
                await http.post(f"{TASKS}/{task['taskId']}/dispatch", json={})
            await wait_gone(pid)
        async with running_api(database_url, tmp_path, port=port) as base, \
                httpx.AsyncClient(base_url=base, timeout=60) as http:
            replayed = await http.post(f"{TASKS}/{task['taskId']}/dispatch", json={})
            assert replayed.status_code == 200, replayed.text
            done = await refresh_until_settled(http, task["taskId"])
            attempt = done["latestAttempt"]
            assert done["state"] == "completed", (attempt["failureKind"],
                                                  attempt["failureMessage"])
            session_id = done["latestAttempt"]["sessionId"]
            trace = await lines_of(http, session_id, "trace")
            output = await lines_of(http, session_id, "output")
        starts = sum('"kind": "backend-start"' in line for line in trace)
        double_starts += starts > 1
        numbered = [line for line in output if line.startswith("line ")]
        lost_or_doubled += numbered != [f"line {n + 1}" for n in range(LINES)]
        assert starts == 1, trace
    assert (double_starts, lost_or_doubled) == (0, 0)
    conn = await asyncpg.connect(database_url)
    try:
        claims = await conn.fetchval("SELECT count(*) FROM ledger WHERE event_type = "
                                     "'job-claimed'")
        jobs = await conn.fetchval("SELECT count(*) FROM runner_job_record")
        assert claims == jobs == ROUNDS, "one claim per job, one job per attempt"
        assert (await replay(conn)).ok
    finally:
        await conn.close()
