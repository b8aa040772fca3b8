"""Exactly-once start through the claim, under kill -9: the server is killed (SIGKILL) at the
step boundaries of dispatch, retry and a session turn, restarted, and the request replayed;
a runner kills itself at its own step boundaries, is found lost, and its task retried. Every
job's backend starts at most once, every line arrives exactly once, and no process or job of
a killed one is left. ``SVC_KILL_ROUNDS`` (default 2) sets the rounds per crash point; each
test prints its figures (``kills=… double_starts=… lost_or_duplicated_lines=… orphans=…``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx
import pytest

from projections.replay import replay
from tests.conftest import SERVER_PIDS, free_port, running_api
from tests.support import TASKS, refresh_until_settled, task_body, write_profile_secret

LINES = 25
POINTS = ("crash-after-reserve", "crash-after-spawn", "crash-after-create")
RUNNER_POINTS = {"runner-crash-before-claim": (range(1), range(1)),
                 "runner-crash-after-claim": (range(1), range(1)),
                 "runner-crash-mid-lines": (range(2), range(LINES)),
                 "runner-crash-before-exit": (range(1, 2), range(LINES, LINES + 1))}
"""Runner crash points: the killed job's traced backend starts (mid-lines: its trace batch
may not have been sent yet) and numbered lines delivered."""
ROUNDS = int(os.environ.get("SVC_KILL_ROUNDS", "2"))
LEASE = {"SVC_RUNNER_LEASE_S": "3", "SVC_RUNNER_HEARTBEAT_S": "0.5"}
NUMBERED = [f"line {n + 1}" for n in range(LINES)]
T = TypeVar("T")


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


async def turn_done(http: httpx.AsyncClient, session_id: str) -> None:
    deadline = time.monotonic() + 60
    while (await http.get(f"/api/v1/sessions/{session_id}")).json()["state"] == "running":
        assert time.monotonic() < deadline, "the turn did not end"
        await asyncio.sleep(0.1)


def processes_of(runner_job_id: str) -> list[int]:
    """Processes that name the job (runner, sandbox, backend: in their command or env)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            text = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
            if runner_job_id.encode() in text and stat.rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
    return found


async def orphans_of(runner_job_id: str) -> int:
    """How many processes of an ended job are left after a grace period."""
    deadline = time.monotonic() + 10
    while (left := processes_of(runner_job_id)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return len(left)


@dataclass
class Tally:
    """What one test measured over its kills."""

    kills: int = 0
    double_starts: int = 0
    lost_or_duplicated_lines: int = 0
    orphans: int = 0

    def report(self, name: str) -> None:
        print(f"\n{name}: kills={self.kills} double_starts={self.double_starts} "
              f"lost_or_duplicated_lines={self.lost_or_duplicated_lines} "
              f"orphans={self.orphans}")
        assert (self.double_starts, self.lost_or_duplicated_lines, self.orphans) == (0, 0, 0)


async def job_lines(conn: asyncpg.Connection, runner_job_id: str, channel: str) -> list[str]:
    rows = await conn.fetch("SELECT line FROM session_line WHERE runner_job_id = $1 AND "
                            "channel = $2 ORDER BY seq", runner_job_id, channel)
    return [row["line"] for row in rows]


async def check_job(database_url: str, tally: Tally, runner_job_id: str, *,
                    finished: bool = True) -> tuple[int, int]:
    """One job: its backend started at most once (once if ``finished``), its numbered
    lines each at most once and in order (all of them if ``finished``), none of its
    processes left; its backend starts and numbered lines."""
    conn = await asyncpg.connect(database_url)
    try:
        trace = await job_lines(conn, runner_job_id, "trace")
        numbered = [line for line in await job_lines(conn, runner_job_id, "output")
                    if line.startswith("line ")]
    finally:
        await conn.close()
    starts = sum(json.loads(line)["kind"] == "backend-start" for line in trace)
    tally.double_starts += starts > 1
    expected = NUMBERED if finished else NUMBERED[:len(numbered)]
    tally.lost_or_duplicated_lines += numbered != expected
    tally.orphans += await orphans_of(runner_job_id)
    assert starts == (1 if finished else starts), trace
    assert numbered == expected, numbered
    return starts, len(numbered)


async def check_ledger(database_url: str, jobs: int, claimed: int | None = None) -> None:
    """``claimed`` jobs (default: all) claimed once each, ``jobs`` task attempts' jobs, every
    job ended; the ledger replays."""
    conn = await asyncpg.connect(database_url)
    try:
        claims = await conn.fetch("SELECT stream_id, count(*) AS n FROM ledger WHERE "
                                  "event_type = 'job-claimed' GROUP BY stream_id")
        assert [row["n"] for row in claims] == [1] * (jobs if claimed is None else claimed)
        assert await conn.fetchval("SELECT count(*) FROM runner_job_record") == jobs
        open_jobs = await conn.fetchval(
            "SELECT count(DISTINCT stream_id) FROM ledger l WHERE event_type = "
            "'job-token-issued' AND NOT EXISTS (SELECT 1 FROM ledger e WHERE e.stream_id = "
            "l.stream_id AND e.event_type IN ('job-ended', 'job-exited'))")
        assert open_jobs == 0, "no job is left open"
        assert (await replay(conn)).ok
    finally:
        await conn.close()


@asynccontextmanager
async def server(database_url: str, tmp_path: Path, port: int,
                 env: dict[str, str] | None = None) -> AsyncIterator[httpx.AsyncClient]:
    async with running_api(database_url, tmp_path, env, port) as base, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        yield http


@asynccontextmanager
async def killed(database_url: str, tmp_path: Path, port: int,
                 point: str) -> AsyncIterator[httpx.AsyncClient]:
    """A server with the crash point on: the requests made with it kill it in the middle."""
    async with server(database_url, tmp_path, port, {"SVC_FAULTS": point}) as http:
        pid = SERVER_PIDS[str(http.base_url).rstrip("/")]
        with contextlib.suppress(httpx.HTTPError):
            yield http
        await wait_gone(pid)


async def prepared(database_url: str, tmp_path: Path,
                   make: Callable[[httpx.AsyncClient], Awaitable[T]]) -> tuple[int, T]:
    """The port of a test's servers, and what ``make`` made on a first (clean) one."""
    port = free_port()
    async with server(database_url, tmp_path, port) as http:
        return port, await make(http)


async def new_session(http: httpx.AsyncClient) -> dict[str, Any]:
    return dict((await http.post("/api/v1/sessions", json={})).json())


async def completed_job(http: httpx.AsyncClient, task_id: str) -> str:
    done = await refresh_until_settled(http, task_id)
    attempt = done["latestAttempt"]
    assert done["state"] == "completed", (attempt["failureKind"], attempt["failureMessage"])
    return str(attempt["runnerJobId"])


def prompt(round_: int) -> dict[str, Any]:
    return task_body(payload={"prompt": f"round {round_}\nlines: {LINES}"})


@pytest.mark.parametrize("point", POINTS)
async def test_a_killed_dispatch_replayed_starts_the_backend_once_and_loses_no_line(
    database_url: str, tmp_path: Path, point: str
) -> None:
    tally = Tally()
    port = free_port()  # a restarted manager answers where its runners report
    for round_ in range(ROUNDS):
        async with killed(database_url, tmp_path, port, point) as http:
            task = (await http.post(TASKS, json=prompt(round_))).json()
            await http.post(f"{TASKS}/{task['taskId']}/dispatch", json={})
        tally.kills += 1
        async with server(database_url, tmp_path, port) as http:
            replayed = await http.post(f"{TASKS}/{task['taskId']}/dispatch", json={})
            assert replayed.status_code == 200, replayed.text
            job = await completed_job(http, task["taskId"])
            await check_job(database_url, tally, job)  # a losing runner is told while up
    tally.report(f"dispatch/{point}")
    await check_ledger(database_url, ROUNDS)


async def failed_task(http: httpx.AsyncClient, data: Path, round_: int) -> str:
    """A task whose first attempt ended ``blocked`` (its profile secret was missing)."""
    secrets = data / "secrets"
    shutil.rmtree(secrets)
    task = (await http.post(TASKS, json=prompt(round_))).json()
    await http.post(f"{TASKS}/{task['taskId']}/dispatch", json={})
    done = await refresh_until_settled(http, task["taskId"])
    assert done["state"] == "blocked", done
    write_profile_secret(data)
    return str(task["taskId"])


@pytest.mark.parametrize("point", POINTS)
async def test_a_killed_retry_replayed_with_its_key_starts_the_backend_once(
    database_url: str, tmp_path: Path, point: str
) -> None:
    tally = Tally()
    port, task_id = await prepared(database_url, tmp_path,
                                   lambda http: failed_task(http, tmp_path / "data", 0))
    for round_ in range(ROUNDS):
        body = {"idempotencyKey": f"retry-{round_}", "reason": "kill -9"}
        async with killed(database_url, tmp_path, port, point) as http:
            await http.post(f"{TASKS}/{task_id}/retry", json=body)
        tally.kills += 1
        async with server(database_url, tmp_path, port) as http:
            replayed = await http.post(f"{TASKS}/{task_id}/retry", json=body)
            assert replayed.status_code == 200, replayed.text
            job = await completed_job(http, task_id)
            attempts = (await http.get(f"{TASKS}/{task_id}/attempts")).json()["items"]
            assert len(attempts) == 2, "the replayed key reserved no second retry"
            await check_job(database_url, tally, job)
            if round_ + 1 < ROUNDS:  # the next round's task, on this server
                task_id = await failed_task(http, tmp_path / "data", round_ + 1)
    tally.report(f"retry/{point}")
    await check_ledger(database_url, 2 * ROUNDS, ROUNDS)  # the blocked one never started


@pytest.mark.parametrize("point", POINTS)
async def test_a_killed_session_turn_replayed_with_its_command_id_starts_once(
    database_url: str, tmp_path: Path, point: str
) -> None:
    tally = Tally()
    port, session = await prepared(database_url, tmp_path, new_session)
    session_id, run_id = session["sessionId"], session["runId"]
    for round_ in range(ROUNDS):
        body = {"payload": {"prompt": f"turn {round_}\nlines: {LINES}"},
                "commandId": f"cmd_kill{round_}"}
        async with killed(database_url, tmp_path, port, point) as http:
            await http.post(f"/api/v1/runs/{run_id}/commands", json=body)
        tally.kills += 1
        async with server(database_url, tmp_path, port) as http:
            replayed = await http.post(f"/api/v1/runs/{run_id}/commands", json=body)
            assert replayed.status_code in (200, 201), replayed.text
            job = replayed.json()["runnerJobId"]
            await turn_done(http, session_id)
            detail = (await http.get(f"/api/v1/sessions/{session_id}")).json()
            assert detail["recentTurns"][0]["status"] == "completed", detail
            await check_job(database_url, tally, job)
    tally.report(f"turn/{point}")
    await check_ledger(database_url, 0, ROUNDS)


@pytest.mark.parametrize("point", RUNNER_POINTS)
async def test_a_killed_runner_is_lost_and_its_retry_starts_the_backend_once(
    database_url: str, tmp_path: Path, point: str
) -> None:
    tally = Tally()
    env = {"SVC_FAULTS": point, **LEASE}
    async with server(database_url, tmp_path, free_port(), env) as http:
        for round_ in range(ROUNDS):
            body = task_body(payload={"prompt": f"round {round_}\nlines: {LINES}\npace: 0.04"})
            task = (await http.post(TASKS, json=body)).json()
            await http.post(f"{TASKS}/{task['taskId']}/dispatch", json={})
            lost = await refresh_until_settled(http, task["taskId"])
            tally.kills += 1
            attempt = lost["latestAttempt"]
            assert (lost["state"], attempt["failureKind"]) == ("failed", "runner-lost"), lost
            starts, delivered = await check_job(database_url, tally, attempt["runnerJobId"],
                                                finished=False)
            assert starts in RUNNER_POINTS[point][0] and delivered in RUNNER_POINTS[point][1]
            retried = await http.post(f"{TASKS}/{task['taskId']}/retry", json={
                "idempotencyKey": "after-kill", "reason": "runner lost"})
            assert retried.status_code == 200, retried.text
            job = await completed_job(http, task["taskId"])
            assert job != attempt["runnerJobId"]
            await check_job(database_url, tally, job)
    tally.report(f"runner/{point}")
    await check_ledger(database_url, 2 * ROUNDS,
                       ROUNDS if point == "runner-crash-before-claim" else 2 * ROUNDS)


@pytest.mark.parametrize("sandbox", ["bwrap", "off"])
async def test_a_killed_runner_leaves_no_backend_behind(
    database_url: str, tmp_path: Path, sandbox: str
) -> None:
    tally = Tally()
    env = {"SVC_FAULTS": "runner-crash-mid-lines", "SVC_LOCAL_SANDBOX": sandbox, **LEASE}
    async with server(database_url, tmp_path, free_port(), env) as http:
        for round_ in range(ROUNDS):
            body = task_body(payload={"prompt": f"round {round_}\nlines: 3\nsleep: 60"})
            task = (await http.post(TASKS, json=body)).json()
            await http.post(f"{TASKS}/{task['taskId']}/dispatch", json={})
            lost = await refresh_until_settled(http, task["taskId"])  # the backend sleeps on
            tally.kills += 1
            assert lost["latestAttempt"]["failureKind"] == "runner-lost", lost
            tally.orphans += await orphans_of(lost["latestAttempt"]["runnerJobId"])
    tally.report(f"backend/{sandbox}")
