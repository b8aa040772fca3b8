"""Explicit retry (SPEC 4.3 rule 6), one rule at a time, through the real app."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from runner_assembly.settings import RunnerSettings
from tests.support import post_changing_nothing, snapshot, write_profile_secret
from tests.test_dispatch import TASKS, dispatch, job_dirs, runner_paused, settle, submit


async def failed_task(client: Any) -> str:
    task_id = await submit(client, "exit: 1")
    await dispatch(client, task_id)
    assert (await settle(client, task_id))["state"] == "failed"
    return task_id


async def retry(client: Any, task_id: str, key: str = "k1", reason: str = "flaky",
                **extra: Any) -> Any:
    return await client.post(f"{TASKS}/{task_id}/retry",
                             json={"idempotencyKey": key, "reason": reason, **extra})


async def test_a_new_key_reserves_a_new_attempt_on_the_same_task(
    client: Any, runner_settings: RunnerSettings
) -> None:
    task_id = await failed_task(client)
    response = await retry(client, task_id)
    assert response.status_code == 200, response.text
    attempt = response.json()
    assert (attempt["retryIndex"], attempt["idempotencyKey"], attempt["reason"]) == (1, "k1",
                                                                                      "flaky")
    assert attempt["state"] == "running"
    history = (await client.get(f"{TASKS}/{task_id}/attempts")).json()["items"]
    assert [a["retryIndex"] for a in history] == [0, 1]
    assert history[0]["state"] == "failed", "the old terminal attempt is never rewritten"
    assert attempt["previousAttemptId"] == history[0]["attemptId"]
    task = (await client.get(f"{TASKS}/{task_id}")).json()
    assert task["latestAttempt"]["attemptId"] == attempt["attemptId"]
    assert len(job_dirs(runner_settings)) == 2


async def test_a_used_key_returns_the_original_attempt_before_any_state_check(
    client: Any, database_url: str
) -> None:
    task_id = await failed_task(client)
    original = (await retry(client, task_id, reason="again")).json()
    assert (await settle(client, task_id))["state"] == "failed"
    second = (await retry(client, task_id, key="k2", reason="again")).json()
    await client.post(f"{TASKS}/{task_id}/cancel", json={})
    before = await snapshot(database_url)
    replay = await retry(client, task_id, reason="again")  # task is cancelled now
    assert replay.status_code == 200
    assert replay.json()["attemptId"] == original["attemptId"]
    assert replay.json()["attemptId"] != second["attemptId"]
    assert await snapshot(database_url) == before


async def test_the_same_key_with_another_reason_is_a_conflict(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    task_id = await failed_task(client)
    await retry(client, task_id, reason="first")
    async with runner_paused(runner_settings):
        before = await snapshot(database_url)
        response = await retry(client, task_id, reason="second")
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "idempotency-conflict"
        assert await snapshot(database_url) == before


@pytest.mark.parametrize("setup", ["pending", "running", "completed", "cancelled"])
async def test_a_new_key_is_refused_unless_failed_or_blocked(
    client: Any, database_url: str, setup: str, runner_settings: RunnerSettings
) -> None:
    task_id = await submit(client, "sleep: 5" if setup == "running" else "hello")
    if setup in ("running", "completed"):
        await dispatch(client, task_id)
    if setup == "completed":
        assert (await settle(client, task_id))["state"] == "completed"
    if setup == "cancelled":
        await client.post(f"{TASKS}/{task_id}/cancel", json={})
    async with runner_paused(runner_settings):
        before = await snapshot(database_url)
        response = await retry(client, task_id)
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "task-not-retryable"
        assert await snapshot(database_url) == before


@pytest.mark.parametrize("body", [
    {"idempotencyKey": "k", "reason": "r", "attemptId": "x"},
    {"idempotencyKey": "k", "reason": "r", "payload": {"prompt": "new"}},
    {"idempotencyKey": "k"},
    {"reason": "r"},
    {"idempotencyKey": "", "reason": "r"},
    {"idempotencyKey": "k", "reason": "r", "dryRun": "yes"},
])
async def test_only_key_reason_and_dry_run_are_accepted(
    client: Any, database_url: str, body: dict[str, Any]
) -> None:
    task_id = await failed_task(client)
    response = await post_changing_nothing(client, database_url, f"{TASKS}/{task_id}/retry",
                                           body, 400)
    assert response.json()["error"]["code"] == "invalid-request"


@pytest.mark.parametrize("how", ["body", "query"])
async def test_dry_run_validates_and_changes_nothing(
    client: Any, database_url: str, runner_settings: RunnerSettings, how: str
) -> None:
    task_id = await failed_task(client)
    before = await snapshot(database_url)
    jobs = job_dirs(runner_settings)
    if how == "body":
        response = await retry(client, task_id, dryRun=True)
    else:
        response = await client.post(f"{TASKS}/{task_id}/retry?dryRun=true",
                                     json={"idempotencyKey": "k1", "reason": "flaky"})
    assert response.status_code == 200
    plan = response.json()["plan"]
    assert plan["events"] == ["task-attempt-reserved"]
    assert plan["payloadHashVerified"] is True
    assert plan["missingSecretKeys"] == []
    assert plan["versionBefore"] == plan["versionAfter"] - 1
    assert await snapshot(database_url) == before, "not even the version changes"
    assert job_dirs(runner_settings) == jobs
    completed = await submit(client)
    refused = await retry(client, completed, dryRun=True)
    assert refused.status_code == 409, "dry-run runs the same state validation"


async def test_a_materialisation_failure_is_kept_then_cleared_by_a_replay(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    task_id = await submit(client, "exit: 1", backendProfile="profile-3")
    write_profile_secret(runner_settings.data_dir, "profile-3")
    await dispatch(client, task_id)
    assert (await settle(client, task_id))["state"] == "failed"
    secret_dir = runner_settings.secrets_dir / "svc-v01" / "svc-v01-provider-profile-3"
    (secret_dir / "auth.json").rename(secret_dir / "auth.json.away")
    first = (await retry(client, task_id)).json()
    assert (first["state"], first["failureKind"]) == ("reserved", "secret-unavailable")
    task = (await client.get(f"{TASKS}/{task_id}")).json()
    assert task["state"] == "failed", "the task keeps its state until the job exists"
    (secret_dir / "auth.json.away").rename(secret_dir / "auth.json")
    second = (await retry(client, task_id)).json()
    assert second["attemptId"] == first["attemptId"]
    assert (second["state"], second["failureKind"], second["failureMessage"]) == (
        "running", None, None)
    assert (await client.get(f"{TASKS}/{task_id}")).json()["state"] == "running"


async def test_contract_and_payload_hash_are_never_rewritten(
    client: Any, database_url: str
) -> None:
    task_id = await failed_task(client)
    before = (await client.get(f"{TASKS}/{task_id}")).json()
    await retry(client, task_id)
    await settle(client, task_id)
    after = (await client.get(f"{TASKS}/{task_id}")).json()
    assert (after["contract"], after["payloadHash"]) == (before["contract"],
                                                         before["payloadHash"])
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM ledger"
                                   " WHERE event_type = 'task-submitted'") == 1
    finally:
        await conn.close()
