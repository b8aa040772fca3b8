"""Concurrency and crash recovery against real ``svc serve`` processes."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import asyncpg
import httpx

from projections.replay import replay
from tests.conftest import SERVER_PIDS, free_port, running_api
from tests.support import TASKS, refresh_until_settled, task_body


async def failed_task(http: httpx.AsyncClient) -> str:
    task = (await http.post(TASKS, json=task_body(payload={"prompt": "exit: 2"}))).json()
    await http.post(f"{TASKS}/{task['taskId']}/dispatch", json={})
    assert (await refresh_until_settled(http, task["taskId"], 30))["state"] == "failed"
    return str(task["taskId"])


def job_dirs(workdir: Path) -> list[Path]:
    jobs = workdir / "data" / "jobs"
    return sorted(jobs.iterdir()) if jobs.exists() else []


async def ledger_counts(url: str) -> tuple[int, int, bool]:
    conn = await asyncpg.connect(url)
    try:
        attempts = await conn.fetchval("SELECT count(*) FROM attempt_summary")
        jobs = await conn.fetchval("SELECT count(*) FROM runner_job_record")
        return attempts, jobs, (await replay(conn)).ok
    finally:
        await conn.close()


async def test_fifty_identical_retries_make_one_attempt_and_one_job(
    database_url: str, tmp_path: Path
) -> None:
    async with running_api(database_url, tmp_path) as base, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        task_id = await failed_task(http)
        body = {"idempotencyKey": "same-key", "reason": "flaky network"}
        answers = await asyncio.gather(*(http.post(f"{TASKS}/{task_id}/retry", json=body)
                                         for _ in range(50)))
    assert {a.status_code for a in answers} == {200}
    assert len({a.json()["attemptId"] for a in answers}) == 1
    assert {a.json()["retryIndex"] for a in answers} == {1}
    assert len(job_dirs(tmp_path)) == 2  # the first attempt's and the retry's
    assert await ledger_counts(database_url) == (2, 2, True)


async def test_a_crash_between_reservation_and_materialisation_resumes_the_same_ids(
    database_url: str, tmp_path: Path
) -> None:
    crash = {"SVC_FAULTS": "crash-after-reserve"}
    async with running_api(database_url, tmp_path) as base, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        task_id = await failed_task(http)
    async with running_api(database_url, tmp_path, crash) as base, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        pid = SERVER_PIDS[base]
        body = {"idempotencyKey": "after-crash", "reason": "retry"}
        with contextlib.suppress(httpx.HTTPError):  # the server dies mid-request
            await http.post(f"{TASKS}/{task_id}/retry", json=body)
        for _ in range(50):
            if not Path(f"/proc/{pid}").exists() or "zombie" in Path(
                    f"/proc/{pid}/status").read_text():
                break
            await asyncio.sleep(0.1)
        reserved = (await asyncpg.connect(database_url))
        try:
            row = await reserved.fetchrow(
                "SELECT attempt_id, run_id, state FROM attempt_summary WHERE retry_index = 1")
        finally:
            await reserved.close()
        assert row is not None and row["state"] == "reserved", "reserved, then the crash"
        assert len(job_dirs(tmp_path)) == 1, "no runner job was created before the crash"
    async with running_api(database_url, tmp_path) as base, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        answer = (await http.post(f"{TASKS}/{task_id}/retry", json=body)).json()
        assert answer["attemptId"] == row["attempt_id"]
        assert answer["runId"] == row["run_id"]
        assert answer["state"] == "running"
        again = (await http.post(f"{TASKS}/{task_id}/retry", json=body)).json()
        assert again["attemptId"] == row["attempt_id"]
    assert len(job_dirs(tmp_path)) == 2
    assert await ledger_counts(database_url) == (2, 2, True)


async def test_a_create_that_succeeded_but_timed_out_is_adopted_on_replay(
    database_url: str, tmp_path: Path
) -> None:
    timeout = {"SVC_FAULTS": "create-timeout"}
    port = free_port()  # restarted on its address: the runners it started report there
    async with running_api(database_url, tmp_path, timeout, port) as base, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        task = (await http.post(TASKS, json=task_body(payload={"prompt": "exit: 4"}))).json()
        task_id = task["taskId"]
        first = (await http.post(f"{TASKS}/{task_id}/dispatch", json={})).json()
        attempt = first["latestAttempt"]
        assert (attempt["state"], attempt["failureKind"]) == ("reserved", "infra-failed")
        assert first["state"] == "pending", "the task waits until its job is materialised"
        assert len(job_dirs(tmp_path)) == 1, "the job exists although the caller was told no"
    async with running_api(database_url, tmp_path, port=port) as base, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        again = (await http.post(f"{TASKS}/{task_id}/dispatch", json={})).json()
        assert again["latestAttempt"]["attemptId"] == attempt["attemptId"]
        assert (again["state"], again["latestAttempt"]["failureKind"]) == ("running", None)
        assert (await refresh_until_settled(http, task_id, 30))["state"] == "failed"
    assert len(job_dirs(tmp_path)) == 1, "dispatching again adopted the job, made no twin"
    body = {"idempotencyKey": "adopt", "reason": "timed out"}
    async with running_api(database_url, tmp_path, timeout, port) as base, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        retried = (await http.post(f"{TASKS}/{task_id}/retry", json=body)).json()
        assert (retried["retryIndex"], retried["state"]) == (1, "reserved")
        assert retried["failureKind"] == "infra-failed"
        assert (await http.get(f"{TASKS}/{task_id}")).json()["state"] == "failed"
    async with running_api(database_url, tmp_path, port=port) as base, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        replayed = (await http.post(f"{TASKS}/{task_id}/retry", json=body)).json()
        assert replayed["attemptId"] == retried["attemptId"]
        assert (replayed["state"], replayed["failureKind"]) == ("running", None)
    assert len(job_dirs(tmp_path)) == 2, "the replay adopted the job, it made no twin"
    assert await ledger_counts(database_url) == (2, 2, True)
