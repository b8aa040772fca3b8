"""The local driver's runner forkserver: a forked runner leads its own process group."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from runner_assembly.drivers import forkserver
from runner_assembly.drivers.local import boot_command, runner_args

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "SVC_RUNNER_API_URL": "http://127.0.0.1:9"}


def _end(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def test_a_forked_runner_has_its_session_before_its_pid_is_answered(tmp_path: Path) -> None:
    server = forkserver.Forkserver(boot_command("forkserver"), tmp_path / "home",
                                   tmp_path / "forkserver.log")
    pids = []
    try:
        for number in range(5):
            folder = tmp_path / f"job{number}"
            folder.mkdir()
            os.mkfifo(folder / "spec.json")  # the runner blocks reading it: it stays alive
            pid = server.spawn(folder, runner_args(folder, str(tmp_path), None),
                               {**ENV, "HOME": str(folder)})
            assert pid is not None, (tmp_path / "forkserver.log").read_text()
            pids.append(pid)
            assert os.getpgid(pid) == pid, "a killpg of the answered pid reaches the runner"
            assert os.getsid(pid) == pid
    finally:
        server.close()
        for pid in pids:
            _end(pid)


def test_a_hanging_forkserver_is_killed_after_the_short_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = forkserver.Forkserver(["sleep", "60"], tmp_path / "home",
                                   tmp_path / "forkserver.log")
    server._answered = True  # as if it had answered before: the short timeout applies
    monkeypatch.setattr(forkserver, "ANSWER_TIMEOUT_S", 0.2)
    try:
        started = time.monotonic()
        assert server.spawn(tmp_path, [], dict(ENV)) is None
        assert time.monotonic() - started < 3, "killed at once, not waited for"
        assert server._process is None
    finally:
        server.close()


def test_a_forked_runner_that_fails_leaves_its_traceback_and_ends(tmp_path: Path) -> None:
    # A forked runner ends with os._exit (no interpreter teardown): what it printed before
    # must still reach runner.log, and it must not linger.
    server = forkserver.Forkserver(boot_command("forkserver"), tmp_path / "home",
                                   tmp_path / "forkserver.log")
    folder = tmp_path / "job"
    folder.mkdir()  # no spec.json: the runner fails reading it
    try:
        pid = server.spawn(folder, runner_args(folder, str(tmp_path), None),
                           {**ENV, "HOME": str(folder)})
        assert pid is not None, (tmp_path / "forkserver.log").read_text()
        deadline = time.monotonic() + 20
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(pid)
    finally:
        server.close()
    log = (folder / "runner.log").read_text()
    assert "Traceback" in log and "FileNotFoundError" in log and "spec.json" in log, log


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(("ending", "code", "printed"), [
    (None, 0, ""), (SystemExit(None), 0, ""), (SystemExit(3), 3, ""),
    (SystemExit("stopped: no spec"), 1, "stopped: no spec"),
    (RuntimeError("boom"), 1, "RuntimeError: boom"),
])
def test_a_runner_exit_code_is_what_the_interpreter_would_make_of_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    ending: BaseException | None, code: int, printed: str,
) -> None:
    from runner_assembly.runner import forkserver as child
    from runner_assembly.runner import local

    def main(args: list[str]) -> int:
        if ending is not None:
            raise ending
        return 0

    monkeypatch.setattr(local, "main", main)
    assert child._run([]) == code
    assert printed in capsys.readouterr().err


def test_a_forked_runner_leaves_with_its_code_and_its_buffered_output(tmp_path: Path) -> None:
    from runner_assembly.runner import forkserver as child

    out = tmp_path / "runner.log"
    pid = os.fork()
    if pid == 0:  # the child: output still in a buffer when it leaves
        sys.stdout = open(out, "w", buffering=8192)  # noqa: SIM115
        print("written but not flushed")
        child._leave(3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 3
    assert out.read_text() == "written but not flushed\n"
