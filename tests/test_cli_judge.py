"""``svc queue judge`` and where judge runs and typed references show in the CLI."""

from __future__ import annotations

import asyncio
import json

import httpx

from tests.support import task_body
from tests.test_cli import svc
from tests.test_judge_runs import VERDICT

TASKS = "/api/v1/queue/tasks"


async def _failed_task(api: str) -> tuple[str, str]:
    """A task whose first attempt failed: its id and the attempt's."""
    async with httpx.AsyncClient(base_url=api, timeout=30) as http:
        body = task_body(payload={"prompt": "exit: 1"},
                         references=[{"kind": "issue", "id": "42", "title": "Red build"}])
        task_id = (await http.post(TASKS, json=body)).json()["taskId"]
        await http.post(f"{TASKS}/{task_id}/dispatch", json={})
        for _ in range(300):
            task = (await http.post(f"{TASKS}/{task_id}/refresh")).json()
            if task["state"] != "running":
                break
            await asyncio.sleep(0.1)
    assert task["state"] == "failed", task
    return task_id, task["latestAttempt"]["attemptId"]


async def test_judge_is_recorded_and_shown_by_attempts_and_show_full(served_api: str) -> None:
    task_id, attempt_id = await _failed_task(served_api)
    judged = svc("queue", "judge", task_id, attempt_id, "--json-stdin", api=served_api,
                 stdin=json.dumps(VERDICT))
    assert judged.returncode == 0, judged.stderr
    first = judged.stdout.splitlines()[0]
    assert first.startswith("jdg_") and f"attempt={attempt_id}" in first and " fail " in first
    assert "retry=suggested: flaky network" in judged.stdout
    assert f"recorded only; to retry: svc queue retry {task_id}" in judged.stdout

    attempts = svc("queue", "attempts", task_id, api=served_api)
    assert attempts.returncode == 0, attempts.stderr
    assert "judge jdg_" in attempts.stdout
    assert "fail failure=tests-failed retry=suggested by=reviewer" in attempts.stdout

    full = svc("queue", "show", task_id, "--full", api=served_api)
    assert full.returncode == 0, full.stderr
    assert "judgeRuns:" in full.stdout and "retryReason: flaky network" in full.stdout
    assert "kind: issue" in full.stdout and "title: Red build" in full.stdout
    assert "attemptCount: 1" in full.stdout
    raw = svc("queue", "show", task_id, "--raw", api=served_api)
    assert "judgeRuns" not in raw.stdout, "--raw is the API's JSON, unchanged"
    shown = svc("queue", "show", task_id, api=served_api)
    assert shown.stdout.startswith(f"{task_id}  failed")
    assert (await _task_state(served_api, task_id)) == "failed", "the verdict retried nothing"


async def test_a_bad_verdict_is_refused_in_one_line(served_api: str) -> None:
    task_id, attempt_id = await _failed_task(served_api)
    refused = svc("queue", "judge", task_id, attempt_id, "--json-stdin", api=served_api,
                  stdin=json.dumps({**VERDICT, "result": "maybe"}))
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: invalid-request: ")
    assert "$.result" in refused.stderr
    missing = svc("queue", "judge", task_id, attempt_id, api=served_api)
    assert missing.returncode == 2 and "--json-stdin" in missing.stderr


async def _task_state(api: str, task_id: str) -> str:
    async with httpx.AsyncClient(base_url=api) as http:
        return str((await http.get(f"{TASKS}/{task_id}")).json()["state"])
