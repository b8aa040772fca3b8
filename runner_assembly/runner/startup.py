"""The runner's startup event (SPEC 6): its work-ready capability summary (SPEC 2.11).

Built once, before assembly, from the tools on the PATH the backend starts with (the plan's
smoke-check list); the driver hands it to the manager next to the assembly event.
"""

from __future__ import annotations

from runner_assembly.assembly.capability import runner_startup_summary
from runner_assembly.assembly.failures import MINIMAL_PATH
from runner_assembly.runner.jobspec import PlanSpec


def startup_event(plan: PlanSpec) -> dict[str, object]:
    """The summary this runner starts with: version, tools with versions, dependency policy,
    ``valuesPrinted=false``."""
    return runner_startup_summary(["git", *plan.get("smokeTools", [])], MINIMAL_PATH)
