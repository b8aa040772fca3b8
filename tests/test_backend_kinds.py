"""The backend kinds' settings and the ``command`` kind's contract (docs/backends.md)
through the real app with the local driver: a thread and a blocker reported as JSON lines on
standard output, and a resume that succeeds only when the backend confirms its thread."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from api.settings import ServiceSettings
from runner_assembly.runner import backends
from runner_assembly.settings import REFERENCE_BACKEND, RunnerSettings
from tests.conftest import app_client
from tests.support import task_body, with_script_backend
from tests.test_dispatch import TASKS, dispatch, settle
from tests.test_job_file import full_job

BACKEND = '''
import json, os, sys
prompt = sys.stdin.read()
thread = os.environ.get("SVC_THREAD_ID")
def say(**fields):
    print(json.dumps(fields), flush=True)
if "blocker" in prompt:
    say(svc="blocker", kind="required-skill-unavailable")
    sys.exit(3)
if thread is None:
    say(svc="thread", id="thr_line_1")
elif "confirm" in prompt:
    say(svc="thread", id=thread)
elif "other" in prompt:
    say(svc="thread", id="thr_other")
'''
"""Reports by JSON lines: starts ``thr_line_1``; on a resume confirms the thread, names
another (``other``) or says nothing (``silent``); ``blocker`` reports one."""


def test_kinds_default_from_the_command_and_refuse_what_cannot_run(tmp_path: Path) -> None:
    program = tmp_path / "bin" / "codex"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    env = {"SVC_BACKEND_COMMAND_PROFILE_2": "agent --flag",
           "SVC_BACKEND_KIND_PROFILE_3": "codex", "SVC_BACKEND_COMMAND_PROFILE_3": str(program)}
    runner = ServiceSettings.from_env(env).runner(tmp_path / "data")
    assert runner.backend_kinds == {"profile-1": "reference", "profile-2": "command",
                                    "profile-3": "codex", "profile-4": "reference"}
    assert runner.backend_commands["profile-1"] == REFERENCE_BACKEND
    assert runner.backend_commands["profile-2"] == ("agent", "--flag")
    assert runner.backend_commands["profile-3"] == (str(program),)
    refused = [
        ({"SVC_BACKEND_KIND_PROFILE_1": "shell"}, "SVC_BACKEND_KIND_PROFILE_1 is command"),
        ({"SVC_BACKEND_KIND_PROFILE_1": "command"}, "needs SVC_BACKEND_COMMAND_PROFILE_1"),
        ({"SVC_BACKEND_KIND_PROFILE_4": "reference", "SVC_BACKEND_COMMAND_PROFILE_4": "a"},
         "unset SVC_BACKEND_COMMAND_PROFILE_4"),
        ({"SVC_BACKEND_KIND_PROFILE_2": "codex", "SVC_BACKEND_COMMAND_PROFILE_2": "codex exec"},
         "names the program alone"),
    ]
    for variables, says in refused:
        with pytest.raises(ValueError, match=says):
            ServiceSettings.from_env(variables).runner(tmp_path / "data")


def npm_install(root: Path) -> Path:
    """An npm-style install under ``root``: ``.bin/codex`` linking to a Node.js launcher, and
    a native package beside it. The ``.bin`` link."""
    modules = root / "node_modules"
    launcher = modules / "@openai" / "codex" / "bin" / "codex.js"
    launcher.parent.mkdir(parents=True)
    launcher.write_text("#!/usr/bin/env node\n")
    (modules / "@openai" / "codex-linux-x64").mkdir()
    link = modules / ".bin" / "codex"
    link.parent.mkdir()
    link.symlink_to("../@openai/codex/bin/codex.js")
    return link


def test_codex_runs_its_launcher_with_node_and_the_sandbox_shows_the_install(
    tmp_path: Path
) -> None:
    link = npm_install(tmp_path)
    start = full_job(backend_kind="codex", backend_command=[str(link)], thread_id=None)
    command = backends.argv(start)
    launcher = str(tmp_path / "node_modules/@openai/codex/bin/codex.js")
    assert command[1:] == [launcher, "exec", "--json", "--skip-git-repo-check",
                           "--dangerously-bypass-approvals-and-sandbox", "-"]
    assert Path(command[0]).name == "node"
    resume = backends.argv(full_job(backend_kind="codex", backend_command=[str(link)],
                                    thread_id="0000-t"))
    assert resume[-4:] == ["--dangerously-bypass-approvals-and-sandbox", "resume", "0000-t",
                           "-"]
    assert tmp_path / "node_modules" in backends.install_roots(command)
    assert backends.install_roots([str(link)]) == [tmp_path / "node_modules"]
    home = tmp_path / "home"
    assert backends.backend_env(start, {"PATH": "/bin"}, home) == {
        "PATH": "/bin", "CODEX_HOME": str(home)}
    plain = full_job(backend_command=["agent"])
    assert backends.argv(plain) == ["agent"]
    assert backends.backend_env(plain, {"PATH": "/bin"}, home) == {"PATH": "/bin"}


def test_reports_are_whole_json_lines_and_a_codex_resume_needs_a_uuid_with_a_rollout(
    tmp_path: Path
) -> None:
    output = tmp_path / "stdout.log"
    output.write_text("\n".join([
        '{"svc": "thread", "id": "thr_1"}', '{"svc": "thread", "id": "thr_2"}',
        'text {"svc": "blocker", "kind": "x"}', "{" + "x" * 70000,
        '{"svc": "blocker", "kind": "Not A Kind!"}',
        '{"type": "thread.started", "thread_id": "0000-t"}',
        '{"type": "turn.completed", "usage": {"input_tokens": 5, "output_tokens": 2, "x": 1}}',
        '{"type": "turn.completed", "usage": {"input_tokens": 7, "output_tokens": 3}}']))
    assert backends.reported("command", output) == backends.Reported(
        thread_id="thr_1", blocker="")
    assert backends.reported("codex", output) == backends.Reported(
        thread_id="0000-t", usage={"input_tokens": 7, "output_tokens": 3})
    assert backends.reported("command", tmp_path / "none") == backends.Reported()
    thread = "01a21f39-c7a8-7920-b993-db8f693237c1"
    sessions = tmp_path / "sessions"
    codex = full_job(backend_kind="codex", thread_id=thread)
    assert backends.resume_refused(codex, sessions) == \
        f"no rollout of thread {thread} in the session volume"
    (sessions / "2026" / "11").mkdir(parents=True)
    (sessions / "2026" / "11" / f"rollout-2026-11-27T00-00-00-{thread}.jsonl").write_text("")
    assert backends.resume_refused(codex, sessions) is None
    named = full_job(backend_kind="codex", thread_id="thr_bogus")
    assert backends.resume_refused(named, sessions) == \
        "thr_bogus is not a Codex thread id (a UUID)"
    assert backends.resume_refused(full_job(thread_id="thr_bogus"), sessions) is None


async def turn(client: Any, prompt: str) -> dict[str, Any]:
    """One task of session ``kc``: the settled task."""
    response = await client.post(TASKS, json=task_body(
        payload={"prompt": prompt}, sessionRef={"sessionId": "kc", "conversationId": "c"}))
    assert response.status_code == 201, response.text
    task_id = response.json()["taskId"]
    await dispatch(client, task_id)
    return await settle(client, task_id, timeout=60)


async def test_threads_and_blockers_come_as_lines_and_a_resume_must_be_confirmed(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = with_script_backend(runner_settings, BACKEND)
    outcomes = []
    async with app_client(database_url, settings) as client:
        for prompt in ("start", "confirm", "other", "silent", "confirm", "blocker"):
            task = await turn(client, prompt)
            thread = (await client.get("/api/v1/sessions/kc")).json()["threadId"]
            outcomes.append((prompt, task["state"], task["latestAttempt"]["failureKind"],
                             thread))
        message = task["latestAttempt"]["failureMessage"]
    assert outcomes == [
        ("start", "completed", None, "thr_line_1"),
        ("confirm", "completed", None, "thr_line_1"),
        ("other", "blocked", "session-store-evicted", "thr_line_1"),
        ("silent", "blocked", "session-store-evicted", "thr_line_1"),
        ("confirm", "completed", None, "thr_line_1"),
        ("blocker", "blocked", "required-skill-unavailable", "thr_line_1"),
    ], json.dumps(outcomes)
    assert message == "the backend reported a blocker"
