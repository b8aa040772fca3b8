"""The backend's run inside a runner job: the prompt on its standard input, its output and
errors relayed masked by value into the runner's scratch files (which the shipper sends)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from runner_assembly.assembly.names import CHANNEL_FILES
from runner_assembly.runner.masking import Masker, Relays


def run_relayed(command: Sequence[str], cwd: Path, env: dict[str, str], scratch: Path,
                masker: Masker,
                started: Callable[[subprocess.Popen[bytes]], object] | None = None,
                ) -> tuple[int, datetime]:
    """Run ``command`` in ``cwd`` with ``scratch/prompt.txt`` as its input; its output goes
    masked to the scratch output channel, its errors to ``stderr.log``. ``started`` is told
    the process once it runs. Its exit code and when it ended (UTC); ``OSError``
    when it cannot start."""
    with (scratch / "prompt.txt").open("rb") as stdin, \
            (scratch / CHANNEL_FILES["output"]).open("wb") as stdout, \
            (scratch / "stderr.log").open("wb") as stderr, \
            subprocess.Popen(command, cwd=cwd, stdin=stdin, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env) as backend:
        if started is not None:
            started(backend)
        assert backend.stdout is not None and backend.stderr is not None
        relays = Relays([(backend.stdout, stdout), (backend.stderr, stderr)], masker)
        code = backend.wait()
        finished = datetime.now(UTC)
        relays.join()
    return code, finished
