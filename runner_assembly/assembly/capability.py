"""The work-ready capability summary (SPEC 2.11): versions and names, never values."""

from __future__ import annotations

import functools
import platform
import shutil
import subprocess

from ledger.version import VERSION

DEPENDENCY_POLICY = ("service dependencies are fixed at install time; runs never install "
                     "base tools")


def _version_of(tool: str) -> str | None:
    if shutil.which(tool) is None:
        return None
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.stdout.split()
    return next((w for w in words if w[:1].isdigit()), None)


@functools.cache
def work_ready_summary() -> dict[str, object]:
    """Version, tool names and versions, dependency policy, ``valuesPrinted=false``."""
    tools: list[dict[str, str | None]] = [{"name": "python", "version": platform.python_version()}]
    for tool in ("git",):
        tools.append({"name": tool, "version": _version_of(tool)})
    return {"version": VERSION, "tools": tools, "dependencyPolicy": DEPENDENCY_POLICY,
            "valuesPrinted": False}
