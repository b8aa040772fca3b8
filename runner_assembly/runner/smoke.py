"""The runner smoke check (SPEC 8): required tools on the backend's PATH, checked fast.

SPEC 8's list is every tool of the runner image (``bun``, ``node``, ``npm``, ``git``,
``ssh``, the code-host CLI, ``rg``, ``curl``, ``kubectl``) and, once a tools bundle is
assembled, ``tran``, ``trans`` and ``apply_patch``.
"""

from __future__ import annotations

import shutil

from ledger.states import FailureKind
from runner_assembly.assembly.failures import AssemblyFailure


def probe(tools: list[str], path: str, tools_bundle: bool) -> list[dict[str, object]]:
    """Each required tool, in order, with whether it is on ``path``."""
    bundle_tools: tuple[str, ...] = ()
    if tools_bundle:  # defaults load the manifest model: a job without a tools bundle skips it
        from runner_assembly.assembly.defaults import TOOLS_BUNDLE_SMOKE_TOOLS

        bundle_tools = TOOLS_BUNDLE_SMOKE_TOOLS
    wanted = list(dict.fromkeys([*tools, *bundle_tools]))
    return [{"name": tool, "found": shutil.which(tool, path=path) is not None}
            for tool in wanted]


def require(found: list[dict[str, object]], gaps: list[dict[str, object]]) -> None:
    """Fail fast: ``infra-failed`` (SPEC 7) when a base tool is missing, else
    ``capability-gap`` (SPEC 5.2 rule 7) when only shell capabilities are."""
    missing = [str(t["name"]) for t in found if not t["found"]]
    gap_tools = {str(g["tool"]) for g in gaps}
    base = [name for name in missing if name not in gap_tools]
    if base:
        raise AssemblyFailure(FailureKind.INFRA_FAILED,
                              f"smoke check: missing tools {', '.join(missing)}",
                              details={"missing": missing, **({"capabilityGaps": gaps}
                                                              if gaps else {})})
    if gaps:
        named = ", ".join(sorted({f"{g['capability']} ({g['tool']})" for g in gaps}))
        raise AssemblyFailure(FailureKind.CAPABILITY_GAP,
                              f"assembly capability gap: {named} missing from the runtime",
                              details={"capabilityGaps": gaps})

