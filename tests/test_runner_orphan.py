"""A runner whose manager stays silent past what the manager would still accept (its lease
plus ``SVC_RUNNER_START_S``) ends its job, backend included, instead of running on for
nobody: a ``kill -9`` of the manager leaves no runner or backend behind for good."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx

from tests.conftest import SERVER_PIDS, running_api
from tests.support import TASKS, task_body

SILENCE = {"SVC_RUNNER_LEASE_S": "2", "SVC_RUNNER_START_S": "1",
           "SVC_RUNNER_HEARTBEAT_S": "0.5"}


def descendants(pid: int) -> set[int]:
    """The live processes below ``pid`` (children, their children, …)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


async def test_a_runner_whose_manager_is_gone_ends_its_backend_and_itself(
    database_url: str, tmp_path: Path
) -> None:
    jobs = tmp_path / "data" / "jobs"
    async with running_api(database_url, tmp_path, SILENCE) as base:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            task = (await http.post(TASKS, json=task_body(
                payload={"prompt": "sleep: 120"}))).json()
            answer = await http.post(f"{TASKS}/{task['taskId']}/dispatch", json={})
            assert answer.status_code == 200, answer.text
        deadline = time.monotonic() + 60
        while not list(jobs.glob("*/pid")):
            assert time.monotonic() < deadline, "the runner never claimed"
            await asyncio.sleep(0.1)
        (pid_file,) = jobs.glob("*/pid")
        runner = int(pid_file.read_text())
        while not any(b"reference_backend" in Path(f"/proc/{child}/cmdline").read_bytes()
                      for child in descendants(runner) if alive(child)):
            assert time.monotonic() < deadline, "the backend never started"
            await asyncio.sleep(0.1)
        below = descendants(runner)
        await asyncio.sleep(2)  # beats answered: the runner is well
        assert alive(runner), (pid_file.parent / "runner.log").read_text()
        os.kill(SERVER_PIDS[base], signal.SIGKILL)
        gone_by = time.monotonic() + 60
        while alive(runner) or any(alive(child) for child in below):
            assert time.monotonic() < gone_by, "the runner or its backend runs on"
            await asyncio.sleep(0.2)
    log = (pid_file.parent / "runner.log").read_text()
    assert "the runner stops its job: no answer from the manager" in log, log
