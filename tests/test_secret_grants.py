"""Secrets belong to tenants (issue 25 item 7, DESIGN 12): the tenant policy grants tool and
repository secrets by name per use; anything else is ``tenant-policy-denied`` before
anything is stored or reserved; a repository credential goes only to its granted hosts over
https or ssh; the service's own secrets are never referenced; a rendered Job mounts no
credential ``optional``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec
import pytest

from runner_assembly.assembly import grants, k8s_objects
from runner_assembly.assembly.defaults import DefaultsError, load_defaults
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.contract.plan import SecretUse
from runner_assembly.runner import projection
from runner_assembly.settings import RunnerSettings
from tests import test_assembly_runner as ar
from tests.bundles import bundle_ref, make_bundle_repo
from tests.conftest import app_client
from tests.grants_support import granting, merged
from tests.support import snapshot, task_body
from tests.test_dispatch import TASKS, dispatch, job_dirs, settle, submit

ACME_TOKEN = "AcmeGitHostToken-canary-31f0"
BETA_TOKEN = "BetaGitHostToken-canary-77c2"


def tool(name: str) -> dict[str, Any]:
    """A ``git-host/pull-request`` tool credential naming secret ``name``."""
    return ar.credential(name)


def scope(*credentials: dict[str, Any]) -> dict[str, Any]:
    return {"secretScope": {"toolCredentials": list(credentials)}}


def policies() -> dict[str, Any]:
    """``acme`` owns ``acme-gh``, ``beta`` owns ``beta-gh``; ``gamma`` has no policy."""
    return merged(granting(tool("acme-gh")), granting(tool("beta-gh"), tenant="beta"))


@pytest.fixture
def settings(runner_settings: RunnerSettings) -> RunnerSettings:
    """The reporting backend, both tenants' secrets in the store, their policies."""
    chosen = ar.settings_for(runner_settings, tenantPolicies=policies())
    ar.write_secret(chosen, "acme-gh", {"GIT_HOST_TOKEN": ACME_TOKEN})
    ar.write_secret(chosen, "beta-gh", {"GIT_HOST_TOKEN": BETA_TOKEN})
    return chosen


async def refused(client: Any, database_url: str, path: str, body: Any) -> dict[str, Any]:
    """POST ``body``: 422 ``tenant-policy-denied`` with the ledger and projections unchanged;
    the error."""
    before = await snapshot(database_url)
    response = await client.post(path, json=body)
    assert response.status_code == 422, response.text
    error = dict(response.json()["error"])
    assert error["code"] == "tenant-policy-denied", error
    assert await snapshot(database_url) == before, "nothing was stored or reserved"
    return error


@pytest.mark.parametrize("dry_run", [False, True])
async def test_a_task_naming_another_tenants_secret_is_denied_at_submit(
    database_url: str, settings: RunnerSettings, dry_run: bool
) -> None:
    path = f"{TASKS}?dryRun=true" if dry_run else TASKS
    async with app_client(database_url, settings) as client:
        error = await refused(client, database_url, path,
                              task_body(executionPolicy=scope(tool("beta-gh"))))
        batch = await refused(client, database_url, f"{TASKS}/batch", {"items": [
            {"idempotencyKey": "k1", "task": task_body(executionPolicy=scope(tool("acme-gh")))},
            {"idempotencyKey": "k2", "task": task_body(executionPolicy=scope(tool("beta-gh")))},
        ]})
    for message in (error["message"], batch["message"]):
        assert "'acme'" in message and "git-host/pull-request" in message \
            and "beta-gh" in message, message
    assert BETA_TOKEN not in json.dumps(error) and job_dirs(settings) == []


async def test_a_tenant_without_a_policy_may_reference_no_secret(
    database_url: str, settings: RunnerSettings
) -> None:
    async with app_client(database_url, settings) as client:
        error = await refused(client, database_url, TASKS, task_body(
            tenantId="gamma", executionPolicy=scope(tool("acme-gh"))))
        repository = await refused(client, database_url, TASKS, task_body(
            tenantId="gamma", resourceBundleRef={
                "kind": "gitbundle", "repoUrl": "https://git.acme.example/a.git",
                "credentialRef": {"name": "acme-repo", "keys": ["password"]}}))
    assert "'gamma' has no tenant policy" in error["message"], error
    assert "acme-repo" in repository["message"], repository


async def test_a_granted_secret_reaches_its_own_tenants_run(
    database_url: str, settings: RunnerSettings, tmp_path: Path
) -> None:
    # the bundle brings the code-host CLI the pull-request credential needs (SPEC 5.2 rule 7)
    repo = make_bundle_repo(tmp_path, tools=("tran", "trans", "apply_patch", "gh"))
    async with app_client(database_url, settings) as client:
        preview = await client.post(f"{TASKS}?dryRun=true", json=task_body(
            resourceBundleRef=bundle_ref(repo), executionPolicy=scope(tool("acme-gh"))))
        assert preview.status_code == 200, preview.text
        task_id = await submit(client, "go", resourceBundleRef=bundle_ref(repo),
                               executionPolicy=scope(tool("acme-gh")))
        await dispatch(client, task_id)
        task = await settle(client, task_id)
    assert task["state"] == "completed", task
    (folder,) = job_dirs(settings)
    output = (folder / "stdout.log").read_text()
    assert f"GIT_HOST_TOKEN-sha256 {hashlib.sha256(ACME_TOKEN.encode()).hexdigest()}" in output
    assert hashlib.sha256(BETA_TOKEN.encode()).hexdigest() not in output


async def test_dispatch_refuses_a_secret_whose_grant_was_withdrawn(
    database_url: str, settings: RunnerSettings
) -> None:
    """Submitted while granted, dispatched after the operator withdrew the grant: refused
    before an attempt is reserved (dry run and dispatch alike)."""
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, executionPolicy=scope(tool("acme-gh")))
    withdrawn = dataclasses.replace(settings, defaults=msgspec.structs.replace(
        settings.defaults, tenantPolicies=granting(tool("beta-gh"), tenant="beta")))
    async with app_client(database_url, withdrawn) as client:
        for path in (f"{TASKS}/{task_id}/dispatch?dryRun=true", f"{TASKS}/{task_id}/dispatch"):
            error = await refused(client, database_url, path, {})
            assert "'acme' has no tenant policy" in error["message"], error
        task = (await client.get(f"{TASKS}/{task_id}")).json()
    assert task["state"] == "pending" and task.get("latestAttempt") is None, task
    assert job_dirs(settings) == []


async def test_a_profile_1_run_cannot_get_another_profiles_or_tenants_secret(
    database_url: str, settings: RunnerSettings
) -> None:
    """Even where a careless policy grants it, another profile's provider secret is never a
    tool secret; another tenant's secret is not acme's."""
    careless = dataclasses.replace(settings, defaults=msgspec.structs.replace(
        settings.defaults, tenantPolicies=merged(policies(), granting(
            tool("svc-v01-provider-profile-2")))))
    async with app_client(database_url, careless) as client:
        profile = await refused(client, database_url, TASKS, task_body(
            backendProfile="profile-1",
            executionPolicy=scope(tool("svc-v01-provider-profile-2"))))
        other = await refused(client, database_url, TASKS, task_body(
            backendProfile="profile-1", executionPolicy=scope(tool("beta-gh"))))
    assert "provider profile" in profile["message"], profile
    assert "beta-gh" in other["message"], other


SERVICE_SECRETS = ["svc-database", "svc-v01-job-01jabcdefghjkmnpqrstvwxyz0-env",
                   "svc-v01-provider-profile-1", "svc-manager-token"]


@pytest.mark.parametrize("name", SERVICE_SECRETS)
async def test_the_services_own_secrets_can_never_be_referenced(
    database_url: str, runner_settings: RunnerSettings, name: str
) -> None:
    """The database secret, a per-job secret, a profile's secret, any ``svc-`` name: refused
    as a tool and as a repository secret, even when the policy grants them."""
    granted = granting(tool(name), repositories={name: ["git.acme.example"]})
    settings = ar.settings_for(runner_settings, tenantPolicies=granted)
    bundle = {"kind": "gitbundle", "repoUrl": "https://git.acme.example/a.git",
              "credentialRef": {"name": name, "keys": ["password"]}}
    async with app_client(database_url, settings) as client:
        as_tool = await refused(client, database_url, TASKS,
                                task_body(executionPolicy=scope(tool(name))))
        as_repository = await refused(client, database_url, TASKS,
                                      task_body(resourceBundleRef=bundle))
    for error in (as_tool, as_repository):
        assert name in error["message"] and "can never be referenced" in error["message"]


async def test_a_run_base_command_needs_its_sessions_tenant_grant(
    database_url: str, settings: RunnerSettings
) -> None:
    async with app_client(database_url, settings) as client:
        created = await client.post("/api/v1/sessions", json={"runBase": {
            "executionPolicy": scope(tool("beta-gh"))}})
        assert created.status_code == 201, created.text
        await refused(client, database_url, f"/api/v1/runs/{created.json()['runId']}/commands",
                      {"payload": {"prompt": "go"}})


class Recorder(BaseHTTPRequestHandler):
    """A git host that asks for credentials (401, Basic) and records what it is sent."""

    seen: list[dict[str, str | None]]

    def _challenge(self) -> None:
        self.seen.append({"path": self.path,
                          "authorization": self.headers.get("Authorization")})
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _challenge

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def git_host() -> Iterator[tuple[str, list[dict[str, str | None]]]]:
    """A credential-asking host on 127.0.0.1: its ``host:port`` and what it saw."""
    seen: list[dict[str, str | None]] = []
    handler = type("Seen", (Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.parametrize(("scheme", "hosts"), [
    ("http", ["127.0.0.1"]),  # granted host, plain http
    ("http", ["git.acme.example"]),  # another host, plain http
    ("https", ["git.acme.example"]),  # another host
])
async def test_a_repository_credential_goes_only_to_its_granted_hosts_over_https_or_ssh(
    database_url: str, runner_settings: RunnerSettings,
    git_host: tuple[str, list[dict[str, str | None]]], scheme: str, hosts: list[str]
) -> None:
    address, seen = git_host
    settings = dataclasses.replace(
        ar.settings_for(runner_settings, tenantPolicies=granting(
            repositories={"acme-repo": hosts})),
        fetch_allow_hosts=("127.0.0.1",))
    ar.write_secret(settings, "acme-repo", {"username": "bot", "password": ACME_TOKEN})
    bundle = {"kind": "gitbundle", "repoUrl": f"{scheme}://{address}/acme/repo.git",
              "credentialRef": {"name": "acme-repo", "keys": ["username", "password"]}}
    async with app_client(database_url, settings) as client:
        error = await refused(client, database_url, TASKS, task_body(resourceBundleRef=bundle))
    assert "acme-repo" in error["message"] and ACME_TOKEN not in json.dumps(error)
    assert [s for s in seen if s["authorization"]] == [], "no credential was sent"
    assert seen == [], "nothing was fetched"


@pytest.mark.parametrize(("url", "hosts", "allowed"), [
    ("https://git.acme.example/a.git", ["git.acme.example"], True),
    ("ssh://git@git.acme.example/a.git", ["git.acme.example"], True),
    ("git@git.acme.example:acme/a.git", ["git.acme.example"], True),
    ("https://git.acme.example:8443/a.git", ["git.acme.example:8443"], True),
    ("https://git.acme.example/a.git", ["git.acme.example:8443"], False),
    ("http://git.acme.example/a.git", ["git.acme.example"], False),
    ("git://git.acme.example/a.git", ["git.acme.example"], False),
    ("file:///srv/a.git", ["git.acme.example"], False),
    ("https://evil.example/a.git", ["git.acme.example"], False),
    ("https://git.acme.example.evil.example/a.git", ["git.acme.example"], False),
    ("https://git.acme.example/a.git", [], False),
])
def test_the_runner_sends_a_repository_credential_only_where_its_plan_grants(
    tmp_path: Path, url: str, hosts: list[str], allowed: bool
) -> None:
    """The runner checks again, from the plan's granted hosts, before git may ask for it."""
    folder = tmp_path / "svc-v01" / "acme-repo"
    folder.mkdir(parents=True)
    (folder / "password").write_text(ACME_TOKEN)
    use = SecretUse(role="repository", projection="fetch-only", namespace="svc-v01",
                    name="acme-repo", keys=["password"], hosts=hosts)
    source = projection.SecretSource(tmp_path)
    if allowed:
        assert projection.repository_credential([use], source, url) == folder
        return
    with pytest.raises(AssemblyFailure) as failure:
        projection.repository_credential([use], source, url)
    assert failure.value.kind == "tenant-policy-denied"
    assert ACME_TOKEN not in failure.value.message and "acme-repo" in failure.value.message


def test_a_rendered_job_mounts_only_granted_secrets_and_none_optional(tmp_path: Path) -> None:
    from tests.test_k8s_driver import plan_of

    plan = plan_of(tmp_path)
    job = k8s_objects.job(plan)
    pod = job["spec"]["template"]["spec"]  # type: ignore[index]
    mounted = {v["secret"]["secretName"]: v["secret"] for v in pod["volumes"] if "secret" in v}
    referenced = {e["valueFrom"]["secretKeyRef"]["name"]
                  for c in [*pod["initContainers"], *pod["containers"]]
                  for e in c["env"] if "valueFrom" in e}
    assert not [name for name, secret in mounted.items() if secret.get("optional")]
    assert set(mounted) | referenced == {s.name for s in plan.secrets} | {
        plan.per_job_secret.name}, "only the plan's secrets and the job's own"
    assert grants.DATABASE_SECRET not in json.dumps(job)


@pytest.mark.parametrize("policy", [
    {"acme": {"toolCredentials": ["git-host/pull-request"]}},  # the old shape
    {"acme": {"toolCredentials": [{"tool": "git-host", "purpose": "pull-request"}]}},
    {"acme": {"repositoryCredentials": [{"secret": "acme-repo", "hosts": []}]}},
    {"acme": {"repositoryCredentials": [{"secret": "acme-repo", "hosts": ["a b"]}]}},
])
def test_a_defaults_file_with_an_unclear_grant_does_not_load(
    tmp_path: Path, policy: dict[str, Any]
) -> None:
    path = tmp_path / "defaults.json"
    path.write_text(json.dumps({"tenantPolicies": policy}))
    with pytest.raises(DefaultsError):
        load_defaults(str(path))
    path.write_text(json.dumps({"defaultTenantPolicy": {}}))
    with pytest.raises(DefaultsError):
        load_defaults(str(path))
    path.write_text(json.dumps({"tenantPolicies": {"acme": {
        "toolCredentials": [{"tool": "git-host", "purpose": "pull-request",
                             "secretNames": ["acme-gh"]}],
        "repositoryCredentials": [{"secret": "acme-repo", "hosts": ["git.acme.example"]}]}}}))
    assert load_defaults(str(path)).tenantPolicies["acme"].repositoryCredentials[0].hosts == [
        "git.acme.example"]


EVENTS = "/api/v1/namespaces/svc-v01/events"


def pending_pod() -> dict[str, Any]:
    """The job's pod, pending: its containers wait for their volumes."""
    return {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [{
        "metadata": {"name": "p-job", "labels": {"svc/runner-job-id": "job_01abc"}},
        "status": {"phase": "Pending", "initContainerStatuses": [{
            "name": "assemble", "image": "i", "imageID": "", "ready": False,
            "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]}}]}


def events(*found: tuple[str, str, str]) -> dict[str, Any]:
    """An event list: (pod, reason, message) each."""
    return {"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": [
        {"metadata": {"name": f"e{i}", "namespace": "svc-v01"}, "reason": reason,
         "message": message, "involvedObject": {"kind": "Pod", "name": pod}}
        for i, (pod, reason, message) in enumerate(found)]}


@pytest.mark.parametrize(("listed", "expected"), [
    (events(("p-job", "FailedMount",
             'MountVolume.SetUp failed for volume "secret-1" : secret "acme-gh" not found')),
     ("blocked", "secret-unavailable")),
    (events(("p-job", "FailedMount", 'MountVolume.SetUp failed for volume "secret-1" : '
             "references non-existent secret key: GIT_HOST_TOKEN")),
     ("blocked", "secret-unavailable")),
    (events(("p-other", "FailedMount", 'secret "acme-gh" not found')), ("running", None)),
    (events(("p-job", "FailedMount", "timed out waiting for the condition")),
     ("running", None)),
    (events(), ("running", None)),
])
async def test_a_secret_volume_kubelet_cannot_mount_is_secret_unavailable(
    kmock: Any, tmp_path: Path, listed: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    """No credential volume is optional: a missing one leaves the pod pending with a
    ``FailedMount`` event, which the driver reads as ``secret-unavailable`` (and nothing
    else as that: another pod's event, a mount that is only slow)."""
    from tests.test_k8s_driver import JOBS, driver_for

    kmock[f"get {JOBS}/svc-v01-job-01abc"] << {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "svc-v01-job-01abc"},
        "status": {"active": 1}}
    kmock["get /api/v1/namespaces/svc-v01/pods"] << pending_pod()
    kmock[f"get {EVENTS}"] << listed
    seen = await driver_for(kmock).status("job_01abc")
    assert (seen.state, seen.failure_kind) == expected, seen
