"""Issue 17's runtime-assembly gaps, through the real app and the local driver with real git
repositories: the runner startup event (SPEC 2.11, 6), assembly capability gaps (SPEC 5.2
rule 7), workspace/command consistency (SPEC 7), the workspace root and its refusals, the
full smoke-check list (SPEC 8) and the ``SVC_RESOURCE_BIN_PATH`` shims (SPEC 9)."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import pytest

from api import wire
from api.settings import ServiceSettings
from cli import render
from runner_assembly.assembly.capability import MAX_TOOLS, startup_record
from runner_assembly.assembly.defaults import SPEC_SMOKE_TOOLS, TOOLS_BUNDLE_SMOKE_TOOLS
from runner_assembly.assembly.failures import MINIMAL_PATH, AssemblyFailure
from runner_assembly.assembly.workspace_root import check_checkout
from runner_assembly.contract.plan import SecretUse
from runner_assembly.runner import smoke
from runner_assembly.runner.capabilities import capability_gaps
from runner_assembly.runner.layout import Layout
from runner_assembly.settings import RunnerSettings
from tests.bundles import bundle_ref, git, make_bundle_repo
from tests.conftest import svc_executable
from tests.support import SECRET_CANARY, replay_report
from tests.test_assembly_runner import (
    TOKEN_CANARY,
    app_client,
    credential,
    runner_job,
    settings_for,
    write_secret,
)
from tests.test_dispatch import dispatch, job_dirs, settle, submit

SUMMARY_KEYS = {"version", "tools", "dependencyPolicy", "valuesPrinted"}
"""SPEC 2.11: the summary contains only these."""


async def ledger_events(database_url: str, event_type: str) -> list[dict[str, Any]]:
    """Payloads of every stored event of one type."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT payload::text AS p FROM ledger WHERE event_type = $1",
                                event_type)
    finally:
        await conn.close()
    return [json.loads(r["p"]) for r in rows]


async def test_the_runner_startup_event_is_recorded_and_shown_with_the_assembly_event(
    database_url: str, runner_settings: RunnerSettings, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = settings_for(runner_settings)
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "hello")
        await dispatch(client, task_id)
        task = await settle(client, task_id)
        assert task["state"] == "completed", task
        job = await runner_job(client, task)
        again = await client.post(f"/api/v1/queue/tasks/{task_id}/refresh")
        assert again.status_code == 200
    started = job["runnerStartup"]
    assert set(started) == SUMMARY_KEYS and started["valuesPrinted"] is False
    assert started["version"] == (await client_version(database_url, settings))
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True,
                                 check=True).stdout.split()[2]
    assert {"name": "git", "version": git_version} in started["tools"]
    assert job["assembly"] is not None, "shown next to the assembly event"
    (stored,) = await ledger_events(database_url, "runner-started")
    assert stored["capability"] == started, "recorded once, through the ledger"
    (folder,) = job_dirs(settings)
    kinds = [json.loads(line)["kind"] for line in (folder / "trace.jsonl").read_text()
             .splitlines()]
    assert kinds[0] == "runner-started" and "assembled" in kinds
    report = await replay_report(database_url)
    assert report.ok, report
    render.runner_job(msgspec.convert(job, wire.RunnerJob))
    shown = capsys.readouterr().out
    assert f"runner started: svc {started['version']}  tools: python " in shown
    assert f"git {git_version}" in shown and "valuesPrinted: false" in shown


async def client_version(database_url: str, settings: RunnerSettings) -> str:
    """The service version the health answer reports."""
    async with app_client(database_url, settings) as client:
        return str((await client.get("/api/v1/health")).json()["workReady"]["version"])


def test_the_recorded_startup_summary_keeps_only_the_spec_fields_within_bounds() -> None:
    reported = {"version": "1" * 500, "token": SECRET_CANARY, "env": {"A": SECRET_CANARY},
                "tools": [{"name": f"t{i}", "version": "9" * 300, "path": SECRET_CANARY}
                          for i in range(500)],
                "dependencyPolicy": "fixed", "valuesPrinted": True}
    record = startup_record(reported)
    assert record is not None and set(record) == SUMMARY_KEYS
    assert SECRET_CANARY not in json.dumps(record)
    assert record["valuesPrinted"] is False
    assert len(record["tools"]) == MAX_TOOLS  # type: ignore[arg-type]
    assert len(json.dumps(record)) < 8 * 1024
    assert startup_record("not a summary") is None and startup_record(None) is None


def repo_with(root: Path, files: dict[str, tuple[str, int]]) -> Path:
    """A real git repository holding ``files`` (path: text and mode), committed on main."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch=main")
    for path, (text, mode) in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
        (repo / path).chmod(mode)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "files")
    return repo


def on_minimal_path(tool: str) -> bool:
    """Whether this machine's runner PATH has ``tool`` (then a gap cannot be produced)."""
    return shutil.which(tool, path=MINIMAL_PATH) is not None


async def run_to_end(database_url: str, settings: RunnerSettings,
                     **overrides: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Submit, dispatch and settle one task: the task and its runner-job view."""
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "go", **overrides)
        await dispatch(client, task_id)
        task = await settle(client, task_id)
        return task, await runner_job(client, task)


def test_capability_gaps_name_the_capability_the_tool_and_what_needs_it(tmp_path: Path) -> None:
    path = tmp_path / "bin"
    path.mkdir()
    (path / "ssh").write_text("#!/bin/sh\n")
    (path / "ssh").chmod(0o755)
    smoke_found = [{"name": "git", "found": False}, {"name": "curl", "found": False},
                   {"name": "ssh", "found": True}]
    refs: dict[str, Any] = {"name": "s", "namespace": "svc", "keys": ["k"], "projection": "env"}
    uses = [SecretUse(role="provider", tool=None, **refs),
            SecretUse(role="tool", tool="git-host", purpose="pull-request", **refs),
            SecretUse(role="tool", tool="git-host", purpose="git-host-ssh", **refs),
            SecretUse(role="tool", tool="ext-ssh", purpose="ssh-passthrough", **refs)]
    gaps = capability_gaps(uses, smoke_found, str(path))
    assert gaps == [
        {"capability": "http-client", "tool": "curl", "requiredBy": "smoke-check"},
        {"capability": "code-host-cli", "tool": "gh", "requiredBy": "git-host/pull-request"},
    ], "git is a base tool, not a capability; ssh is on the PATH"
    (path / "ssh").unlink()
    assert {g["requiredBy"] for g in capability_gaps(uses, [], str(path))} == {
        "git-host/pull-request", "git-host/git-host-ssh", "ext-ssh/ssh-passthrough"}


@pytest.mark.skipif(on_minimal_path("gh"), reason="this machine has a code-host CLI")
async def test_a_credential_without_its_shell_capability_is_a_recorded_capability_gap(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    settings = settings_for(runner_settings)
    write_secret(settings, "git-host-token", {"GIT_HOST_TOKEN": TOKEN_CANARY})
    repo = make_bundle_repo(tmp_path)
    task, job = await run_to_end(
        database_url, settings, resourceBundleRef=bundle_ref(repo),
        executionPolicy={"secretScope": {"toolCredentials": [credential("git-host-token")]}})
    assert task["state"] == "blocked", task
    assert task["latestAttempt"]["failureKind"] == "capability-gap"
    gap = {"capability": "code-host-cli", "tool": "gh", "requiredBy": "git-host/pull-request"}
    assert job["assembly"]["capabilityGaps"] == [gap]
    assert job["assembly"]["failure"] == {
        "kind": "capability-gap", "details": {"capabilityGaps": [gap]},
        "message": "assembly capability gap: code-host-cli (gh) missing from the runtime"}
    (folder,) = job_dirs(settings)
    assert not (folder / "stdout.log").exists(), "no backend ran without its capability"
    assert TOKEN_CANARY not in json.dumps(job)


@pytest.mark.skipif(on_minimal_path("gh"), reason="this machine has a code-host CLI")
@pytest.mark.parametrize(("smoke_tools", "kind", "missing"), [
    (["git", "gh"], "capability-gap", None),
    (["git", "gh", "no-such-base-tool"], "infra-failed", ["gh", "no-such-base-tool"]),
])
async def test_smoke_check_gaps_are_capability_gaps_unless_a_base_tool_is_missing(
    database_url: str, runner_settings: RunnerSettings, smoke_tools: list[str], kind: str,
    missing: list[str] | None
) -> None:
    settings = settings_for(runner_settings, smokeTools=smoke_tools)
    task, job = await run_to_end(database_url, settings)
    assert task["latestAttempt"]["failureKind"] == kind
    assert task["state"] == ("blocked" if kind == "capability-gap" else "failed")
    gaps = [{"capability": "code-host-cli", "tool": "gh", "requiredBy": "smoke-check"}]
    assert job["assembly"]["capabilityGaps"] == gaps
    details = job["assembly"]["failure"]["details"]
    assert details == ({"capabilityGaps": gaps} if missing is None
                       else {"missing": missing, "capabilityGaps": gaps})


AGENT = "#!/bin/sh\necho \"agent ran in $(pwd)\"\n"


@pytest.mark.parametrize(("files", "state", "kind", "message"), [
    ({"README.md": ("no agent here\n", 0o644)}, "failed", "workspace-command-inconsistent",
     "the backend command ./bin/agent is not in the workspace checkout"),
    ({"bin/agent": (AGENT, 0o644)}, "failed", "workspace-command-inconsistent",
     "the backend command ./bin/agent in the workspace is not executable"),
    ({"bin/agent": (AGENT, 0o755)}, "completed", None, None),
])
async def test_a_backend_that_cannot_spawn_in_its_workspace_is_a_workspace_command_problem(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path,
    files: dict[str, tuple[str, int]], state: str, kind: str | None, message: str | None
) -> None:
    repo = repo_with(tmp_path, files)
    settings = dataclasses.replace(runner_settings, backend_commands={
        **runner_settings.backend_commands, "profile-1": ("./bin/agent",)})
    task, job = await run_to_end(database_url, settings,
                                 resourceBundleRef={"kind": "gitbundle",
                                                    "repoUrl": repo.as_uri()})
    assert task["state"] == state, task
    assert task["latestAttempt"]["failureKind"] == kind
    assert job["failureKind"] == kind and job["failureMessage"] == message
    (folder,) = job_dirs(settings)
    traced = [json.loads(line) for line in (folder / "trace.jsonl").read_text().splitlines()]
    if kind is None:
        workspace = job["assembly"]["workspace"]
        assert (folder / "stdout.log").read_text() == f"agent ran in {workspace}\n"
        return
    assert "failure" not in job["assembly"], "assembly itself succeeded"
    (spawn,) = [t for t in traced if t["kind"] == "backend-spawn-failed"]
    assert spawn["failureKind"] == kind and spawn["details"]["program"] == "./bin/agent"
    assert not (folder / "stdout.log").exists()


def test_a_workspace_root_overlapping_a_protected_path_is_refused_at_startup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    refused = {"workspaces": "absolute path", "/app": "overlaps /app",
               "/app/checkouts": "overlaps /app", "/": "overlaps /app",
               str(data / "secrets"): "overlaps the secret store",
               str(data / "secrets" / "svc-v01"): "overlaps the secret store",
               str(data): "overlaps the secret store",
               str(data / "sessions" / "ses_1"): "overlaps the session directories"}
    for root, reason in refused.items():
        monkeypatch.setenv("SVC_WORKSPACE_ROOT", root)
        with pytest.raises(ValueError, match=reason):
            ServiceSettings.from_env().runner(data)
    monkeypatch.setenv("SVC_WORKSPACE_ROOT", str(tmp_path / "ws"))
    assert ServiceSettings.from_env().runner(data).workspace_root == str(tmp_path / "ws")


def test_svc_serve_refuses_a_workspace_root_on_app_in_one_line(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", ""), "SVC_DATA_DIR": str(tmp_path / "data"),
           "SVC_WORKSPACE_ROOT": "/app/work", "SVC_PORT": "1"}
    done = subprocess.run([svc_executable(), "serve"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.strip() == ("error: invalid-request: SVC_WORKSPACE_ROOT /app/work "
                                   "overlaps /app (/app): checkouts there would overwrite it")
    assert not (tmp_path / "data" / "pg").exists(), "refused before anything started"


async def test_checkouts_go_below_svc_workspace_root(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    repo = make_bundle_repo(tmp_path)
    root = tmp_path / "workspace-root"
    settings = dataclasses.replace(settings_for(runner_settings), workspace_root=str(root))
    task, job = await run_to_end(database_url, settings, resourceBundleRef=bundle_ref(repo))
    assert task["state"] == "completed", task
    workspace = Path(job["assembly"]["workspace"])
    assert workspace.parent == root / job["runnerJobId"]
    assert (workspace / "src/app.py").read_text() == "print('app')\n"
    (folder,) = job_dirs(settings)
    assert not (folder / "workspaces").exists(), "nothing checked out in the job folder"
    assert f"tran ran in {workspace}" in (folder / "stdout.log").read_text()


@pytest.mark.parametrize(("root", "what"), [
    ("/app", "/app"), ("secrets", "the secret projection"),
    ("secrets/svc-v01", "the secret projection")])
async def test_the_runner_refuses_a_checkout_onto_a_protected_path(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path, root: str, what: str
) -> None:
    repo = make_bundle_repo(tmp_path)
    settings = settings_for(runner_settings)
    target = root if root.startswith("/") else str(settings.data_dir / root)
    settings = dataclasses.replace(settings, workspace_root=target)  # past the startup check
    before = sorted((p, p.read_bytes()) for p in settings.secrets_dir.rglob("*") if p.is_file())
    task, job = await run_to_end(database_url, settings, resourceBundleRef=bundle_ref(repo))
    assert task["state"] == "blocked", task
    assert task["latestAttempt"]["failureKind"] == "workspace-refused"
    failure = job["assembly"]["failure"]
    assert failure["kind"] == "workspace-refused" and failure["details"]["protected"] == what
    assert f"would overwrite {what}" in failure["message"]
    assert job["assembly"]["steps"][-1] == "check-workspace"
    assert sorted((p, p.read_bytes()) for p in settings.secrets_dir.rglob("*")
                  if p.is_file()) == before, "the secret store is untouched"
    assert not Path(target, job["runnerJobId"]).exists(), "nothing was created there"
    (folder,) = job_dirs(settings)
    assert not (folder / "stdout.log").exists()


@pytest.mark.parametrize(("workspace", "what"), [
    ("job_1/home/.backend/k", "the runtime home"),
    ("job_1/home/.backend/sessions/k", "the runtime home"),
    ("job_1/job-secret/k", "the secret projection"), ("job_1/home/.ssh", "the secret projection"),
    ("job_1/home", "the secret projection"), ("sessions/ses_1/k", "the session directory")])
def test_a_checkout_over_the_runtime_home_session_or_secrets_is_refused(
    tmp_path: Path, workspace: str, what: str
) -> None:
    job = tmp_path / "job_1"
    layout = Layout(home=job / "home", workspace_root=job / "workspaces", workspace_key="k")
    protected = [("the secret projection", job / "job-secret"),
                 ("the secret projection", layout.home_path("/home/svc/.ssh")),
                 ("the runtime home", layout.backend_home),
                 ("the session directory", tmp_path / "sessions" / "ses_1")]
    with pytest.raises(AssemblyFailure) as refused:
        check_checkout(tmp_path / workspace, tmp_path, protected)
    assert refused.value.kind == "workspace-refused"
    assert refused.value.details["protected"] == what, "a checkout holding it is refused too"
    check_checkout(layout.workspace, layout.workspace_root, protected)
    with pytest.raises(AssemblyFailure, match="not below the workspace root"):
        check_checkout(job / "elsewhere" / "k", layout.workspace_root, protected)


FULL_SMOKE = [*SPEC_SMOKE_TOOLS, *TOOLS_BUNDLE_SMOKE_TOOLS]
"""SPEC 8's whole list: the runner image's tools, then the tools bundle's."""


def stub_dir(root: Path, names: list[str]) -> Path:
    """A directory of executable stubs named ``names``."""
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / name).write_text("#!/bin/sh\n")
        (root / name).chmod(0o755)
    return root


def test_the_smoke_list_is_spec_8s_whole_list() -> None:
    assert SPEC_SMOKE_TOOLS == ("bun", "node", "npm", "git", "ssh", "gh", "rg", "curl",
                                "kubectl")
    assert TOOLS_BUNDLE_SMOKE_TOOLS == ("tran", "trans", "apply_patch")


@pytest.mark.parametrize("absent", FULL_SMOKE)
def test_each_missing_smoke_tool_fails_fast_with_its_kind(tmp_path: Path, absent: str) -> None:
    path = str(stub_dir(tmp_path / "bin", [t for t in FULL_SMOKE if t != absent]))
    found = smoke.probe(list(SPEC_SMOKE_TOOLS), path, tools_bundle=True)
    assert [t["name"] for t in found] == FULL_SMOKE
    assert [t["name"] for t in found if not t["found"]] == [absent]
    gaps = capability_gaps([], found, path)
    with pytest.raises(AssemblyFailure) as failed:
        smoke.require(found, gaps)
    capability = absent in ("gh", "curl", "ssh")
    assert failed.value.kind == ("capability-gap" if capability else "infra-failed")
    assert absent in failed.value.message
    everything = str(stub_dir(tmp_path / "bin", [absent]))
    smoke.require(smoke.probe(list(SPEC_SMOKE_TOOLS), everything, True), [])  # nothing raised
    assert [t["name"] for t in smoke.probe(["git"], everything, False)] == ["git"], \
        "the tools bundle's three only once a tools bundle is assembled"


async def test_the_full_smoke_list_passes_when_the_runtime_has_every_tool(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    # the bundle's tools/ supplies what this machine's runner PATH lacks (then it is on PATH)
    lacking = [t for t in SPEC_SMOKE_TOOLS if not on_minimal_path(t)]
    repo = make_bundle_repo(tmp_path, tools=(*TOOLS_BUNDLE_SMOKE_TOOLS, *lacking))
    settings = settings_for(runner_settings, smokeTools=list(SPEC_SMOKE_TOOLS))
    task, job = await run_to_end(database_url, settings, resourceBundleRef=bundle_ref(repo))
    assert task["state"] == "completed", task
    assert job["assembly"]["smoke"] == [{"name": t, "found": True} for t in FULL_SMOKE]
    assert job["assembly"]["capabilityGaps"] == []
    present = [t for t in dict.fromkeys(["git", *SPEC_SMOKE_TOOLS]) if on_minimal_path(t)]
    assert [t["name"] for t in job["runnerStartup"]["tools"]] == ["python", *present], \
        "the startup summary lists the image's own tools, before any bundle"


TOOL_PATH_BACKEND = '''
import os, shutil, subprocess
print("PATH " + os.environ["PATH"])
for tool in ("tran", "lint", "notes.txt", "odd'name"):
    found = shutil.which(tool)
    print(tool, "->", found, subprocess.run([found], capture_output=True, text=True).stdout.strip()
          if found else "")
'''


async def test_resource_bin_path_holds_only_shims_that_run_the_overlay_tools(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    repo = make_bundle_repo(tmp_path, tools=("tran", "trans", "apply_patch", "lint",
                                             "odd'name"),
                            extra={"tools/notes.txt": "not a tool\n"})
    bin_path = tmp_path / "resource-bin"
    python = runner_settings.backend_commands["profile-1"][0]
    settings = dataclasses.replace(
        runner_settings, resource_bin_path=str(bin_path),
        backend_commands={**runner_settings.backend_commands,
                          "profile-1": (python, "-c", TOOL_PATH_BACKEND)})
    task, job = await run_to_end(database_url, settings, resourceBundleRef=bundle_ref(repo))
    assert task["state"] == "completed", task
    overlay_tools = Path(job["assembly"]["managedOverlay"]) / "tools"
    assert [p.name for p in bin_path.iterdir()] == [job["runnerJobId"]], "one folder per job"
    bin_path = bin_path / job["runnerJobId"]
    workspace = job["assembly"]["workspace"]
    shims = sorted(p.name for p in bin_path.iterdir())
    assert shims == sorted(["tran", "trans", "apply_patch", "lint", "odd'name"]), \
        "only executable tools get a shim; nothing else is written there"
    for name in shims:
        shim = bin_path / name
        assert shim.stat().st_mode & 0o111
        assert shim.read_text() == (f"#!/bin/sh\nexec {shlex.quote(str(overlay_tools / name))}"
                                    ' "$@"\n')
        assert (overlay_tools / name).is_file(), "the shim runs the original overlay tool"
    (folder,) = job_dirs(settings)
    output = (folder / "stdout.log").read_text().splitlines()
    path = output[0].removeprefix("PATH ").split(":")
    assert path[0] == str(bin_path) and str(overlay_tools) not in path
    assert f"tran -> {bin_path / 'tran'} tran ran in {workspace}" in output
    assert f"lint -> {bin_path / 'lint'} lint ran in {workspace}" in output
    odd = "odd'name"
    assert f"odd'name -> {bin_path / odd} odd'name ran in {workspace}" in output
    assert "notes.txt -> None " in output


def test_a_pod_mounts_its_workspace_at_the_workspace_root(tmp_path: Path) -> None:
    from runner_assembly.assembly import k8s_objects
    from tests.test_k8s_driver import plan_of

    plan = plan_of(tmp_path)
    for root in (None, "/srv/checkouts"):
        job = k8s_objects.job(plan, root)
        pod = job["spec"]["template"]["spec"]
        expected = root or "/workspace"
        for container in (*pod["initContainers"], *pod["containers"]):
            assert container["workingDir"] == expected
            mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
            assert mounts["workspace"] == expected
