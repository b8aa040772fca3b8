"""The runner smoke check (SPEC 8): required tools on the backend's PATH, checked fast."""

from __future__ import annotations

import shutil

from ledger.states import FailureKind
from runner_assembly.assembly.failures import AssemblyFailure


def smoke_check(tools: list[str], path: str, tools_bundle: bool) -> list[dict[str, object]]:
    """Each required tool with whether it was found; ``infra-failed`` if any is missing."""
    bundle_tools: tuple[str, ...] = ()
    if tools_bundle:  # defaults load msgspec: a job without a tools bundle starts without it
        from runner_assembly.assembly.defaults import TOOLS_BUNDLE_SMOKE_TOOLS

        bundle_tools = TOOLS_BUNDLE_SMOKE_TOOLS
    wanted = list(dict.fromkeys([*tools, *bundle_tools]))
    found = [{"name": tool, "found": shutil.which(tool, path=path) is not None}
             for tool in wanted]
    missing = [str(t["name"]) for t in found if not t["found"]]
    if missing:
        raise AssemblyFailure(FailureKind.INFRA_FAILED,
                              f"smoke check: missing tools {', '.join(missing)}",
                              details={"missing": missing})
    return found
