"""One session loop across workers (issue 29's fleet): one process leads (an advisory lock on
a connection of its own), another takes over when the leader dies; the loop asks the database
once which jobs need a look, and a runner gone without a word is still found at once. Lines
sent with the token a lease row holds skip the fold of the job's stream, until its exit."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from api.app import create_app
from ledger import leases
from ledger.leadership import Leadership
from projections import orchestration_queries as oq
from runner_assembly.orchestration import session_service
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client, free_port, listening
from tests.support import fetch_value
from tests.test_dispatch import dispatch, submit
from tests.test_runner_protocol import JOBS, auth, protocol_on, stored_lines

HOLD = ("import asyncio, sys\n"
        "from ledger.leadership import Leadership\n"
        "async def main():\n"
        "    leader = Leadership.on(sys.argv[1], 'test-scope')\n"
        "    print(await leader.leads(), flush=True)\n"
        "    await asyncio.sleep(3600)\n"
        "asyncio.run(main())\n")
"""A process that takes the lead of ``test-scope`` and keeps it until it is killed."""


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 30) -> None:
    """Poll ``check`` until it holds (a generous deadline, no fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_one_process_leads_and_another_takes_over_when_it_is_killed(
        app_url: str) -> None:
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLD, app_url, stdout=asyncio.subprocess.PIPE)
    mine, later, elsewhere = (Leadership.on(app_url, "test-scope"),
                              Leadership.on(app_url, "test-scope"),
                              Leadership.on(app_url, "other-scope"))
    try:
        assert holder.stdout is not None
        assert (await asyncio.wait_for(holder.stdout.readline(), 60)).strip() == b"True"
        assert not await mine.leads(), "the holder leads"
        assert await elsewhere.leads(), "another scope has a leader of its own"
        holder.send_signal(signal.SIGKILL)
        await holder.wait()
        await until(mine.leads, "the lead taken over")
        assert await mine.leads(), "kept while its connection lives"
        assert not await later.leads()
        await mine.close()
        assert await later.leads(), "a leader that steps down hands over at once"
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
        for each in (mine, later, elsewhere):
            await each.close()


async def _leaders(url: str) -> tuple[int, int]:
    """(session-loop leader connections, of them holding an advisory lock)."""
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT count(DISTINCT a.pid) AS connected, count(l.pid) AS holding "
            "FROM pg_stat_activity a LEFT JOIN pg_locks l ON l.pid = a.pid "
            "AND l.locktype = 'advisory' AND l.granted "
            "WHERE a.application_name = 'svc-leader' AND a.datname = current_database()")
        assert row is not None
        return int(row["connected"]), int(row["holding"])
    finally:
        await conn.close()


async def test_of_two_apps_on_one_database_one_follows_the_sessions(
        app_url: str, database_url: str, runner_settings: RunnerSettings) -> None:
    fast = dataclasses.replace(runner_settings, session_sync_interval_ms=50)
    first, second = free_port(), free_port()
    async with listening(_app(app_url, fast, first), first):
        async with listening(_app(app_url, fast, second), second):
            await until(lambda: _is(_leaders(database_url), (2, 1)), "two apps, one leader")
        await until(lambda: _is(_leaders(database_url), (1, 1)), "the one left leads")
    assert await _leaders(database_url) == (0, 0)


def _app(url: str, settings: RunnerSettings, port: int) -> Any:
    return create_app(url, settings=dataclasses.replace(
        settings, runner_api_url=f"http://127.0.0.1:{port}"))


async def _is(found: Awaitable[object], expected: object) -> bool:
    return await found == expected


async def test_the_loop_pages_through_every_running_session(
        app_url: str, runner_settings: RunnerSettings, monkeypatch: Any) -> None:
    """Pages of two: the runners of the two newest of five sessions are killed while the
    three oldest beat on, and the loop still finds them (it once looked at the first page
    only, which the live ones fill for as long as they run)."""
    monkeypatch.setattr(session_service, "SYNC_BATCH", 2)
    settings = dataclasses.replace(runner_settings, runner_heartbeat_s=1.0,
                                   runner_lease_s=120.0)
    async with app_client(app_url, settings) as client:
        tasks, jobs = [], []
        for _ in range(5):
            tasks.append(await submit(client, "sleep: 600"))
            jobs.append((await dispatch(client, tasks[-1]))["latestAttempt"]["runnerJobId"])
        pool = await asyncpg.create_pool(app_url, min_size=1, max_size=2)
        try:
            async def all_quiet() -> bool:
                since = datetime.now(UTC) - timedelta(seconds=120)
                turns = await oq.running_turns(pool, 100, since)
                return sorted(t.runner_job_id or "" for t in turns if t.quiet) == sorted(jobs)

            await until(all_quiet, "five jobs beating", 120)
            for job in jobs[3:]:
                os.kill(int((Path(settings.jobs_dir) / job / "pid").read_text()),
                        signal.SIGKILL)

            async def turns() -> dict[str, str]:
                rows = await pool.fetch("SELECT runner_job_id, status FROM session_turn"
                                        " WHERE runner_job_id = ANY($1::text[])", jobs)
                return {row["runner_job_id"]: row["status"] for row in rows}

            async def killed_found() -> bool:
                status = await turns()
                return all(status[job] == "failed" for job in jobs[3:])

            await until(killed_found, "the killed runners' turns finished", 60)
            assert [(await turns())[job] for job in jobs[:3]] == ["running"] * 3
        finally:
            await pool.close()
            for task_id in tasks[:3]:
                await client.post(f"/api/v1/queue/tasks/{task_id}/cancel",
                                  json={"reason": "test over"})


async def test_a_quiet_job_costs_its_driver_a_look_and_a_killed_runner_is_found_at_once(
        app_url: str, runner_settings: RunnerSettings) -> None:
    settings = dataclasses.replace(runner_settings, runner_heartbeat_s=1.0,
                                   runner_lease_s=120.0)
    async with app_client(app_url, settings) as client:
        task_id = await submit(client, "sleep: 600")
        attempt = (await dispatch(client, task_id))["latestAttempt"]
        job, session = attempt["runnerJobId"], attempt["sessionId"]
        pool = await asyncpg.create_pool(app_url, min_size=1, max_size=2)
        try:
            async def quiet() -> bool:
                since = datetime.now(UTC) - timedelta(seconds=120)
                return [(t.session_id, t.runner_job_id, t.quiet)
                        for t in await oq.running_turns(pool, 100, since)] == [
                    (session, job, True)]

            await until(quiet, "the job beating", 120)
            stale = await oq.running_turns(pool, 100, datetime.now(UTC) + timedelta(hours=1))
            assert [t.quiet for t in stale] == [False], "a lease older than asked: a look"
            await leases.let_go(pool, job)  # what an exit report does to the row
            let_go = await oq.running_turns(pool, 100, datetime.now(UTC) - timedelta(hours=1))
            assert [t.quiet for t in let_go] == [False], "no live token: a look"
            pid = int((Path(settings.jobs_dir) / job / "pid").read_text())
            os.kill(pid, signal.SIGKILL)  # gone without a word, its lease still fresh

            async def lost() -> bool:
                status = await pool.fetchval(
                    "SELECT status FROM session_turn WHERE runner_job_id = $1", job)
                return bool(status == "failed")

            await until(lost, "the lost runner's turn finished", 60)
            failure = await pool.fetchval(
                "SELECT failure_kind FROM session_turn WHERE runner_job_id = $1", job)
            assert failure == "runner-lost"
            assert await oq.running_turns(pool, 100, datetime.now(UTC)) == []
        finally:
            await pool.close()


async def test_lines_sent_with_the_token_a_lease_row_holds_go_to_its_session_until_the_exit(
        client: httpx.AsyncClient, database_url: str, tmp_path: Path) -> None:
    async with protocol_on(database_url, tmp_path) as protocol:
        token = await protocol.issue("job_fl", session_id="ses_fl", run_id="run_fl")
        other = await protocol.issue("job_fo", session_id="ses_fo", run_id="run_fo")
    headers = auth(token)
    await client.post(f"{JOBS}/job_fl/claim", json={"claimant": "r1"}, headers=headers)
    beat = await client.post(f"{JOBS}/job_fl/heartbeat", headers=headers)
    assert beat.status_code == 200
    held = await fetch_value(database_url, "SELECT session_id FROM runner_job_leases "
                             "WHERE runner_job_id = 'job_fl'")
    assert held == "ses_fl", "the row keeps the job's session, from its stream"
    for seq in (1, 2):
        sent = await client.post(f"{JOBS}/job_fl/lines", headers=headers,
                                 json={"channel": "output", "seq": seq, "lines": [f"l{seq}"]})
        assert sent.json()["accepted"] is True
    foreign = await client.post(f"{JOBS}/job_fl/lines", headers=auth(other),
                                json={"channel": "output", "seq": 3, "lines": ["x"]})
    assert foreign.status_code == 401
    wrong = await client.post(f"{JOBS}/job_fl/lines", headers=headers,
                              json={"channel": "trace", "seq": 1, "lines": ["t"],
                                    "stream": "stderr"})
    assert wrong.status_code == 400, "checked after the token, as before"
    exited = await client.post(f"{JOBS}/job_fl/exit", json={"state": "completed"},
                               headers=headers)
    assert exited.status_code == 200
    late = await client.post(f"{JOBS}/job_fl/lines", headers=headers,
                             json={"channel": "output", "seq": 3, "lines": ["late"]})
    assert late.status_code == 401, "an exited job's token is refused, row or not"
    assert await stored_lines(database_url, "ses_fl", "output") == [(1, "l1"), (2, "l2")]
