"""The runner never acts for the agent (issue 26 items 1 and 5, DESIGN 13): what the backend
writes is hostile input. A report file linked elsewhere is not read through (the runner token
of another job never becomes a thread id or a blocker kind); a projection into the session
volume never follows a link the backend planted there; and when a job ends, its secret files
(profile credentials, volume tool credentials, the per-job secret, the runner token) leave
its directory, whatever its outcome."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from runner_assembly.assembly.names import JOB_SECRET_DIR, TOKEN_FILE
from runner_assembly.runner import beneath
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.grants_support import granting, with_grants
from tests.support import SECRET_CANARY, TASKS, task_body
from tests.test_dispatch import dispatch, job_dirs, settle, submit
from tests.test_driver_conformance import Harness, harness, runner_job_of  # noqa: F401
from tests.test_k8s_dispatch import kube  # noqa: F401

TOOL_CANARY = "deputy-tool-canary-6b2e"
LAB_CANARY = "deputy-lab-canary-1c9f"
HOSTILE = '''\
import os, sys, time
for line in sys.stdin.read().splitlines():
    verb, _, rest = line.partition(" ")
    if verb == "link":  # link NAME TARGET: NAME below BACKEND_HOME
        name, target = rest.split()
        os.symlink(target, os.path.join(os.environ["BACKEND_HOME"], name))
    elif verb == "link-own-token":  # link NAME to this job's runner token (pod or local)
        home = os.environ["HOME"]
        target = ("/var/run/svc/job/runner-token" if home == "/home/svc"
                  else os.path.join(os.path.dirname(home), "runner.token"))
        os.symlink(target, os.path.join(os.environ["BACKEND_HOME"], rest))
    elif verb == "plant":  # plant NAME TARGET: NAME in the session volume
        name, target = rest.split()
        os.symlink(target, os.path.join(os.environ["SVC_SESSION_PVC_MOUNT_PATH"], name))
    elif verb == "sleep":
        time.sleep(float(rest))
    elif verb == "exit":
        sys.exit(int(rest))
print("hostile backend done")
'''


def hostile(settings: RunnerSettings) -> RunnerSettings:
    """``settings`` with profile-1's backend the hostile script (its prompt says what to
    plant), given inline: a pod sees no file of the tests."""
    return dataclasses.replace(settings, backend_commands={
        **settings.backend_commands, "profile-1": (sys.executable, "-c", HOSTILE)})


@pytest.fixture
def runner_settings(runner_settings: RunnerSettings) -> RunnerSettings:
    """Every job of this module runs the hostile backend (with either driver); ``acme`` may
    use the volume tool credential of :func:`plant_tool`."""
    return with_grants(hostile(runner_settings), granting(
        {"tool": "git-host", "purpose": "deploy", "secretRef": {"name": "tool-ssh"}}))


def ref(name: str) -> dict[str, str]:
    return {"sessionId": name, "conversationId": f"cnv_{name}"}


async def check_not_read_through(database_url: str, done: dict[str, Any],
                                 session: dict[str, Any], trace: list[str], token: str,
                                 report: str) -> None:
    """The turn completed, no thread was reported through the linked ``report``, the token
    is in no answer and no ledger entry, and the trace names the refused file once."""
    assert done["state"] == "completed", done["latestAttempt"]
    assert session["threadId"] is None, "no thread was reported through the link"
    assert token not in json.dumps(done) + json.dumps(session)
    assert token not in await ledger_text(database_url)
    refused = [json.loads(line) for line in trace if '"backend-report-refused"' in line]
    assert [entry["file"] for entry in refused] == [report], trace


async def ledger_text(database_url: str) -> str:
    conn = await asyncpg.connect(database_url)
    try:
        return "\n".join(r["p"] for r in await conn.fetch("SELECT payload::text AS p FROM ledger"))
    finally:
        await conn.close()


async def trace_of(client: Any, session_id: str) -> list[str]:
    answer = await client.get(f"/api/v1/sessions/{session_id}/trace", params={"limit": 1000})
    return [item["line"] for item in answer.json()["items"]]


async def wait_for_token(settings: RunnerSettings, job_count: int) -> Path:
    """The runner token of the newest of ``job_count`` jobs, once its backend runs."""
    deadline = time.monotonic() + 30
    while True:
        dirs = job_dirs(settings)
        if len(dirs) == job_count and (dirs[-1] / "pid").exists() \
                and (dirs[-1] / TOKEN_FILE).exists():
            return dirs[-1] / TOKEN_FILE
        assert time.monotonic() < deadline, "the victim's runner started"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("report", [".svc-thread", ".svc-blocker"])
async def test_a_report_linked_to_another_jobs_token_is_not_read_through(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path, report: str
) -> None:
    settings = runner_settings
    async with app_client(database_url, settings) as client:
        victim = await submit(client, "sleep 60", sessionRef=ref("ses_victim"))
        await dispatch(client, victim)
        token_path = await wait_for_token(settings, 1)
        token = token_path.read_text().strip()
        attacker = await submit(client, f"link {report} {token_path}",
                                sessionRef=ref("ses_attacker"))
        await dispatch(client, attacker)
        done = await settle(client, attacker, timeout=60)
        session = (await client.get("/api/v1/sessions/ses_attacker")).json()
        trace = await trace_of(client, "ses_attacker")
        await client.post(f"/api/v1/queue/tasks/{victim}/cancel", json={"reason": "stop"})
    await check_not_read_through(database_url, done, session, trace, token, report)


@pytest.mark.parametrize("report", [".svc-thread", ".svc-blocker"])
async def test_a_report_linked_to_the_runner_token_is_not_read_through_by_either_runner(
    harness: Harness, database_url: str, report: str  # noqa: F811
) -> None:
    """The pod runner too: the backend links its report to the runner's own token (the
    per-job Secret's mount, or the local job's ``runner.token``)."""
    client = harness.client
    task_id = await submit(client, f"link-own-token {report}", sessionRef=ref("ses_own"))
    job = (await runner_job_of(client, await dispatch(client, task_id)))["runnerJobId"]
    token = harness.token(job)
    done = await settle(client, task_id, timeout=60)
    session = (await client.get("/api/v1/sessions/ses_own")).json()
    trace = await trace_of(client, "ses_own")
    await check_not_read_through(database_url, done, session, trace, token, report)


async def test_a_link_planted_in_the_session_volume_never_receives_a_projection(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    """Turn 1 plants ``sessions/esc -> <host dir>``; turn 2 asks for a volume credential
    at ``…/sessions/esc/dropped``. Intake refuses that mount path (it covers the session
    directory: ``schema-invalid``, nothing stored), so no runner is asked to project there;
    were one asked, its no-follow walk refuses the link
    (:func:`test_beneath_refuses_links_of_every_kind`)."""
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir()
    store = runner_settings.secrets_dir / "svc-v01" / "tool-ssh"
    store.mkdir(parents=True)
    (store / "password").write_text(TOOL_CANARY)
    credential = {"tool": "git-host", "purpose": "deploy",
                  "secretRef": {"name": "tool-ssh", "keys": ["password"]},
                  "projection": {"kind": "volume",
                                 "mountPath": "/home/svc/.backend/sessions/esc/dropped"}}
    async with app_client(database_url, runner_settings) as client:
        first = await submit(client, f"plant esc {host_dir}", sessionRef=ref("ses_esc"))
        await dispatch(client, first)
        assert (await settle(client, first, timeout=60))["state"] == "completed"
        before = await ledger_text(database_url)
        refused = await client.post(TASKS, json=task_body(
            payload={"prompt": "say hello"}, sessionRef=ref("ses_esc"),
            executionPolicy={"secretScope": {"toolCredentials": [credential]}}))
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "schema-invalid"
        assert await ledger_text(database_url) == before, "nothing was stored"
    assert list(host_dir.iterdir()) == [], "nothing was created through the planted link"
    assert TOOL_CANARY not in refused.text


def secret_leftovers(job: Path) -> list[str]:
    """Secret files left in a job directory, and files holding a canary value."""
    found = [str(p.relative_to(job)) for p in job.rglob("*")
             if p.name in (TOKEN_FILE, JOB_SECRET_DIR, "auth.json", "config.toml", "password")]
    for path in job.rglob("*"):
        if path.is_file() and not path.is_symlink():
            text = path.read_text(errors="replace")
            if any(canary in text for canary in (SECRET_CANARY, TOOL_CANARY, LAB_CANARY)):
                found.append(f"{path.relative_to(job)} holds a canary")
    return found


def plant_tool(settings: RunnerSettings) -> dict[str, Any]:
    """A volume tool credential with a canary; the task policy using it."""
    store = settings.secrets_dir / "svc-v01" / "tool-ssh"
    store.mkdir(parents=True, exist_ok=True)
    (store / "password").write_text(TOOL_CANARY)
    return {"secretScope": {"toolCredentials": [
        {"tool": "git-host", "purpose": "deploy",
         "secretRef": {"name": "tool-ssh", "keys": ["password"]},
         "projection": {"kind": "volume", "mountPath": "/home/svc/.config/deploy"}}]}}


@pytest.mark.parametrize(("prompt", "state"), [("say hello", "completed"),
                                               ("exit 3", "failed")])
async def test_an_ended_job_leaves_no_secret_file(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path, prompt: str,
    state: str
) -> None:
    settings = runner_settings
    policy = plant_tool(settings)
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, prompt, executionPolicy=policy)
        await dispatch(client, task_id, {"transientEnv": {"LAB_API_KEY": LAB_CANARY}})
        done = await settle(client, task_id, timeout=60)
    assert done["state"] == state, done["latestAttempt"]
    (job,) = job_dirs(settings)
    assert (job / "stdout.log").is_file() and (job / "workspaces").is_dir(), "logs stay"
    assert (job / "home" / ".backend").is_dir()
    assert secret_leftovers(job) == []


async def test_a_killed_runner_leaves_no_secret_file_once_the_driver_sees_it_gone(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    settings = runner_settings
    policy = plant_tool(settings)
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "sleep 60", executionPolicy=policy)
        await dispatch(client, task_id, {"transientEnv": {"LAB_API_KEY": LAB_CANARY}})
        await wait_for_token(settings, 1)
        (job,) = job_dirs(settings)
        deadline = time.monotonic() + 30
        while not (job / "home" / ".config" / "deploy" / "password").exists():
            assert time.monotonic() < deadline, "the tool credential was projected"
            await asyncio.sleep(0.05)
        os.killpg(int((job / "pid").read_text()), signal.SIGKILL)
        done = await settle(client, task_id, timeout=60)
    assert done["state"] == "failed" and done["latestAttempt"]["failureKind"] == "runner-lost"
    assert secret_leftovers(job) == []


def test_beneath_refuses_links_of_every_kind(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "home").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("outside")
    (root / "home" / "sym").symlink_to(outside / "secret")
    os.link(outside / "secret", root / "home" / "hard")
    os.mkfifo(root / "home" / "fifo")
    (root / "home" / "dir").symlink_to(outside)
    for name in ("sym", "hard", "fifo", "dir/secret"):
        with pytest.raises(beneath.Refused):
            beneath.read_report(root, f"home/{name}", 100)
    assert beneath.read_report(root, "home/absent", 100) is None
    for relative in ("home/dir/new/file", "home/sym", "../outside/x", "/abs"):
        with pytest.raises(beneath.Refused):
            beneath.write_file(root, relative, b"x", 0o600)
    beneath.write_file(root, "home/made/deep/file", b"ok", 0o400)
    assert beneath.read_report(root, "home/made/deep/file", 100) == "ok"
    assert beneath.remove(root, "home/dir") and not (root / "home" / "dir").is_symlink()
    assert beneath.remove(root, "home/made")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"], "nothing outside changed"
