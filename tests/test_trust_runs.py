"""Issue 13 through real runs: the backend reads the prompt byte-identical, and a run blocked
at assembly ends its run and command records with the blocker (SPEC 5.2 rule 9)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from runner_assembly.settings import RunnerSettings
from tests import test_assembly_runner as ar
from tests.grants_support import granting
from tests.test_dispatch import TASKS, dispatch, job_dirs, settle, submit
from tests.test_trust_gate import ORDINARY


async def test_the_backend_reads_the_prompt_byte_identical(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    prompt = "\n".join(ORDINARY[:-1]) + "\n\ttabs  and  spaces kept \u00e9\u4e2d "
    settings = ar.settings_for(runner_settings)
    async with ar.app_client(database_url, settings) as client:
        task_id = await submit(client, prompt)
        await dispatch(client, task_id)
        task = await settle(client, task_id)
        shown = (await client.get(f"{TASKS}/{task_id}")).json()
    assert task["state"] == "completed", task
    assert shown["contract"]["payload"]["prompt"] == prompt
    (folder,) = job_dirs(settings)
    assert f"PROMPT<<{prompt}>>" in (folder / "stdout.log").read_text()


@pytest.mark.parametrize("kind", ["secret-unavailable", "tenant-policy-denied"])
async def test_a_run_blocked_at_assembly_ends_with_its_blocker(
    database_url: str, runner_settings: RunnerSettings, kind: str
) -> None:
    settings = ar.settings_for(runner_settings)
    ar.write_secret(settings, "tok", {"GIT_HOST_TOKEN": ar.TOKEN_CANARY})
    # an ungranted tool secret is refused at submit (test_secret_grants); another profile's
    # provider secret is refused at assembly
    scope = ({"providerCredentials": [{"name": "svc-v01-provider-profile-2",
                                       "keys": ["auth.json"]}]}
             if kind == "tenant-policy-denied"
             else {"toolCredentials": [ar.credential("not-there")]})
    async with ar.app_client(database_url, settings) as client:
        task_id = await submit(client, executionPolicy={"secretScope": scope})
        await dispatch(client, task_id)
        task = (await client.get(f"{TASKS}/{task_id}")).json()
        job = await ar.runner_job(client, task)
    assert task["state"] == "blocked" and task["latestAttempt"]["failureKind"] == kind
    assert job["status"] == "blocked" and job["failureKind"] == kind, job
    assert job["failureMessage"] and ar.TOKEN_CANARY not in str(job)
    assert job_dirs(settings) == [], "no runner job was created"
    conn = await asyncpg.connect(database_url)
    try:
        run = await conn.fetchrow("SELECT status, failure_kind FROM run_record WHERE run_id = $1",
                                  task["latestAttempt"]["runId"])
        command = await conn.fetchval("SELECT status FROM command_record WHERE run_id = $1",
                                      task["latestAttempt"]["runId"])
    finally:
        await conn.close()
    assert (run["status"], run["failure_kind"], command) == ("blocked", kind, "blocked")


async def test_a_command_blocked_at_assembly_is_refused_with_its_blocker(
    database_url: str, runner_settings: RunnerSettings
) -> None:

    # a run-base command runs with its session's tenant: the caller's ("" for a key of
    # every tenant before tenant scoping)
    policies = {tenant: policy for each in ("acme", "", "*")
                for tenant, policy in granting(ar.credential("not-there"), tenant=each).items()}
    settings = ar.settings_for(runner_settings, tenantPolicies=policies)
    async with ar.app_client(database_url, settings) as client:
        await command_blocked_at_assembly(client, database_url)


async def command_blocked_at_assembly(client: Any, database_url: str) -> None:
    from tests.support import snapshot

    created = await client.post("/api/v1/sessions", json={"runBase": {"executionPolicy": {
        "secretScope": {"toolCredentials": [ar.credential("not-there")]}}}})
    assert created.status_code == 201, created.text
    before = await snapshot(database_url)
    response = await client.post(f"/api/v1/runs/{created.json()['runId']}/commands",
                                 json={"payload": {"prompt": "go"}})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "secret-unavailable"
    assert await snapshot(database_url) == before
