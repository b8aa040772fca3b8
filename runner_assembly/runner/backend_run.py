"""The backend's run inside a runner job: the prompt on its standard input, its output and
errors relayed masked by value into the runner's scratch files (which the shipper sends as
the output channel's ``stdout`` and ``stderr`` streams), both within the turn's one bound
(:mod:`runner_assembly.runner.output_bound`)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from runner_assembly.assembly.names import CHANNEL_FILES, STDERR_FILE
from runner_assembly.runner.masking import Masker, Relays
from runner_assembly.runner.output_bound import Bounded, Tally


class Relayed(NamedTuple):
    """How the backend's run ended: its exit code, when (UTC), and its bounded output and
    errors (what each dropped past the bound)."""

    code: int
    finished: datetime
    output: Bounded
    errors: Bounded


def run_relayed(command: Sequence[str], cwd: Path, env: dict[str, str], scratch: Path,
                masker: Masker, max_bytes: int,
                started: Callable[[subprocess.Popen[bytes]], object] | None = None,
                written: Callable[[], object] | None = None) -> Relayed:
    """Run ``command`` in ``cwd`` with ``scratch/prompt.txt`` as its input; its output goes
    masked to the scratch output channel, its errors to ``stderr.log``, together at most
    ``max_bytes``. ``started`` is told the process once it runs, ``written`` each time a
    line reaches a scratch file. ``OSError`` when it cannot start."""
    with (scratch / "prompt.txt").open("rb") as stdin, \
            (scratch / CHANNEL_FILES["output"]).open("wb") as stdout, \
            (scratch / STDERR_FILE).open("wb") as stderr, \
            subprocess.Popen(command, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env) as backend:
        if started is not None:
            started(backend)
        assert backend.stdout is not None and backend.stderr is not None
        tally = Tally()
        output = Bounded(stdout, max_bytes, tally=tally)
        errors = Bounded(stderr, max_bytes, with_notice=False, tally=tally)
        relays = Relays([(backend.stdout, output), (backend.stderr, errors)], masker,
                        written)
        code = backend.wait()
        finished = datetime.now(UTC)
        relays.join()
    return Relayed(code, finished, output, errors)


TAIL_LINES = 20
TAIL_BYTES = 2048
FAILURE_ROOM = 500
"""A failure message is stored as one line of at most 500 characters (the attempt's
``failureMessage``): the tail of the errors is cut from its front to fit."""


def failure_with_errors(message: str, scratch: Path) -> str:
    """``message`` followed by the last lines of the backend's (masked) standard error: at
    most :data:`TAIL_LINES` lines of its last :data:`TAIL_BYTES` bytes, joined by `` | ``
    and cut from the front so that the whole fits in :data:`FAILURE_ROOM` characters."""
    try:
        with (scratch / STDERR_FILE).open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(size - TAIL_BYTES, 0))
            data = handle.read(TAIL_BYTES)
    except FileNotFoundError:
        return message
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > TAIL_BYTES and len(lines) > 1:
        lines = lines[1:]  # the first one is cut
    said = [" ".join(line.split()) for line in lines]
    tail = " | ".join([line for line in said if line][-TAIL_LINES:])
    if not tail:
        return message
    head = f"{message}; its standard error ended with: "
    room = FAILURE_ROOM - len(head)
    return head + (tail if len(tail) <= room else "…" + tail[-(room - 1):])
