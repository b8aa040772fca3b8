"""The README's "Trying it" block, run top to bottom against a fresh ``svc serve``: every
command exits 0. The reader's ids (``tsk_…``, ``run_…``) are the ones the commands made."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import running_api

ROOT = Path(__file__).resolve().parent.parent
TASK_ID = re.compile(r"\btsk_[0-9a-z]{10,}\b")


def try_it_commands() -> list[str]:
    """The shell commands of the block under "## Trying it", one entry per command (a
    quoted argument may span lines)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Trying it", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    commands: list[str] = []
    pending = ""
    for line in block.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending = f"{pending}\n{line}" if pending else line
        if pending.count("'") % 2 == 0:
            commands.append(pending)
            pending = ""
    assert not pending, pending
    return commands


def wait_for_the_run(base: str, task_id: str) -> tuple[str, str]:
    """What a reader does before ``refresh``: wait until the runner job has ended (its
    session's output is no longer running: the runner reported its exit); the run's and the
    attempt's ids."""
    task = httpx.get(f"{base}/api/v1/queue/tasks/{task_id}").json()
    latest = task["latestAttempt"]
    output = f"{base}/api/v1/sessions/{latest['sessionId']}/output"
    deadline = time.monotonic() + 60
    while httpx.get(output).json()["running"]:
        assert time.monotonic() < deadline, task
        time.sleep(0.2)
    return str(latest["runId"]), str(latest["attemptId"])


def test_the_block_has_the_commands_it_promises() -> None:
    commands = try_it_commands()
    assert commands[0].startswith("echo '") and "svc queue submit" in commands[0]
    assert any("svc ledger replay --verify" in c for c in commands)
    assert len(commands) >= 14


async def test_every_command_of_the_try_it_block_runs(database_url: str,
                                                      tmp_path: Path) -> None:
    async with running_api(database_url, tmp_path) as base:
        env = {**os.environ, "SVC_API_URL": base, "SVC_DATABASE_URL": database_url,
               "SVC_DATA_DIR": str(tmp_path / "data"), "NO_COLOR": "1",
               "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
        task_id = run_id = attempt_id = ""
        for command in try_it_commands():
            if "svc queue refresh" in command:
                run_id, attempt_id = wait_for_the_run(base, task_id)
            line = (command.replace("tsk_…", task_id).replace("run_…", run_id)
                    .replace("att_…", attempt_id))
            done = subprocess.run(["bash", "-c", line], env=env, cwd=tmp_path,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, (line, done.stdout, done.stderr)
            if not task_id:
                found = TASK_ID.search(done.stdout)
                assert found, done.stdout
                task_id = found.group(0)
        task = httpx.get(f"{base}/api/v1/queue/tasks/{task_id}").json()
        assert task["state"] in ("pending", "running", "failed")
        attempts = httpx.get(f"{base}/api/v1/queue/tasks/{task_id}/attempts").json()
        assert [a["retryIndex"] for a in attempts["items"]] == [0, 1]
