"""The runner's startup event (SPEC 6): its work-ready capability summary (SPEC 2.11).

Built once, before assembly, from the tools on the PATH the backend starts with (the plan's
smoke-check list); the driver hands it to the manager next to the assembly event. The local
runner forkserver asks the base tools for their versions once, before it forks
(:func:`warm`); a runner started on its own asks them itself.
"""

from __future__ import annotations

from runner_assembly.assembly.capability import runner_startup_summary, tool_version
from runner_assembly.assembly.failures import MINIMAL_PATH
from runner_assembly.contract.plan import RunnerJobPlan

BASE_TOOLS = ("git",)
"""Always in the summary (the local driver's default smoke check)."""
KNOWN_VERSIONS: dict[str, str | None] = {}
"""Versions of tools on ``MINIMAL_PATH`` asked before this process forked (:func:`warm`)."""


def warm(tools: tuple[str, ...] = BASE_TOOLS) -> None:
    """Ask ``tools`` on ``MINIMAL_PATH`` for their versions now, for every runner forked
    from this process."""
    for tool in tools:
        KNOWN_VERSIONS[tool] = tool_version(tool, MINIMAL_PATH)


def _version(tool: str, path: str) -> str | None:
    if path == MINIMAL_PATH and tool in KNOWN_VERSIONS:
        return KNOWN_VERSIONS[tool]
    return tool_version(tool, path)


def startup_event(plan: RunnerJobPlan) -> dict[str, object]:
    """The summary this runner starts with: version, tools with versions, dependency policy,
    ``valuesPrinted=false``."""
    return runner_startup_summary([*BASE_TOOLS, *plan.smoke_tools], MINIMAL_PATH,
                                  _version)
