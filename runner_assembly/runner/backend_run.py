"""The backend's run inside a runner job: the prompt on its standard input, its output and
errors relayed masked by value into the runner's scratch files (which the shipper sends),
each within the turn's bound (:mod:`runner_assembly.runner.output_bound`)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from runner_assembly.assembly.names import CHANNEL_FILES
from runner_assembly.runner.masking import Masker, Relays
from runner_assembly.runner.output_bound import Bounded


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
                ) -> Relayed:
    """Run ``command`` in ``cwd`` with ``scratch/prompt.txt`` as its input; its output goes
    masked to the scratch output channel, its errors to ``stderr.log``, each at most
    ``max_bytes``. ``started`` is told the process once it runs. ``OSError`` when it cannot
    start."""
    with (scratch / "prompt.txt").open("rb") as stdin, \
            (scratch / CHANNEL_FILES["output"]).open("wb") as stdout, \
            (scratch / "stderr.log").open("wb") as stderr, \
            subprocess.Popen(command, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env) as backend:
        if started is not None:
            started(backend)
        assert backend.stdout is not None and backend.stderr is not None
        output = Bounded(stdout, max_bytes)
        errors = Bounded(stderr, max_bytes, with_notice=False)
        relays = Relays([(backend.stdout, output), (backend.stderr, errors)], masker)
        code = backend.wait()
        finished = datetime.now(UTC)
        relays.join()
    return Relayed(code, finished, output, errors)
