"""`svc queue show ID --watch`: each new version of the task once, in changeSeq order, across
a restart of the server, ending when the task ends; Ctrl-C ends it cleanly."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import free_port, running_api, svc_executable
from tests.support import TEST_ADMIN_KEY
from tests.test_cli import submit, svc


def watcher(api: str, task_id: str, folder: Path, *options: str) -> subprocess.Popen[bytes]:
    """``svc queue show TASK --watch`` against ``api``; stdout and stderr go to
    ``folder/out`` and ``folder/err``."""
    env = {"PATH": os.environ.get("PATH", ""), "SVC_API_URL": api, "SVC_TOKEN": TEST_ADMIN_KEY}
    with (folder / "out").open("wb") as out, (folder / "err").open("wb") as err:
        return subprocess.Popen([svc_executable(), "queue", "show", task_id, "--watch",
                                 *options], stdout=out, stderr=err, env=env,
                                preexec_fn=as_from_a_shell)


def as_from_a_shell() -> None:
    """Ctrl-C as a user's shell leaves it to the command: the test process's own handling
    of SIGINT (ignored or blocked, inherited across exec) must not reach the watcher."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


async def until(done: Callable[[], bool], watch: subprocess.Popen[bytes]) -> None:
    """Wait (60 s at most) until ``done()`` while the watcher still runs."""
    deadline = time.monotonic() + 60
    while not done():
        assert time.monotonic() < deadline and watch.poll() is None
        await asyncio.sleep(0.05)


def states(folder: Path) -> list[str]:
    return [json.loads(line)["state"] for line in (folder / "out").read_text().splitlines()]


async def test_watch_prints_each_version_once_across_a_server_restart(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()  # the restarted server answers where the runner reports
    async with running_api(database_url, tmp_path, None, port) as api:
        task_id = submit(api, payload={"prompt": "lines: 3"})
        watch = watcher(api, task_id, tmp_path, "--raw")
        await until(lambda: states(tmp_path) == ["pending"], watch)
        assert svc("queue", "dispatch", task_id, api=api).returncode == 0
        await until(lambda: "running" in states(tmp_path), watch)
    await until(lambda: "does not answer" in (tmp_path / "err").read_text(), watch)
    async with running_api(database_url, tmp_path, None, port) as api:
        try:
            for _ in range(200):
                refreshed = svc("queue", "refresh", task_id, "--raw", api=api)
                if json.loads(refreshed.stdout)["state"] != "running":
                    break
            await asyncio.to_thread(watch.wait, 120)
        finally:
            if watch.poll() is None:
                watch.send_signal(signal.SIGKILL)
        final = json.loads(svc("queue", "show", task_id, "--raw", api=api).stdout)
    out, errors = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert watch.returncode == 0, (out, errors)
    versions = [json.loads(line) for line in out.splitlines()]
    seqs = [version["changeSeq"] for version in versions]
    assert seqs == sorted(set(seqs)), f"a version printed twice or out of order: {seqs}"
    printed = [version["state"] for version in versions]
    assert printed[0] == "pending" and "running" in printed, printed
    assert versions[-1] == final and final["state"] == "completed", out
    assert "does not answer; still following from changeSeq" in errors
    assert len(errors.strip().splitlines()) == 1, errors


async def test_watch_ends_on_ctrl_c_with_130_and_no_traceback(served_api: str,
                                                              tmp_path: Path) -> None:
    task_id = submit(served_api)
    watch = watcher(served_api, task_id, tmp_path)
    await until(lambda: "pending" in (tmp_path / "out").read_text(), watch)
    first = (tmp_path / "out").read_text().splitlines()
    assert len(first) == 1 and task_id in first[0] and "changeSeq " in first[0], first
    watch.send_signal(signal.SIGINT)
    assert await asyncio.to_thread(watch.wait, 60) == 130
    errors = (tmp_path / "err").read_text()
    assert "Traceback" not in errors
    assert errors.startswith("warning: stopped; continue from changeSeq"), errors


async def test_watch_of_a_cancelled_task_prints_it_and_ends(served_api: str,
                                                             tmp_path: Path) -> None:
    task_id = submit(served_api)
    assert svc("queue", "cancel", task_id, api=served_api).returncode == 0
    watch = watcher(served_api, task_id, tmp_path)
    assert await asyncio.to_thread(watch.wait, 60) == 0
    lines = (tmp_path / "out").read_text().splitlines()
    assert "cancelled" in lines[0] and lines[-1].startswith(f"(end: {task_id} is cancelled")


async def test_watch_of_an_unknown_task_is_refused_at_once(served_api: str,
                                                          tmp_path: Path) -> None:
    watch = watcher(served_api, "tsk_nope", tmp_path)
    assert await asyncio.to_thread(watch.wait, 60) == 1
    assert (tmp_path / "err").read_text().startswith("error: not-found")
