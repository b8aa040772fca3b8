"""The backend kinds' settings and the ``command`` kind's contract (docs/backends.md)
through the real app with the local driver: a thread and a blocker reported as JSON lines on
standard output, and a resume that succeeds only when the backend confirms its thread."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from api.settings import ServiceSettings
from runner_assembly.settings import REFERENCE_BACKEND, RunnerSettings
from tests.conftest import app_client
from tests.support import task_body
from tests.test_dispatch import TASKS, dispatch, settle

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
    settings = dataclasses.replace(
        runner_settings, backend_kinds={**runner_settings.backend_kinds, "profile-1": "command"},
        backend_commands={**runner_settings.backend_commands,
                          "profile-1": (sys.executable, "-c", BACKEND)})
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
