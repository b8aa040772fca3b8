"""The local sandbox (issue 13 item 6): a hostile backend under bwrap reads nothing outside its
own job -- no other profile's secret, no secret store, no other job, no data dir, no server
``/proc`` -- while its workspace, home and session volume work; without bwrap ``svc serve``
refuses to start unless ``SVC_LOCAL_SANDBOX=off``, which the banner and health report."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.settings import ServiceSettings
from runner_assembly.assembly.profiles import PROFILE_SECRETS
from runner_assembly.drivers import DriverError
from runner_assembly.drivers.local import LocalDriver
from runner_assembly.runner.pod import non_dumpable
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client, running_api, svc_executable
from tests.support import task_body, write_profile_secret
from tests.test_dispatch import dispatch, job_dirs, settle, submit

OTHER_PROFILE_CANARY = "other-profile-canary-3f1e"
TOOL_CANARY = "tool-secret-canary-91ab"
SERVER_CANARY = "server-environ-canary-c0d4"
HOSTILE = '''\
import json, os, sys
probes = json.loads({probes!r})
sys.stdin.read()
def attempt(kind, path):
    if kind == "read":
        with open(path) as handle:
            return handle.read()
    if kind == "list":
        return " ".join(sorted(os.listdir(path)))
    with open(path, "w") as handle:
        handle.write("written by the backend")
    with open(path) as handle:
        return handle.read()
for label, (kind, path) in sorted(probes.items()):
    try:
        print(f"probe {{label}} ok {{attempt(kind, path)!r}}")
    except OSError as error:
        print(f"probe {{label}} denied {{type(error).__name__}}")
'''


def hostile_backend(tmp_path: Path, probes: dict[str, tuple[str, str]]) -> tuple[str, ...]:
    """A backend script that tries ``probes`` and prints each outcome (and what it read)."""
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE.format(probes=json.dumps(probes)))
    return (sys.executable, str(script))


def outcomes(job: Path) -> dict[str, str]:
    """Each probe's outcome, ``ok …`` or ``denied <error>``, from the job's output."""
    found = {}
    for line in (job / "stdout.log").read_text().splitlines():
        if line.startswith("probe "):
            _, label, rest = line.split(" ", 2)
            found[label] = rest
    return found


def plant(data: Path) -> None:
    """Another profile's secret and a tool secret in the secret store."""
    other = PROFILE_SECRETS["profile-2"]
    for name, keys in ((other.name, other.keys), ("tool-token", ("GIT_HOST_TOKEN",))):
        folder = data / "secrets" / "svc-v01" / name
        folder.mkdir(parents=True, exist_ok=True)
        for key in keys:
            (folder / key).write_text(OTHER_PROFILE_CANARY if name == other.name
                                      else TOOL_CANARY)


async def run_task(database_url: str, settings: RunnerSettings, session: str) -> dict[str, Any]:
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "probe", sessionRef={"sessionId": session,
                                                            "conversationId": f"c-{session}"})
        await dispatch(client, task_id)
        done = await settle(client, task_id)
        health = (await client.get("/api/v1/health")).json()
    return {"task": done, "health": health}


async def test_a_hostile_backend_reads_nothing_outside_its_own_job(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "svc-data"
    write_profile_secret(data)
    plant(data)
    monkeypatch.setenv("SVC_SERVER_CANARY", SERVER_CANARY)
    other = PROFILE_SECRETS["profile-2"]
    (tmp_path / "first").mkdir()
    monkeypatch.setenv("SVC_BACKEND_COMMAND_PROFILE_1",
                       " ".join(hostile_backend(tmp_path / "first", {})))
    first = await run_task(database_url, ServiceSettings.from_env().runner(data), "s_other")
    assert first["task"]["state"] == "completed"
    assert first["health"]["sandbox"] == "bwrap"
    (victim,) = job_dirs(ServiceSettings.from_env().runner(data))
    secrets = data / "secrets"
    private_tmp = Path("/tmp") / f"svc-sandbox-probe-{uuid.uuid4().hex}"
    probes = {
        "other-profile": ("read", str(secrets / "svc-v01" / other.name / other.keys[0])),
        "tool-secret": ("read", str(secrets / "svc-v01" / "tool-token" / "GIT_HOST_TOKEN")),
        "secret-store": ("list", str(secrets)),
        "other-job-secret": ("list", str(victim / "job-secret")),
        "other-job-spec": ("read", str(victim / "spec.json")),
        "other-job-home": ("list", str(victim / "home")),
        "other-session": ("list", str(data / "sessions" / "s_other")),
        "server-environ": ("read", f"/proc/{os.getpid()}/environ"),
        "server-parent-environ": ("read", f"/proc/{os.getppid()}/environ"),
        "server-cmdline": ("read", f"/proc/{os.getpid()}/cmdline"),
        "system-write": ("write", "/usr/svc-sandbox-probe"),
        "etc-shadow": ("read", "/etc/shadow"),
        "data-dir": ("list", str(data)),
        "jobs-dir": ("list", str(data / "jobs")),
        "workspace": ("write", "probe.txt"),
        "home": ("write", "../../home/probe.txt"),
        "backend-home": ("list", "../../home/.backend"),
        "session-volume": ("write", "../../home/.backend/sessions/probe.txt"),
        "tmp": ("write", str(private_tmp)),
    }
    monkeypatch.setenv("SVC_BACKEND_COMMAND_PROFILE_1",
                       " ".join(hostile_backend(tmp_path, probes)))
    settings = ServiceSettings.from_env().runner(data)
    second = await run_task(database_url, settings, "s_hostile")
    assert second["task"]["state"] == "completed", second["task"]
    (job,) = [j for j in job_dirs(settings) if j != victim]
    seen = outcomes(job)
    assert seen.keys() == probes.keys(), (job / "stderr.log").read_text()
    for label in ("other-profile", "tool-secret", "secret-store", "other-job-secret",
                  "other-job-spec", "other-job-home", "other-session", "server-environ",
                  "server-parent-environ", "server-cmdline", "system-write", "etc-shadow"):
        assert seen[label].startswith("denied"), (label, seen[label])
    assert seen["data-dir"] == "ok 'jobs sessions'", "only the job's own paths exist there"
    assert seen["jobs-dir"] == f"ok {job.name!r}", "no other job is visible"
    for label in ("workspace", "home", "session-volume", "tmp"):
        assert seen[label] == "ok 'written by the backend'", (label, seen[label])
    assert len(seen["backend-home"].split()) >= 3, "the profile secret is in BACKEND_HOME"
    assert (data / "sessions" / "s_hostile" / "probe.txt").is_file()
    assert not private_tmp.exists(), "the sandbox's /tmp is private"
    output = (job / "stdout.log").read_text() + (job / "stderr.log").read_text()
    for canary in (OTHER_PROFILE_CANARY, TOOL_CANARY, SERVER_CANARY):
        assert canary not in output
    assert "secret_root" not in json.loads((job / "spec.json").read_text())


def test_an_unknown_sandbox_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DriverError, match="SVC_LOCAL_SANDBOX"):
        LocalDriver(tmp_path / "jobs", tmp_path / "sessions", "maybe")


def test_serve_refuses_to_start_without_bwrap(database_url: str, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "SVC_DATABASE_URL": database_url,
           "SVC_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run([svc_executable(), "serve"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "bwrap" in lines[0] and "SVC_LOCAL_SANDBOX=off" in lines[0]
    assert "svc serving" not in done.stdout


async def test_serve_without_bwrap_runs_unsandboxed_when_told_and_says_so(
    database_url: str, tmp_path: Path
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "SVC_LOCAL_SANDBOX": "off"}
    async with running_api(database_url, tmp_path, env) as api, httpx.AsyncClient() as http:
        health = (await http.get(f"{api}/api/v1/health")).json()
        assert health["sandbox"] == "off"
        body = task_body(payload={"prompt": "say hello"})
        task = (await http.post(f"{api}/api/v1/queue/tasks", json=body)).json()
        tasks = f"{api}/api/v1/queue/tasks/{task['taskId']}"
        assert (await http.post(f"{tasks}/dispatch", json={})).status_code == 200
        for _ in range(300):
            state = (await http.post(f"{tasks}/refresh")).json()["state"]
            if state != "running":
                break
            await asyncio.sleep(0.1)
        assert state == "completed"
    (log,) = tmp_path.glob("serve-*.log")
    assert "local sandbox: OFF (SVC_LOCAL_SANDBOX=off)" in log.read_text()
    (job,) = (tmp_path / "data" / "jobs").iterdir()
    trace = [json.loads(line) for line in (job / "trace.jsonl").read_text().splitlines()]
    assert [e["sandbox"] for e in trace if e["kind"] == "backend-start"] == ["off"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs to change its UID")
def test_a_pod_runner_is_not_readable_by_a_same_uid_child() -> None:
    """The pod runner holds the token in memory: once non-dumpable, a process of its own UID
    (the backend) reads neither its environment nor its memory through ``/proc``."""
    probe = ["/bin/sh", "-c", "cat /proc/$PPID/environ >/dev/null 2>&1 && echo readable"]
    child = os.fork()
    if child == 0:  # an unprivileged UID of its own, dumpable as a plain process is
        try:
            os.setgid(65534)
            os.setuid(65534)
            ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)
            before = subprocess.run(probe, capture_output=True, text=True, cwd="/").stdout
            non_dumpable()
            after = subprocess.run(probe, capture_output=True, text=True, cwd="/").stdout
            os._exit(0 if before.strip() == "readable" and not after.strip() else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
