"""The work-ready capability summary (SPEC 2.11): versions and names, never values.

The manager's summary (health, dry-run, dispatch) names the tools of its own host; the
runner's startup event names the tools it finds on the PATH its backend starts with.
"""

from __future__ import annotations

import functools
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable

from ledger.version import VERSION

DEPENDENCY_POLICY = ("service dependencies are fixed at install time; runs never install "
                     "base tools")
MAX_TOOLS = 32
"""At most this many tools are listed: the summary is bounded."""
MAX_VERSION_CHARS = 64
VERSION_ARGS = {"ssh": ("-V",), "kubectl": ("version", "--client")}
"""How a tool that has no ``--version`` reports its version."""
_VERSION = re.compile(r"\d+(?:\.\d+)+[0-9A-Za-z.+~-]*|\d+")


def tool_version(tool: str, path: str | None = None) -> str | None:
    """The version a tool on ``path`` reports (None when it is absent or says none)."""
    program = shutil.which(tool, path=path)
    if program is None:
        return None
    try:
        out = subprocess.run([program, *VERSION_ARGS.get(tool, ("--version",))],
                             capture_output=True, text=True, timeout=5,
                             env={"PATH": path or "", "LANG": "C.UTF-8"})
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return None
    found = _VERSION.search(out.stdout + "\n" + out.stderr)
    return found.group(0)[:MAX_VERSION_CHARS] if found else None


def summary(tools: list[dict[str, str | None]]) -> dict[str, object]:
    """The SPEC 2.11 shape: version, tool names and versions, dependency policy,
    ``valuesPrinted=false``; nothing else."""
    return {"version": VERSION, "tools": tools[:MAX_TOOLS], "dependencyPolicy": DEPENDENCY_POLICY,
            "valuesPrinted": False}


@functools.cache
def work_ready_summary() -> dict[str, object]:
    """The manager's summary: its Python and git."""
    return summary([{"name": "python", "version": platform.python_version()},
                    {"name": "git", "version": tool_version("git")}])


def runner_startup_summary(
        tools: Iterable[str], path: str,
        version_of: Callable[[str, str], str | None] = tool_version) -> dict[str, object]:
    """The runner's startup summary: each tool of ``tools`` found on ``path`` with its
    version from ``version_of`` (a tool that is absent is not work-ready and is not
    listed)."""
    listed: list[dict[str, str | None]] = [{"name": "python",
                                            "version": platform.python_version()}]
    for tool in dict.fromkeys(tools):
        if len(listed) >= MAX_TOOLS:
            break
        if shutil.which(tool, path=path) is not None:
            listed.append({"name": tool, "version": version_of(tool, path)})
    return summary(listed)


def startup_record(reported: object) -> dict[str, object] | None:
    """What a runner reported at startup, cut to the SPEC 2.11 fields and their bounds (the
    manager records this, never the raw report); None when it is not a summary."""
    if not isinstance(reported, dict):
        return None
    tools = reported.get("tools")
    listed = [{"name": str(t.get("name"))[:MAX_VERSION_CHARS],
               "version": t["version"][:MAX_VERSION_CHARS]
               if isinstance(t.get("version"), str) else None}
              for t in (tools if isinstance(tools, list) else [])[:MAX_TOOLS]
              if isinstance(t, dict)]
    version, policy = reported.get("version"), reported.get("dependencyPolicy")
    return {"version": str(version)[:MAX_VERSION_CHARS] if version is not None else None,
            "tools": listed,
            "dependencyPolicy": str(policy)[:256] if policy is not None else None,
            "valuesPrinted": False}
