"""The ``svc`` program: one App per command group, registered at the root.

Only the group a command line names is imported (``svc queue list`` never loads the server,
the database driver or the manifest tools): start-up is most of a client command's time.
The common reads do not even load cyclopts: :mod:`cli.fast` parses them, and hands anything
else (help, errors, completion, every other command) to the App built here.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING

from cli import fast

if TYPE_CHECKING:
    from cyclopts import App

GROUPS = {
    "serve": ("cli.serve", "serve"),
    "queue": ("cli.queue_cmd", "queue_app"),
    "runs": ("cli.runs_cmd", "runs_app"),
    "sessions": ("cli.sessions_cmd", "sessions_app"),
    "db": ("cli.admin", "db_app"),
    "ledger": ("cli.admin", "ledger_app"),
    "manifest": ("cli.manifest_cmd", "manifest_app"),
    "auth": ("cli.auth_cmd", "auth_app"),
    "completion": ("cli.completion", "completion"),
}
"""Each root command: the module and attribute that define it, in help order."""

EXIT_USAGE = 2
"""Exit status of a command line the program cannot parse (README: 1 refused, 2 usage,
3 unreachable)."""


def build(names: list[str] | None = None) -> App:
    """The root App with the named root commands (all of them by default)."""
    from cyclopts import App

    from ledger.version import VERSION

    app = App(
        name="svc",
        help="Task queue and runtime-assembly service for coding-agent execution.\n\n"
             "Start the service with `svc serve`, then use `svc queue …` and `svc sessions …` "
             "against it.",
        version=VERSION,
        help_format="plaintext",
    )
    for name in names or list(GROUPS):
        module, attribute = GROUPS[name]
        app.command(getattr(importlib.import_module(module), attribute))
    return app


def wanted(argv: list[str]) -> list[str] | None:
    """The one root command ``argv`` names, or None (help, version, a typo: load them all)."""
    return [argv[0]] if argv and argv[0] in GROUPS else None


def run() -> None:
    """Entry point of the ``svc`` console script."""
    argv = sys.argv[1:]
    try:
        result = fast.attempt(argv)
        if result is None:
            result = parsed(argv)
        sys.stdout.flush()
    except BrokenPipeError:  # `svc queue list | head`: the reader left; end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    sys.exit(result)


def parsed(argv: list[str]) -> int:
    """Run ``argv`` through cyclopts; its exit status (2 for a line it cannot parse)."""
    from cyclopts import CycloptsError

    try:
        result = build(wanted(argv))(argv, exit_on_error=False)
    except CycloptsError:  # already printed by cyclopts: an unknown command, option or value
        return EXIT_USAGE
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    run()
