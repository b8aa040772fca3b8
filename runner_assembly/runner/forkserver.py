"""A pre-started runner interpreter that forks one local runner per job (local driver).

    python -I -S -c <boot> (started by :class:`runner_assembly.drivers.forkserver.Forkserver`)

It is started like a runner (isolated, no ``site``, the runner's minimal environment, a
session of its own), imports the runner once, and then reads requests from standard input,
one JSON line each: ``{"folder": <job dir>, "args": [<runner arguments>]}``. For each it
forks; once the child has its own session (it closes a pipe shared with the parent right
after ``setsid``, so a ``killpg`` of the pid reaches it from the first moment the server knows
it), the parent answers the child's pid on standard output (``0``: the fork failed) and
reaps nothing (``SIGCHLD`` is ignored, so ended runners never linger as zombies). The base
tools' versions of the startup event are asked once, before the first fork, and what is
loaded by then is frozen out of the garbage collector (``gc.freeze``), so a runner's
collections never touch, and copy, the pages it shares with the forkserver. The child
becomes exactly what a freshly started runner is: a new session, ``/dev/null`` as standard
input, ``runner.log`` as standard output and error, no other descriptor, the job directory as
working directory and ``HOME``, default ``SIGCHLD``; then it runs
:func:`runner_assembly.runner.local.main` and ends with ``os._exit`` (no interpreter teardown).
It holds no secret and no job state: a job's token, secrets and masks are read by its child
only. At end of input (the server closed the pipe or died) it exits; runners it forked run on.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import sys
import traceback
from typing import NoReturn

from runner_assembly.runner import local, startup

MAX_FD = os.sysconf("SC_OPEN_MAX")


def _become_runner(folder: str, session_made: int) -> None:
    """In the forked child: the process state a runner started by ``Popen`` would have;
    ``session_made`` is closed as soon as the child leads a process group of its own."""
    os.setsid()
    os.close(session_made)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    log = os.open(os.path.join(folder, "runner.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                  0o666)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, MAX_FD)
    os.chdir(folder)
    os.environ["HOME"] = folder


def _run(args: list[str]) -> int:
    """The runner's exit code, as the interpreter would make it of ``sys.exit`` or an
    uncaught exception (its traceback goes to ``runner.log``)."""
    try:
        return local.main(args)
    except SystemExit as leaving:
        code = leaving.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def _leave(code: int) -> NoReturn:
    """End a forked runner without the interpreter's teardown: freeing every object it
    shares with the forkserver would write to, and so copy, each of those pages, and
    collect them, for nothing (``multiprocessing`` ends its forked children alike). Its
    threads (heartbeats, line shipper) have stopped; only the standard streams hold
    buffered output."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def serve() -> None:
    """Fork a runner per request until end of input (a forked runner never returns)."""
    startup.warm()
    gc.freeze()  # what the runners share stays out of their collections: fewer copied pages
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    requests = sys.stdin.buffer
    answers = sys.stdout.buffer
    for line in iter(requests.readline, b""):
        request = json.loads(line)
        try:
            waiting, session_made = os.pipe()
        except OSError:
            answers.write(b"0\n")
            answers.flush()
            continue
        try:
            pid = os.fork()
        except OSError:
            pid = -1
        if pid == 0:
            os.close(waiting)
            _become_runner(request["folder"], session_made)
            _leave(_run(request["args"]))
        os.close(session_made)
        if pid > 0:  # end of file once the child ran setsid (or died before it)
            while os.read(waiting, 1):
                pass
        os.close(waiting)
        answers.write(b"%d\n" % max(pid, 0))
        answers.flush()


def main() -> int:
    """Entry point: serve until end of input (0); a forked runner leaves from :func:`serve`."""
    serve()
    return 0
