"""Runtime assembly end to end through the local driver: real git bundles, prompts, skills,
tools, the smoke check, the assembly event and the runner-job API (issue 4 items 2, 3, 6, 8).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from runner_assembly.assembly.defaults import RuntimeDefaults
from runner_assembly.settings import RunnerSettings
from tests.bundles import (
    SYSTEM_PROMPT,
    backend_command,
    bundle_ref,
    commit_on_branch,
    git,
    make_bundle_repo,
)
from tests.conftest import app_client
from tests.grants_support import granting
from tests.support import replay_report, snapshot, task_body
from tests.test_dispatch import TASKS, dispatch, job_dirs, settle, submit

TOKEN_CANARY = "GitHostTokenCanary-5b1e9d"


def settings_for(base: RunnerSettings, **defaults: Any) -> RunnerSettings:
    """The test settings with the reporting backend and the given runtime defaults."""
    python = base.backend_commands["profile-1"][0]
    defaults.setdefault("tenantPolicies", granted())
    return dataclasses.replace(
        base, backend_commands={**base.backend_commands, "profile-1": backend_command(python)},
        defaults=RuntimeDefaults(**defaults))


def granted() -> dict[str, Any]:
    """The tenant policy of these tests: ``acme`` may use the tool secrets they name."""
    return granting(credential("git-host-token"), credential("not-there"),
                    credential("ext", "ext-ssh"),
                    {"tool": "git-host", "purpose": "git-host-ssh",
                     "secretRef": {"name": "git-host-ssh"}})


async def runner_job(client: Any, task: dict[str, Any]) -> dict[str, Any]:
    """The runner-job view of the task's latest run."""
    response = await client.get(f"/api/v1/runs/{task['latestAttempt']['runId']}/runner-job")
    assert response.status_code == 200, response.text
    return dict(response.json())


def write_secret(settings: RunnerSettings, name: str, values: dict[str, str]) -> None:
    """A file-store secret in the service namespace."""
    folder = settings.secrets_dir / "svc-v01" / name
    folder.mkdir(parents=True, exist_ok=True)
    for key, value in values.items():
        (folder / key).write_text(value)


async def test_a_bundle_runs_end_to_end_with_the_assembly_event(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    repo = make_bundle_repo(tmp_path)
    head, tree = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD^{tree}")
    settings = settings_for(runner_settings)
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "do the task", resourceBundleRef=bundle_ref(repo))
        await dispatch(client, task_id)
        task = await settle(client, task_id)
        assert task["state"] == "completed", task
        job = await runner_job(client, task)
    event = job["assembly"]
    assert event["valuesPrinted"] is False and job["plan"]["valuesPrinted"] is False
    assert event["repository"]["materializedCommit"] == head
    assert event["repository"]["checkoutTree"] == tree
    assert event["repository"]["fetches"] == [{"repoUrl": repo.as_uri(), "fetchRepoUrl":
                                               repo.as_uri(), "mirrorUsed": False,
                                               "mirrorBaseUrl": None}]
    assert [(b["name"], b["target_path"], b["commit"]) for b in event["bundles"]] == [
        ("tools", "tools", head), ("skills", ".agents/skills", head)]
    (prompt,) = event["promptRefs"]
    assert prompt == {"name": "system", "path": "prompts/system.md", "inject": "thread-start",
                      "required": True, "injected": True, "bytes": len(SYSTEM_PROMPT),
                      "sha256": hashlib.sha256(SYSTEM_PROMPT.encode()).hexdigest()}
    assert {s["name"]: s["summary"] for s in event["skills"]} == {
        "deploy": "deploy helps with one thing", "review": "review helps with one thing"}
    assert all("body" not in json.dumps(s) for s in event["skills"]), "no manifest body"
    assert {t["name"] for t in event["tools"] if t["executable"]} == {
        "tran", "trans", "apply_patch", "lint"}
    assert {s["name"] for s in event["smoke"]} == {"git", "tran", "trans", "apply_patch"}
    overlay, workspace = Path(event["managedOverlay"]), Path(event["workspace"])
    assert ".gitbundle/svc/" in str(overlay) and workspace / ".git" not in overlay.parents
    assert event["skillDirs"] == [str(overlay / ".agents/skills")]
    assert "text" not in json.dumps(event) and SYSTEM_PROMPT.strip() not in json.dumps(event)
    (folder,) = job_dirs(settings)
    output = (folder / "stdout.log").read_text()
    assert f"PROMPT<<{SYSTEM_PROMPT}\n\ndo the task>>" in output, "prompt injected first"
    assert f"tran ran in {workspace}" in output and f"lint ran in {workspace}" in output
    assert "SKILLS deploy review" in output
    assert (workspace / "src/app.py").read_text() == "print('app')\n"
    report = await replay_report(database_url)
    assert report.ok and report.events > 0, "plan and assembly replay from the ledger"


async def test_a_resumed_thread_gets_no_thread_start_prompt(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    repo = make_bundle_repo(tmp_path)
    settings = settings_for(runner_settings)
    session = {"sessionId": "ses_resume", "conversationId": "cnv_1", "threadId": "thr_1"}
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "continue", resourceBundleRef=bundle_ref(repo),
                               sessionRef=session)
        await dispatch(client, task_id)
        task = await settle(client, task_id)
        job = await runner_job(client, task)
    assert task["state"] == "completed"
    assert job["assembly"]["promptRefs"][0]["injected"] is False
    assert job["assembly"]["sessionRef"] == session
    (folder,) = job_dirs(settings)
    assert "PROMPT<<continue>>" in (folder / "stdout.log").read_text()


async def test_the_commit_comes_from_ref_then_branch_then_head_and_pins_are_verified(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    repo = make_bundle_repo(tmp_path)
    main = git(repo, "rev-parse", "HEAD")
    feature = commit_on_branch(repo, "feature", "src/feature.py", "x = 1\n")
    settings = settings_for(runner_settings)
    cases = [
        ({}, {"branch": "feature"}, feature),
        ({"ref": "main"}, {"branch": "feature"}, main),
        ({"commitId": feature}, {}, feature),
        ({"ref": "feature", "commitId": feature}, {}, feature),
    ]
    async with app_client(database_url, settings) as client:
        for overrides, workspace, expected in cases:
            task_id = await submit(client, "go", resourceBundleRef=bundle_ref(repo, **overrides),
                                   workspaceRef=workspace)
            await dispatch(client, task_id)
            task = await settle(client, task_id)
            assert task["state"] == "completed", (overrides, task)
            event = (await runner_job(client, task))["assembly"]
            assert event["repository"]["materializedCommit"] == expected, overrides
        task_id = await submit(client, "go", resourceBundleRef=bundle_ref(
            repo, ref="main", commitId=feature))
        await dispatch(client, task_id)
        task = await settle(client, task_id)
    assert task["state"] == "blocked"
    assert task["latestAttempt"]["failureKind"] == "bundle-unavailable"


FAILURES = [
    ("required-skill-unavailable", "blocked", {"requiredSkills": [{"name": "review"},
                                                                  {"name": "missing"}]}, {}),
    ("prompt-unavailable", "blocked", {"promptRefs": [
        {"name": "gone", "path": "prompts/gone.md", "required": True}]}, {}),
    ("prompt-too-large", "blocked", {}, {"promptMaxBytes": 16}),
    ("prompt-too-large", "blocked", {"promptRefs": [
        {"name": "a", "path": "prompts/system.md"}, {"name": "b", "path": "README.md"}]},
     {"promptsMaxTotalBytes": len(SYSTEM_PROMPT) + 2}),
    ("infra-failed", "failed", {}, {"smokeTools": ["git", "no-such-tool-svc"]}),
]


@pytest.mark.parametrize(("kind", "state", "bundle", "defaults"), FAILURES,
                         ids=[f"{f[0]}-{i}" for i, f in enumerate(FAILURES)])
async def test_an_assembly_failure_stops_before_the_backend(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path, kind: str, state: str,
    bundle: dict[str, Any], defaults: dict[str, Any]
) -> None:
    repo = make_bundle_repo(tmp_path)
    settings = settings_for(runner_settings, **defaults)
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "go", resourceBundleRef=bundle_ref(repo, **bundle))
        await dispatch(client, task_id)
        task = await settle(client, task_id)
        job = await runner_job(client, task)
    assert task["state"] == state, task
    assert task["latestAttempt"]["failureKind"] == kind
    assert job["failureKind"] == kind and job["status"] == state
    assert job["assembly"]["failure"]["kind"] == kind
    (folder,) = job_dirs(settings)
    assert not (folder / "stdout.log").exists(), "the backend never started"
    if kind == "required-skill-unavailable":
        assert job["assembly"]["failure"]["details"] == {
            "required": ["review", "missing"], "missing": ["missing"],
            "available": ["deploy", "review"]}


async def test_a_tools_bundle_without_its_smoke_tools_fails_fast(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    repo = make_bundle_repo(tmp_path, tools=("tran", "trans"))
    settings = settings_for(runner_settings)
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "go", resourceBundleRef=bundle_ref(repo))
        await dispatch(client, task_id)
        task = await settle(client, task_id)
        job = await runner_job(client, task)
    assert task["latestAttempt"]["failureKind"] == "infra-failed"
    assert job["assembly"]["failure"]["details"] == {"missing": ["apply_patch"]}


@pytest.mark.parametrize("target", ["../../../etc/passwd", "/etc/passwd", "../../outside",
                                    "a/../../../x"])
async def test_a_symlink_leaving_the_checkout_is_refused_before_checkout(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path, target: str
) -> None:
    repo = make_bundle_repo(tmp_path, links={"tools/evil": target})
    settings = settings_for(runner_settings)
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "go", resourceBundleRef=bundle_ref(repo))
        await dispatch(client, task_id)
        task = await settle(client, task_id)
    assert task["state"] == "blocked"
    assert task["latestAttempt"]["failureKind"] == "schema-invalid"
    (folder,) = job_dirs(settings)
    assert not (folder / "stdout.log").exists()
    checked_out = [p for p in (folder / "workspaces").rglob("*") if ".git" not in p.parts]
    assert [p for p in checked_out if p.is_file()] == [], "nothing was checked out"


async def test_tool_credentials_and_the_per_job_secret_reach_only_the_backend(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    settings = settings_for(runner_settings)
    write_secret(settings, "git-host-token", {"GIT_HOST_TOKEN": TOKEN_CANARY})
    write_secret(settings, "git-host-ssh", {"id_ed25519": TOKEN_CANARY, "known_hosts": "h",
                                            "config": "c"})
    credentials = [
        {"tool": "git-host", "purpose": "pull-request",
         "secretRef": {"name": "git-host-token", "keys": ["GIT_HOST_TOKEN"]},
         "projection": {"kind": "env", "envName": "GIT_HOST_TOKEN"}},
        {"tool": "git-host", "purpose": "git-host-ssh",
         "secretRef": {"name": "git-host-ssh", "keys": ["id_ed25519", "known_hosts", "config"]},
         "projection": {"kind": "volume", "mountPath": "/home/svc/.ssh"}},
    ]
    lab_key = "LabApiKeyCanary-0c4f1a"
    # the bundle brings the code-host CLI the pull-request credential needs (SPEC 5.2 rule 7)
    repo = make_bundle_repo(tmp_path, tools=("tran", "trans", "apply_patch", "lint", "gh"))
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "go", resourceBundleRef=bundle_ref(repo),
                               executionPolicy={"secretScope": {"toolCredentials": credentials}})
        body = {"transientEnv": {"LAB_API_KEY": lab_key, "OWNER_HINT": "alice"}}
        await dispatch(client, task_id, body)
        task = await settle(client, task_id)
        job = await runner_job(client, task)
    assert task["state"] == "completed", task
    (folder,) = job_dirs(settings)
    output = (folder / "stdout.log").read_text()
    assert f"GIT_HOST_TOKEN-sha256 {hashlib.sha256(TOKEN_CANARY.encode()).hexdigest()}" in output
    assert f"LAB_API_KEY-sha256 {hashlib.sha256(lab_key.encode()).hexdigest()}" in output
    assert "SSH config id_ed25519 known_hosts dir=0o500 files=0o400" in output, "read-only"
    plan = job["plan"]
    assert plan["perJobSecret"]["keys"] == ["LAB_API_KEY", "OWNER_HINT"]
    assert plan["transientEnv"]["names"] == ["LAB_API_KEY", "OWNER_HINT"]
    assert {e["name"]: e["source"] for e in plan["env"]}["LAB_API_KEY"] == "per-job-secret"
    assert {(s["role"], s["projection"]) for s in plan["secrets"]} == {
        ("provider", "backend-home"), ("tool", "env"), ("tool", "volume")}
    for path in (folder / "spec.json", folder / "runner.log"):
        text = path.read_text()
        assert lab_key not in text and TOKEN_CANARY not in text and "alice" not in text
    assert lab_key not in json.dumps(job) and TOKEN_CANARY not in json.dumps(job)


async def refused_before_any_job(client: Any, settings: RunnerSettings, database_url: str,
                                 task_id: str, kind: str) -> None:
    await dispatch(client, task_id)
    task = (await client.get(f"{TASKS}/{task_id}")).json()
    assert task["state"] == "blocked" and task["latestAttempt"]["failureKind"] == kind
    assert job_dirs(settings) == [], "no runner job was created"


def credential(name: str, tool: str = "git-host") -> dict[str, Any]:
    key, env = ("GIT_HOST_TOKEN", "GIT_HOST_TOKEN") if tool == "git-host" else (
        "EXT_SSH_CLIENT_TOKEN", "EXT_SSH_CLIENT_TOKEN")
    return {"tool": tool, "purpose": "pull-request" if tool == "git-host" else "ssh-passthrough",
            "secretRef": {"name": name, "keys": [key]},
            "projection": {"kind": "env", "envName": env}}


async def test_a_missing_tool_secret_is_secret_unavailable(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = settings_for(runner_settings)
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, executionPolicy={"secretScope": {
            "toolCredentials": [credential("not-there")]}})
        await refused_before_any_job(client, settings, database_url, task_id,
                                     "secret-unavailable")


async def test_a_tenant_policy_refusal_is_tenant_policy_denied(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    from runner_assembly.assembly.defaults import TenantPolicy, ToolGrant

    settings = settings_for(runner_settings, tenantPolicies={"acme": TenantPolicy(
        toolCredentials=[ToolGrant(tool="git-host", purpose="issues", secretNames=["tok"])])})
    write_secret(settings, "tok", {"GIT_HOST_TOKEN": TOKEN_CANARY})
    async with app_client(database_url, settings) as client:
        before = await snapshot(database_url)  # refused at submit: nothing is stored
        refused = await client.post(TASKS, json=task_body(executionPolicy={"secretScope": {
            "toolCredentials": [credential("tok")]}}))
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "tenant-policy-denied"
        assert await snapshot(database_url) == before and job_dirs(settings) == []
        other = await submit(client, executionPolicy={"secretScope": {"providerCredentials": [
            {"name": "svc-v01-provider-profile-2", "keys": ["auth.json"]}]}})
        await dispatch(client, other)
        task = (await client.get(f"{TASKS}/{other}")).json()
    assert task["latestAttempt"]["failureKind"] == "tenant-policy-denied", \
        "no other profile's secret is used"


async def test_ext_ssh_without_an_endpoint_is_schema_invalid_and_reserves_nothing(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = settings_for(runner_settings)
    write_secret(settings, "ext", {"EXT_SSH_CLIENT_TOKEN": TOKEN_CANARY})
    policy = {"secretScope": {"toolCredentials": [credential("ext", "ext-ssh")]}}
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, executionPolicy=policy)
        before = await snapshot(database_url)
        response = await client.post(f"{TASKS}/{task_id}/dispatch", json={})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "schema-invalid"
        assert await snapshot(database_url) == before
        ok = await client.post(f"{TASKS}/{task_id}/dispatch",
                               json={"transientEnv": {"EXT_MAIN_SERVER_HOST": "term.internal"}})
        assert ok.status_code == 200, ok.text
    assert job_dirs(settings) != []


async def test_ext_ssh_endpoint_defaults_enter_the_per_job_secret_by_name(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = settings_for(runner_settings,
                            extSshEndpoints={"EXT_MAIN_SERVER_HOST": "main.internal"})
    write_secret(settings, "ext", {"EXT_SSH_CLIENT_TOKEN": TOKEN_CANARY})
    policy = {"secretScope": {"toolCredentials": [credential("ext", "ext-ssh")]}}
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, executionPolicy=policy)
        await dispatch(client, task_id)
        task = await settle(client, task_id)
        job = await runner_job(client, task)
    assert task["state"] == "completed", task
    assert job["plan"]["endpointDefaults"] == ["EXT_MAIN_SERVER_HOST"]
    assert "main.internal" not in json.dumps(job), "only names, never values"
    (folder,) = job_dirs(settings)
    digest = hashlib.sha256(b"main.internal").hexdigest()
    assert f"EXT_MAIN_SERVER_HOST-sha256 {digest}" in (folder / "stdout.log").read_text()


@pytest.mark.parametrize("name", ["GIT_HOST_TOKEN", "EXT_SSH_CLIENT_TOKEN", "PATH",
                                  "SVC_WORKSPACE_PATH", "DEPLOY_PRIVATE_KEY"])
async def test_transient_env_cannot_carry_credentials_or_runner_names(
    client: Any, database_url: str, name: str
) -> None:
    task_id = await submit(client)
    before = await snapshot(database_url)
    response = await client.post(f"{TASKS}/{task_id}/dispatch",
                                 json={"transientEnv": {name: "x-canary-value"}})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "schema-invalid"
    assert "x-canary-value" not in response.text
    assert await snapshot(database_url) == before


async def test_dispatch_dry_run_returns_the_value_free_plan(
    client: Any, database_url: str, tmp_path: Path
) -> None:
    repo = make_bundle_repo(tmp_path)
    task_id = await submit(client, resourceBundleRef=bundle_ref(repo),
                           sessionRef={"sessionId": "ses_plan", "conversationId": "c"})
    before = await snapshot(database_url)
    response = await client.post(f"{TASKS}/{task_id}/dispatch?dryRun=true",
                                 json={"transientEnv": {"LAB_API_KEY": "dry-run-canary"}})
    assert response.status_code == 200, response.text
    assert "dry-run-canary" not in response.text
    body = response.json()
    assert body["mutation"] is False
    plan = body["plan"]["runnerJob"]
    assert plan["valuesPrinted"] is False and plan["capability"]["valuesPrinted"] is False
    assert plan["transientEnv"]["count"] == 1 and len(plan["transientEnv"]["sha256"]) == 64
    assert plan["sessionVolume"] == {
        "sessionId": "ses_plan", "conversationId": "c", "threadId": None,
        "pvcName": "svc-v01-session-ses-plan", "namespace": "svc-v01",
        "rolloutSubdir": "sessions", "size": "1Gi", "storageClass": "local-path",
        "valuesPrinted": False}
    assert plan["resourceBundle"]["requiredSkills"] == ["review", "deploy"]
    assert {"SVC_SESSION_PVC_NAME", "SVC_SESSION_PVC_MOUNT_PATH"} <= {
        e["name"] for e in plan["env"]}
    assert await snapshot(database_url) == before


async def test_the_runner_job_api_creates_a_reserved_runs_job_once(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = dataclasses.replace(runner_settings, faults=frozenset({"create-timeout"}))
    async with app_client(database_url, settings) as client:
        task_id = await submit(client)
        task = await dispatch(client, task_id)
        attempt = task["latestAttempt"]
        assert attempt["state"] == "reserved" and attempt["failureKind"] == "infra-failed"
        path = f"/api/v1/runs/{attempt['runId']}/runner-job"
        dry = await client.post(f"{path}?dryRun=true", json={"transientEnv": {"A": "b"}})
        assert dry.status_code == 200 and dry.json()["mutation"] is False
        assert dry.json()["plan"]["runnerJob"]["transientEnv"]["names"] == ["A"]
        created = await client.post(path, json={})
        assert created.status_code == 200, created.text
        job = created.json()
        assert job["attemptState"] == "running" and job["plan"]["ids"]["runId"] == attempt["runId"]
        again = await client.post(path, json={})
        assert again.json()["runnerJobId"] == job["runnerJobId"]
        missing = await client.get("/api/v1/runs/run_nope/runner-job")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not-found"
        bad = await client.post(path, json={"transientEnv": {"lower": "x"}})
        assert bad.status_code == 400
        reserved_name = await client.post(path, json={"transientEnv": {"PATH": "/evil"}})
        assert reserved_name.status_code == 400, "refused even for a run that has its job"
        assert reserved_name.json()["error"]["code"] == "schema-invalid"
    assert len(job_dirs(settings)) == 1, "the job was adopted, not duplicated"
