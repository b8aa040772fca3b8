"""The local driver's runner forkserver: one pre-started runner interpreter per driver.

A runner started from scratch spends most of its start-up in the interpreter and its imports
(docs/decisions.md, "Local runners forked from a pre-started runner"). The forkserver
(:mod:`runner_assembly.runner.forkserver`) is started once, lazily, with exactly the
runner's command line flags and environment, and forks a runner per job. It changes nothing
of what a runner may do: the claim stays the only gate of a job's start, and a create whose
forkserver fails falls back to starting the runner process directly.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import threading
from pathlib import Path

FIRST_ANSWER_TIMEOUT_S = 30.0
"""How long the first fork request of a forkserver started for it waits for its pid (this
includes the forkserver's imports)."""
ANSWER_TIMEOUT_S = 5.0
"""How long a fork request to a forkserver that answered before waits for its pid (a fork
takes milliseconds): one that hangs is killed and the runner started directly."""


class Forkserver:
    """Forks local runners from one pre-started runner interpreter; thread-safe."""

    def __init__(self, command: list[str], home: Path, log: Path) -> None:
        """``command``: the forkserver's command line; ``home``: its working directory and
        ``HOME``; ``log``: its standard error."""
        self.command = command
        self.home = home
        self.log = log
        self.env: dict[str, str] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._answered = False
        """Whether the running forkserver answered a request (its imports are done)."""
        self._lock = threading.Lock()

    def spawn(self, folder: Path, args: list[str], env: dict[str, str]) -> int | None:
        """Fork a runner for ``folder`` with ``args`` and ``env`` (``HOME`` is the folder);
        its pid, or None when the forkserver cannot (the caller then starts it itself)."""
        request = json.dumps({"folder": os.path.abspath(folder), "args": args}).encode()
        with self._lock:
            try:
                process = self._running(env)
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write(request + b"\n")
                process.stdin.flush()
                timeout = ANSWER_TIMEOUT_S if self._answered else FIRST_ANSWER_TIMEOUT_S
                pid = int(_line(process.stdout.fileno(), timeout))
            except (OSError, ValueError, EOFError):
                self._stop(kill=True)  # it may be stuck: do not wait for it
                return None
            self._answered = True
            return pid or None

    def _running(self, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """The forkserver for ``env`` (started now if it is not running with it)."""
        base = {name: value for name, value in env.items() if name != "HOME"}
        if self._process is not None and (self._process.poll() is not None
                                          or self.env != base):
            self._stop()
        if self._process is None:
            self.home.mkdir(parents=True, exist_ok=True)
            with self.log.open("ab") as log:
                self._process = subprocess.Popen(
                    self.command, env={**base, "HOME": str(self.home)}, cwd=self.home,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                    start_new_session=True, close_fds=True)
            self.env = base
        return self._process

    def _stop(self, kill: bool = False) -> None:
        """End the forkserver (runners it forked run on); ``kill``: at once, not at the end
        of its input."""
        process, self._process = self._process, None
        self._answered = False
        if process is None:
            return
        if kill:
            process.kill()
        if process.stdin is not None:
            with contextlib.suppress(OSError):  # a broken pipe when it died
                process.stdin.close()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()

    def close(self) -> None:
        """Stop the forkserver."""
        with self._lock:
            self._stop()


def _line(descriptor: int, timeout_s: float) -> bytes:
    """One answer line read straight from ``descriptor`` (no read-ahead buffer)."""
    answer = b""
    while not answer.endswith(b"\n"):
        ready, _, _ = select.select([descriptor], [], [], timeout_s)
        if not ready:
            raise TimeoutError("the runner forkserver did not answer")
        chunk = os.read(descriptor, 64)
        if not chunk:
            raise EOFError("the runner forkserver ended")
        answer += chunk
    return answer
