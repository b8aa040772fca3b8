"""A create that fails after its runner started: the runner's claim is refused, so no backend
runs for an attempt (or a session turn) that was given up (a forkserver that answered too
late while the driver's own start failed; a create that worked but reported an error)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import api.app
from ledger.states import FailureKind
from runner_assembly.assembly.names import TOKEN_FILE
from runner_assembly.drivers import make_driver
from runner_assembly.drivers.faults import FaultyDriver
from runner_assembly.drivers.protocol import DriverError, JobHandle, JobSpec, RunnerDriver
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.support import post_changing_nothing
from tests.test_dispatch import dispatch, job_dirs, run_task, runner_paused, settle, submit
from tests.test_runner_protocol import JOBS, events_of
from tests.test_sessions import SESSIONS, command, lines, ref, wait_idle


class StartsThenFails(FaultyDriver):
    """Creates for real (the runner starts), then, while ``kind`` is set, reports an error."""

    def __init__(self, inner: RunnerDriver) -> None:
        super().__init__(inner, frozenset(), 0)
        self.kind: FailureKind | None = None
        self.started: dict[str, int] = {}

    async def create(self, spec: JobSpec) -> JobHandle:
        handle = await self.inner.create(spec)
        if self.kind is None:
            return handle
        self.started[spec.runner_job_id] = int(handle.handle.removeprefix("pid:"))
        raise DriverError(self.kind, "the runner could not be started (injected)")


@pytest.fixture
async def failing(app_url: str, runner_settings: RunnerSettings,
                  monkeypatch: pytest.MonkeyPatch
                  ) -> AsyncIterator[tuple[Any, StartsThenFails]]:
    drivers: list[StartsThenFails] = []

    def make(settings: RunnerSettings) -> RunnerDriver:
        drivers.append(StartsThenFails(make_driver(settings)))
        return drivers[-1]

    monkeypatch.setattr(api.app, "make_driver", make)
    async with app_client(app_url, runner_settings) as http:
        yield http, drivers[0]


def _gone(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def assert_no_backend_ran(settings: RunnerSettings, database_url: str,
                                runner_job_id: str, pid: int) -> None:
    """The runner the failed create started ends on its own without starting a backend:
    the manager ended the job right after the failed create, so the runner's claim is
    refused, or, if the claim came first, its assembly event (which must be recorded
    before the backend starts, SPEC 9) is."""
    deadline = time.monotonic() + 30
    while not _gone(pid):
        assert time.monotonic() < deadline, "the runner still runs"
        await asyncio.sleep(0.05)
    folder: Path = settings.jobs_dir / runner_job_id
    log = (folder / "runner.log").read_text()
    assert "manager refused" in log and "401" in log, log
    trace = folder / "trace.jsonl"
    kinds = [json.loads(line)["kind"] for line in trace.read_text().splitlines()] \
        if trace.exists() else []
    assert not {"assembled", "backend-start"} & set(kinds), kinds
    events = await events_of(database_url, runner_job_id)
    assert "job-ended" in events and "job-assembly-reported" not in events, events
    assert events.index("job-ended") > events.index("job-claimed") \
        if "job-claimed" in events else True, "a claim after the end is refused"


async def test_a_dispatch_whose_create_failed_for_good_ends_the_job(
    failing: tuple[Any, StartsThenFails], runner_settings: RunnerSettings, database_url: str
) -> None:
    client, driver = failing
    driver.kind = FailureKind.SECRET_UNAVAILABLE  # a blocker: the attempt ends
    task_id = await submit(client, "never runs")
    task = await dispatch(client, task_id)
    assert task["state"] == "blocked", task
    assert task["latestAttempt"]["failureKind"] == "secret-unavailable"
    [(runner_job_id, pid)] = driver.started.items()
    await assert_no_backend_ran(runner_settings, database_url, runner_job_id, pid)


async def test_a_session_turn_whose_create_failed_ends_the_job(
    failing: tuple[Any, StartsThenFails], runner_settings: RunnerSettings, database_url: str
) -> None:
    client, driver = failing
    _, done = await run_task(client, "first turn")
    assert done["state"] == "completed"
    driver.kind = FailureKind.INFRA_FAILED
    refused = await command(client, done["latestAttempt"]["runId"], "second turn")
    assert refused.status_code >= 400, refused.text
    assert refused.json()["error"]["code"] == "infra-failed"
    [(runner_job_id, pid)] = driver.started.items()
    await assert_no_backend_ran(runner_settings, database_url, runner_job_id, pid)
    driver.kind = None
    again = await command(client, done["latestAttempt"]["runId"], "third turn")
    assert again.status_code == 201, "the session takes the next turn"


async def test_cancelling_a_reserved_attempt_ends_and_stops_the_job_a_failed_create_left(
    failing: tuple[Any, StartsThenFails], runner_settings: RunnerSettings, database_url: str
) -> None:
    client, driver = failing
    driver.kind = FailureKind.INFRA_FAILED  # the attempt stays reserved: it may adopt the job
    task_id = await submit(client, "sleep: 30", sessionRef=ref("stop"))
    task = await dispatch(client, task_id)
    assert task["latestAttempt"]["state"] == "reserved", task
    [(runner_job_id, pid)] = driver.started.items()
    driver.kind = None
    async with runner_paused(runner_settings):  # its reports would change the database
        refused = await post_changing_nothing(client, database_url, f"{SESSIONS}/stop/control",
                                              {"action": "cancel"}, 409)
        assert refused.json()["error"]["details"]["taskId"] == task_id, "cancel the task"
        dry = await client.post(f"{SESSIONS}/stop/control?dryRun=true", json={
            "action": "cancel"})
        assert dry.status_code == 409, dry.text
    cancelled = await client.post(f"/api/v1/queue/tasks/{task_id}/cancel",
                                  json={"reason": "stop"})
    assert cancelled.status_code == 200, cancelled.text
    deadline = time.monotonic() + 30
    while not _gone(pid):
        assert time.monotonic() < deadline, "the runner still runs"
        await asyncio.sleep(0.05)
    folder = runner_settings.jobs_dir / runner_job_id
    assert (folder / "cancelled").exists(), "the driver stopped the job"
    conn = await asyncpg.connect(database_url)
    try:
        ended = await conn.fetchval("SELECT count(*) FROM ledger WHERE stream_id = $1 AND "
                                    "event_type = 'job-ended'", runner_job_id)
    finally:
        await conn.close()
    assert ended == 1, "the job's runner tokens are refused from now on"
    after = await submit(client, "after the cancel", sessionRef=ref("stop"))
    assert (await dispatch(client, after))["state"] == "running", "the cancel freed the turn"


async def test_a_create_error_that_keeps_the_attempt_reserved_keeps_its_session_turn(
    failing: tuple[Any, StartsThenFails], runner_settings: RunnerSettings, database_url: str
) -> None:
    """The job's token still works, so a late runner may claim: no other turn of the session
    starts until the job is adopted or ended, and the thread is resumed once per turn."""
    client, driver = failing
    first = await submit(client, "first turn", sessionRef=ref("held"))
    await dispatch(client, first)
    done = await settle(client, first)
    assert done["state"] == "completed", done
    driver.kind = FailureKind.INFRA_FAILED  # not a blocker: the attempt stays reserved
    second = await submit(client, "sleep: 2", sessionRef=ref("held"))
    task = await dispatch(client, second)
    assert task["latestAttempt"]["state"] == "reserved", task
    driver.kind = None
    [(runner_job_id, pid)] = driver.started.items()
    other = await command(client, done["latestAttempt"]["runId"], "a turn meanwhile")
    assert other.status_code == 409, "the late runner's turn holds the session"
    assert other.json()["error"]["details"]["runnerJobId"] == runner_job_id
    deadline = time.monotonic() + 30
    while "job-claimed" not in await events_of(database_url, runner_job_id):
        assert time.monotonic() < deadline, "the late runner never claimed"
        await asyncio.sleep(0.05)
    token = (runner_settings.jobs_dir / runner_job_id / TOKEN_FILE).read_text().strip()
    claim = await client.post(f"{JOBS}/{runner_job_id}/claim", json={"claimant": "another"},
                              headers={"Authorization": f"Bearer {token}"})
    assert claim.status_code == 200 and claim.json()["start"] is False, claim.text
    while not _gone(pid):
        assert time.monotonic() < deadline, "the late runner still runs"
        await asyncio.sleep(0.05)
    assert (await dispatch(client, second))["state"] == "running", "dispatch adopts the job"
    assert (await settle(client, second))["state"] == "completed"
    assert len(job_dirs(runner_settings)) == 2, "adopted: no second job for the attempt"
    after = await command(client, done["latestAttempt"]["runId"], "third turn")
    assert after.status_code == 201, after.text
    await wait_idle(client, "held")
    output = await lines(client, "held")
    resumed = [line for line in output if line.startswith("thread resumed: ")]
    assert [line.rsplit("(", 1)[1] for line in resumed] == ["turn 2)", "turn 3)"], output
    trace = [json.loads(line) for line in await lines(client, "held", "trace")]
    assert [e["thread"] for e in trace if e["kind"] == "backend-start"] == [
        "start", "resume", "resume"], "one backend per turn, never two at once"
    assert (await events_of(database_url, runner_job_id)).count("job-claimed") == 1
