"""Dispatch, refresh, attempt history, cancel of running work and sessions, through the
real app with the local runner driver and the reference backend."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from projections.replay import replay
from runner_assembly.assembly.names import STATIC_ENV
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.support import SECRET_CANARY, post_changing_nothing, snapshot, task_body

TASKS = "/api/v1/queue/tasks"


async def submit(client: Any, prompt: str = "say hello", **overrides: Any) -> str:
    response = await client.post(TASKS, json=task_body(payload={"prompt": prompt}, **overrides))
    assert response.status_code == 201, response.text
    return str(response.json()["taskId"])


async def dispatch(client: Any, task_id: str, body: Any = None) -> dict[str, Any]:
    response = await client.post(f"{TASKS}/{task_id}/dispatch", json=body or {})
    assert response.status_code == 200, response.text
    return dict(response.json())


async def run_task(client: Any, prompt: str = "say hello",
                   **overrides: Any) -> tuple[str, dict[str, Any]]:
    """Submit, dispatch and settle a task: its id and the settled task."""
    task_id = await submit(client, prompt, **overrides)
    await dispatch(client, task_id)
    return task_id, await settle(client, task_id)


async def settle(client: Any, task_id: str, timeout: float = 30) -> dict[str, Any]:
    """Refresh until the task leaves ``running``."""
    deadline = time.monotonic() + timeout
    while True:
        response = await client.post(f"{TASKS}/{task_id}/refresh")
        assert response.status_code == 200, response.text
        task = dict(response.json())
        if task["state"] != "running" or time.monotonic() > deadline:
            await _session_settled(client, task, deadline)
            return task
        await asyncio.sleep(0.1)


async def _session_settled(client: Any, task: dict[str, Any], deadline: float) -> None:
    """Wait until the task's session has no running turn: the runner's exit report (which
    ends the turn) has been taken in, so nothing changes the ledger after this."""
    session_id = (task.get("latestAttempt") or {}).get("sessionId")
    while session_id and time.monotonic() < deadline + 10:
        answer = await client.get(f"/api/v1/sessions/{session_id}/output",
                                  params={"limit": 1})
        if answer.status_code != 200 or not answer.json()["running"]:
            return
        await asyncio.sleep(0.05)


async def counts(url: str) -> dict[str, int]:
    conn = await asyncpg.connect(url)
    try:
        return {table: await conn.fetchval(f"SELECT count(*) FROM {table}")
                for table in ("attempt_summary", "run_record", "command_record",
                              "runner_job_record")}
    finally:
        await conn.close()


def job_dirs(settings: RunnerSettings) -> list[Path]:
    return sorted(settings.jobs_dir.iterdir()) if settings.jobs_dir.exists() else []


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as ended)."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return status != "Z"


@contextlib.asynccontextmanager
async def runner_paused(settings: RunnerSettings) -> AsyncIterator[None]:
    """Every running runner stopped (SIGSTOP): its reports (lines, heartbeats) cannot land
    while a test compares the database before and after a refused request."""
    deadline = time.monotonic() + 30
    while not all((job / "pid").exists() for job in job_dirs(settings)):
        assert time.monotonic() < deadline, "a runner never started"
        await asyncio.sleep(0.05)
    if job_dirs(settings):
        await asyncio.sleep(1.0)  # past their claims and first reports (the app serves)
    groups = [pid for pid in (int((job / "pid").read_text()) for job in job_dirs(settings))
              if process_alive(pid)]
    for group in groups:
        os.killpg(group, signal.SIGSTOP)
    if groups:
        await asyncio.sleep(0.3)  # a report already in flight lands first
    try:
        yield
    finally:
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGCONT)


async def test_dispatch_runs_the_task_to_completion(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    task_id = await submit(client, "say hello")
    task = await dispatch(client, task_id)
    assert task["state"] == "running"
    attempt = task["latestAttempt"]
    assert attempt["state"] == "running" and attempt["retryIndex"] == 0
    for key, prefix in (("attemptId", "att_"), ("runId", "run_"), ("commandId", "cmd_"),
                        ("sessionId", "ses_")):
        assert attempt[key].startswith(prefix)
    assert attempt["sessionPath"] == f"/api/v1/sessions/{attempt['sessionId']}"
    assert task["sessionPath"] == attempt["sessionPath"]
    assert task["workReady"]["valuesPrinted"] is False
    assert {t["name"] for t in task["workReady"]["tools"]} >= {"python", "git"}
    done = await settle(client, task_id)
    assert done["state"] == "completed"
    assert done["latestAttempt"]["state"] == "completed"
    assert done["supervisor"] == {**done["supervisor"], "phase": "done", "recovery": "none",
                                  "lastActivityId": attempt["attemptId"]}
    (job,) = job_dirs(runner_settings)
    output = (job / "stdout.log").read_text()
    assert "> say hello" in output
    assert "home-files=2" in output, "the profile secret was projected into BACKEND_HOME"
    assert await counts(database_url) == {"attempt_summary": 1, "run_record": 1,
                                          "command_record": 1, "runner_job_record": 1}
    conn = await asyncpg.connect(database_url)
    try:
        run = await conn.fetchrow("SELECT * FROM run_record")
        assert (run["status"], run["exit_code"], run["driver"]) == ("completed", 0, "local")
        assert (await replay(conn)).ok
    finally:
        await conn.close()


async def test_the_runner_environment_is_minimal_and_explicit(
    database_url: str, runner_settings: RunnerSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SVC_LEAKY_SERVER_VARIABLE", "must-not-leak")
    python = runner_settings.backend_commands["profile-1"][0]
    script = "import json, os; print(json.dumps(sorted(os.environ)))"
    settings = RunnerSettings(data_dir=runner_settings.data_dir, backend_commands={
        **runner_settings.backend_commands, "profile-1": (python, "-c", script)})
    async with app_client(database_url, settings) as client:
        task_id = await submit(client)
        await dispatch(client, task_id)
        assert (await settle(client, task_id))["state"] == "completed"
    (job,) = job_dirs(settings)
    names = set(json.loads((job / "stdout.log").read_text())) - {"LC_CTYPE"}
    assert names == {"PATH", "LANG", "HOME", "BACKEND_HOME", "SVC_WORKSPACE_PATH",
                     "SVC_RUN_ID", "SVC_SESSION_ID", "SVC_BACKEND_PROFILE", "SVC_SKILLS_DIRS"}
    assert names == set(STATIC_ENV), "the backend gets exactly the names the plan shows"


async def test_a_failing_backend_fails_the_task_and_refresh_is_idempotent(
    client: Any, database_url: str
) -> None:
    task_id, failed = await run_task(client, "exit: 3")
    assert failed["state"] == "failed"
    assert failed["summary"] == "failed: exit code 3"
    before = await snapshot(database_url)
    again = await client.post(f"{TASKS}/{task_id}/refresh")
    assert again.status_code == 200 and again.json()["version"] == failed["version"]
    assert await snapshot(database_url) == before
    history = (await client.get(f"{TASKS}/{task_id}/attempts")).json()
    (attempt,) = history["items"]
    assert (attempt["state"], attempt["exitCode"]) == ("failed", 3)
    assert attempt["durationMs"] is not None and attempt["durationMs"] >= 0


async def test_refresh_is_a_no_op_while_running(client: Any, database_url: str,
                                                runner_settings: RunnerSettings) -> None:
    task_id = await submit(client, "sleep: 3")
    running = await dispatch(client, task_id)
    async with runner_paused(runner_settings):
        before = await snapshot(database_url)
        response = await client.post(f"{TASKS}/{task_id}/refresh")
        assert response.json()["state"] == "running"
        assert response.json()["version"] == running["version"]
        assert await snapshot(database_url) == before
    plan = (await client.post(f"{TASKS}/{task_id}/refresh?dryRun=true")).json()
    assert plan == {"mutation": False, "plan": plan["plan"]} and plan["plan"]["events"] == []


async def test_a_reported_blocker_blocks_the_task(client: Any) -> None:
    _, blocked = await run_task(client, "blocker: required-skill-unavailable")
    assert blocked["state"] == "blocked"
    assert blocked["latestAttempt"]["failureKind"] == "required-skill-unavailable"


async def test_a_missing_profile_secret_blocks_dispatch_without_fallback(
    client: Any, runner_settings: RunnerSettings
) -> None:
    task_id = await submit(client, backendProfile="profile-2")
    task = await dispatch(client, task_id)
    assert task["state"] == "blocked"
    attempt = task["latestAttempt"]
    assert (attempt["state"], attempt["failureKind"]) == ("blocked", "secret-unavailable")
    assert "svc-v01-provider-profile-2" in attempt["failureMessage"]
    assert job_dirs(runner_settings) == [], "no runner job, no fallback to profile-1"


async def test_dispatch_replays_by_attempt_id_and_refuses_other_states(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    task_id = await submit(client, "sleep: 2")
    first = await dispatch(client, task_id, {"attemptId": "att_mine"})
    assert first["latestAttempt"]["attemptId"] == "att_mine"
    async with runner_paused(runner_settings):
        before = await snapshot(database_url)
        again = await dispatch(client, task_id, {"attemptId": "att_mine"})
        assert again["latestAttempt"] == first["latestAttempt"]
        assert await snapshot(database_url) == before
        refused = await client.post(f"{TASKS}/{task_id}/dispatch", json={})
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "invalid-transition"
        assert len(job_dirs(runner_settings)) == 1
        assert await snapshot(database_url) == before


@pytest.mark.parametrize("body", [{"attemptId": 5}, {"attemptId": "a b"}, {"runId": "x"}, [1]])
async def test_dispatch_refuses_bad_bodies(client: Any, database_url: str, body: Any) -> None:
    task_id = await submit(client)
    response = await post_changing_nothing(client, database_url,
                                           f"{TASKS}/{task_id}/dispatch", body, 400)
    assert response.json()["error"]["code"] == "invalid-request"


async def test_dispatch_dry_run_changes_nothing(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    task_id = await submit(client)
    before = await snapshot(database_url)
    response = await client.post(f"{TASKS}/{task_id}/dispatch?dryRun=true", json={})
    assert response.status_code == 200
    plan = response.json()
    assert plan["mutation"] is False
    assert plan["plan"]["events"] == ["task-attempt-reserved"]
    assert plan["plan"]["workReady"]["valuesPrinted"] is False
    assert await snapshot(database_url) == before
    assert job_dirs(runner_settings) == []


async def test_cancelling_a_running_task_stops_its_runner_job(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    task_id = await submit(client, "sleep: 30")
    await dispatch(client, task_id)
    response = await client.post(f"{TASKS}/{task_id}/cancel", json={"reason": "stop"})
    assert response.status_code == 200
    task = response.json()
    assert task["state"] == "cancelled" and task["latestAttempt"]["state"] == "cancelled"
    (job,) = job_dirs(runner_settings)
    pid = int((job / "pid").read_text())
    deadline = time.monotonic() + 10
    while process_alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not process_alive(pid), "the runner process was stopped"
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT status FROM run_record") == "cancelled"
        ended = await conn.fetchval("SELECT count(*) FROM ledger WHERE stream_id = $1 AND "
                                    "event_type = 'job-ended'", job.name)
        assert ended == 1, "the job's runner tokens are refused from now on"
        assert (await replay(conn)).ok
    finally:
        await conn.close()


async def test_session_identity_and_unknown_session(client: Any) -> None:
    task_id = await submit(client, sessionRef={"sessionId": "ses_given",
                                               "conversationId": "cnv_given"})
    task = await dispatch(client, task_id)
    assert task["latestAttempt"]["sessionId"] == "ses_given"
    session = (await client.get("/api/v1/sessions/ses_given")).json()
    assert session["sessionId"] == "ses_given"
    assert session["conversationId"] == "cnv_given"
    assert session["backendProfile"] == "profile-1"
    assert session["threadId"] is None
    missing = await client.get("/api/v1/sessions/ses_nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not-found"


async def test_attempts_of_an_unknown_task_are_not_found(client: Any) -> None:
    response = await client.get(f"{TASKS}/tsk_nope/attempts")
    assert response.status_code == 404


async def test_no_secret_value_reaches_any_answer(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    task_id = await submit(client)
    answers = [await client.post(f"{TASKS}/{task_id}/dispatch", json={})]
    await settle(client, task_id)
    for path in (f"{TASKS}/{task_id}", f"{TASKS}/{task_id}/attempts", TASKS,
                 "/api/v1/queue/commander", "/api/v1/queue/stats"):
        answers.append(await client.get(path))
    for answer in answers:
        assert SECRET_CANARY not in answer.text
    conn = await asyncpg.connect(database_url)
    try:
        ledger = await conn.fetchval("SELECT string_agg(payload::text, ' ') FROM ledger")
    finally:
        await conn.close()
    assert SECRET_CANARY not in ledger
    (job,) = job_dirs(runner_settings)
    for name in ("stdout.log", "stderr.log", "runner.log", "spec.json", "trace.jsonl"):
        assert SECRET_CANARY not in (job / name).read_text()


async def test_retention_fences_job_creation_by_namespace_capacity(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = RunnerSettings(data_dir=runner_settings.data_dir, retention=True,
                              retention_capacity=1)
    async with app_client(database_url, settings) as client:
        first = await submit(client, "sleep: 1")
        second = await submit(client)
        assert (await dispatch(client, first))["state"] == "running"
        refused = await dispatch(client, second)
        assert refused["state"] == "pending"
        assert refused["latestAttempt"]["failureKind"] == "infra-failed"
        assert "capacity" in refused["latestAttempt"]["failureMessage"]
        assert (await settle(client, first))["state"] == "completed"
        resumed = await dispatch(client, second)  # the finished job's slot is reclaimed
        assert resumed["latestAttempt"]["attemptId"] == refused["latestAttempt"]["attemptId"]
        assert resumed["state"] == "running"
    assert len(job_dirs(settings)) == 2


async def test_the_supervisor_carries_the_queue_timeout_budget(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = RunnerSettings(data_dir=runner_settings.data_dir,
                              timeout_budgets={"main": "30m"})
    async with app_client(database_url, settings) as client:
        task_id = await submit(client)
        listed = (await client.get(TASKS)).json()["items"][0]["supervisor"]
        assert listed == {"phase": "awaiting-dispatch", "lastActivitySeq": 1,
                          "lastActivityId": task_id, "timeoutBudget": "30m",
                          "recovery": f"svc queue dispatch {task_id}"}
        other = await submit(client, queue="beta")
        shown = (await client.get(f"{TASKS}/{other}")).json()["supervisor"]
        assert shown["timeoutBudget"] is None


async def test_one_attempt_id_named_by_two_tasks_makes_two_attempts(
    client: Any, database_url: str
) -> None:
    """Attempt identity is (taskId, attemptId): a caller-chosen id shared by two tasks gives
    each its own attempt, run and job, and neither sees the other's outcome (issue 14)."""
    first = await submit(client, "exit: 3")
    await dispatch(client, first, {"attemptId": "same-id"})
    assert (await settle(client, first))["state"] == "failed"
    second = await submit(client, "say hello")
    task = await dispatch(client, second, {"attemptId": "same-id"})
    attempt = task["latestAttempt"]
    assert (task["state"], attempt["attemptId"], attempt["retryIndex"]) == \
        ("running", "same-id", 0)
    assert (await settle(client, second))["state"] == "completed"
    shown = await client.get(f"{TASKS}/{first}")
    assert shown.json()["state"] == "failed"
    for task_id, state in ((first, "failed"), (second, "completed")):
        listed = await client.get(f"{TASKS}/{task_id}/attempts")
        assert [(a["attemptId"], a["state"]) for a in listed.json()["items"]] == \
            [("same-id", state)]
    assert await counts(database_url) == {"attempt_summary": 2, "run_record": 2,
                                          "command_record": 2, "runner_job_record": 2}
    conn = await asyncpg.connect(database_url)
    try:
        assert (await replay(conn)).ok
    finally:
        await conn.close()
