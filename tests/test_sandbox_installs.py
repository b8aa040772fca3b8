"""Backends installed the way real agents are (issue 27 item 5), run by the local driver
under bubblewrap through the real app: a program in a Python virtual environment, named by
a symbolic link outside it, runs (the sandbox shows its install root); a program the sandbox
cannot show fails before it starts, ``infra-failed``, naming the program and
``SVC_SANDBOX_READ_ONLY``; that setting shows an operator's directory to every backend."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.support import task_body, write_profile_secret
from tests.test_dispatch import TASKS, dispatch, settle
from tests.test_sessions import lines

TOOL = "#!/bin/sh\ncat \"$(dirname \"$0\")/data.txt\"\n"
"""A program that needs a file beside it (as an install needs its libraries)."""


def venv_agent(root: Path) -> Path:
    """A virtual environment under ``root`` whose ``bin/agent`` imports a module of its own
    ``site-packages``; a link to it in ``root/bin``, as an operator would name it."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "agentmod.py").write_text("def main():\n    print('agent ran from its venv')\n")
    agent = venv / "bin" / "agent"
    agent.write_text(f"#!{venv}/bin/python\nimport agentmod\nagentmod.main()\n")
    agent.chmod(0o755)
    link = root / "bin" / "agent"
    link.parent.mkdir()
    link.symlink_to("../venv/bin/agent")
    return link


def extra_tool(root: Path) -> Path:
    """``root/extra/tool`` and the data file it reads beside it."""
    tool = root / "extra" / "tool"
    tool.parent.mkdir(parents=True)
    tool.write_text(TOOL)
    tool.chmod(0o755)
    (tool.parent / "data.txt").write_text("the extra data\n")
    return tool


async def turn(client: Any, profile: str, session_id: str) -> dict[str, Any]:
    """One task on ``profile``: the settled task."""
    response = await client.post(TASKS, json=task_body(
        backendProfile=profile, sessionRef={"sessionId": session_id, "conversationId": "c"}))
    assert response.status_code == 201, response.text
    await dispatch(client, response.json()["taskId"])
    return await settle(client, response.json()["taskId"], timeout=60)


async def test_installs_run_and_an_invisible_program_fails_before_it_starts(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    for profile in ("profile-2", "profile-3"):
        write_profile_secret(runner_settings.data_dir, profile)
    tool = extra_tool(tmp_path)
    commands = {"profile-1": (str(venv_agent(tmp_path / "tools")),),
                "profile-2": (str(tmp_path / "missing" / "agent"),),
                "profile-3": (str(tool),)}
    settings = dataclasses.replace(
        runner_settings,
        backend_kinds={**runner_settings.backend_kinds, **dict.fromkeys(commands, "command")},
        backend_commands={**runner_settings.backend_commands, **commands})
    async with app_client(database_url, settings) as client:
        venv = await turn(client, "profile-1", "inst_venv")
        venv_output = await lines(client, "inst_venv")
        missing = await turn(client, "profile-2", "inst_missing")
        missing_trace = await lines(client, "inst_missing", "trace")
        hidden = await turn(client, "profile-3", "inst_hidden")
        hidden_output = await lines(client, "inst_hidden")
    shown = dataclasses.replace(settings, sandbox_read_only=(str(tool.parent),))
    async with app_client(database_url, shown) as client:
        extra = await turn(client, "profile-3", "inst_extra")
        extra_output = await lines(client, "inst_extra")
    assert venv["state"] == "completed", (venv, venv_output)
    assert "agent ran from its venv" in venv_output
    attempt = missing["latestAttempt"]
    assert (missing["state"], attempt["failureKind"]) == ("failed", "infra-failed"), missing
    assert f"the backend program {tmp_path}/missing/agent is not visible" in \
        attempt["failureMessage"]
    assert "SVC_SANDBOX_READ_ONLY" in attempt["failureMessage"]
    assert not any('"backend-start"' in line for line in missing_trace), "nothing started"
    assert hidden["state"] == "failed", "the tool alone is shown, not the data beside it"
    assert "the extra data" not in hidden_output
    assert extra["state"] == "completed", (extra, extra_output)
    assert "the extra data" in extra_output
