"""The ``svc`` program: one App per command group, registered at the root."""

from __future__ import annotations

import os
import sys

from cyclopts import App, CycloptsError

from cli.admin import db_app, ledger_app
from cli.manifest_cmd import manifest_app
from cli.queue_cmd import queue_app
from cli.runs_cmd import runs_app
from cli.serve import serve
from cli.sessions_cmd import sessions_app
from ledger.version import VERSION

app = App(
    name="svc",
    help="Task queue and runtime-assembly service for coding-agent execution.\n\n"
         "Start the service with `svc serve`, then use `svc queue …` and `svc sessions …` "
         "against it.",
    version=VERSION,
    help_format="plaintext",
)
app.command(serve)
app.command(queue_app)
app.command(runs_app)
app.command(sessions_app)
app.command(db_app)
app.command(ledger_app)
app.command(manifest_app)


EXIT_USAGE = 2
"""Exit status of a command line the program cannot parse (README: 1 refused, 2 usage,
3 unreachable)."""


def run() -> None:
    """Entry point of the ``svc`` console script."""
    try:
        result = app(exit_on_error=False)
        sys.stdout.flush()
    except CycloptsError:  # already printed by cyclopts: an unknown command, option or value
        sys.exit(EXIT_USAGE)
    except BrokenPipeError:  # `svc queue list | head`: the reader left; end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    run()
