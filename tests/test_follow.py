"""`svc sessions output --follow`: every line once, in order, across a restart of the server,
ending when the turn ends."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import free_port, running_api, svc_executable
from tests.support import TEST_ADMIN_KEY
from tests.test_cli import svc

LINES = 40


def follower(api: str, session_id: str, folder: Path) -> subprocess.Popen[bytes]:
    """``svc sessions output SESSION --follow`` against ``api``; its stdout and stderr go to
    ``folder/out`` and ``folder/err``."""
    env = {"PATH": os.environ.get("PATH", ""), "SVC_API_URL": api, "SVC_TOKEN": TEST_ADMIN_KEY}
    with (folder / "out").open("wb") as out, (folder / "err").open("wb") as err:
        return subprocess.Popen([svc_executable(), "sessions", "output", session_id,
                                 "--follow"], stdout=out, stderr=err, env=env)


async def test_follow_prints_each_line_once_across_a_server_restart(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()  # the restarted server answers where the runner reports
    async with running_api(database_url, tmp_path, None, port) as api:
        sent = svc("sessions", "send", "--prompt", f"lines: {LINES}\npace: 0.25", api=api)
        assert sent.returncode == 0, sent.stderr
        session = sent.stdout.split("session=")[1].split()[0]
        follow = follower(api, session, tmp_path)
        deadline = time.monotonic() + 60
        while "line 3\n" not in (tmp_path / "out").read_text():  # following, then the
            assert time.monotonic() < deadline and follow.poll() is None  # server goes away
            await asyncio.sleep(0.05)
    await asyncio.sleep(1)  # a poll or more finds nobody there
    async with running_api(database_url, tmp_path, None, port):
        try:
            await asyncio.to_thread(follow.wait, 120)
        finally:
            if follow.poll() is None:
                follow.send_signal(signal.SIGKILL)
    out, errors = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert follow.returncode == 0, (out, errors)
    printed = [line for line in out.splitlines() if line.startswith("line ")]
    assert printed == [f"line {n}" for n in range(1, LINES + 1)], (out, errors)
    assert out.splitlines()[-1].startswith(f"(end: svc sessions output {session}")
    assert "does not answer; still following" in errors
    assert len(errors.strip().splitlines()) == 1, errors


async def test_follow_of_an_unknown_session_is_refused_at_once(served_api: str,
                                                               tmp_path: Path) -> None:
    follow = follower(served_api, "ses_nope", tmp_path)
    assert await asyncio.to_thread(follow.wait, 60) == 1
    assert (tmp_path / "err").read_text().startswith("error: not-found")
