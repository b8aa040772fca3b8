"""Whether the backend command can spawn in its workspace (SPEC 7).

A spawn that fails because of the workspace's form (no workspace directory, a
workspace-relative program that the checkout does not have or that is not executable) is a
runtime workspace/command consistency problem, ``workspace-command-inconsistent``: not a
queue dispatch or refresh failure, and not ``infra-failed``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from ledger.states import FailureKind
from runner_assembly.assembly.failures import AssemblyFailure


def isolated_python(roots: Sequence[str], module: str) -> list[str]:
    """A command line running ``runner_assembly.runner.<module>``'s ``main`` in an isolated
    interpreter without ``site`` (``-I -S``: no ``.pth`` import hooks, nothing from the
    environment; the installed packages' start-up hooks are most of a bare start), which
    imports from ``roots`` only."""
    return [sys.executable, "-I", "-S", "-c",
            f"import sys; sys.path[:0] = {list(roots)!r}; "
            f"from runner_assembly.runner.{module} import main; sys.exit(main())"]


def _inconsistent(message: str, workspace: Path, program: str) -> AssemblyFailure:
    return AssemblyFailure(FailureKind.WORKSPACE_COMMAND_INCONSISTENT, message,
                           details={"workspace": str(workspace), "program": program})


def check_backend_launch(command: Sequence[str], workspace: Path) -> None:
    """Raise ``workspace-command-inconsistent`` when ``command`` cannot start in
    ``workspace`` because of the workspace."""
    program = command[0] if command else ""
    if not workspace.is_dir():
        raise _inconsistent(f"the workspace {workspace} is not a directory: the backend "
                            f"command cannot run in it", workspace, program)
    if "/" in program and not PurePosixPath(program).is_absolute():
        target = workspace / program
        if not target.is_file():
            raise _inconsistent(f"the backend command {program} is not in the workspace "
                                f"checkout", workspace, program)
        if not os.access(target, os.X_OK):
            raise _inconsistent(f"the backend command {program} in the workspace is not "
                                f"executable", workspace, program)


def spawn_failure(error: OSError, command: Sequence[str], workspace: Path) -> AssemblyFailure:
    """Classify an ``OSError`` from spawning the backend: the workspace's form, or infra."""
    try:
        check_backend_launch(command, workspace)
    except AssemblyFailure as failure:
        return failure
    return AssemblyFailure(FailureKind.INFRA_FAILED,
                           f"backend command could not start: {error.strerror}")
