"""The documented shapes of the answers' nested objects that the wire types carry as plain
JSON objects (``contract``, ``workReady``, the runner job's ``plan`` and ``runnerStartup``,
a dry run's ``plan``, a judge's ``request``, a runner's ``assembly``, an error's ``details``).

The answers keep those as the JSON they were stored as, so the bytes on the wire do not
change; :func:`api.openapi.complete` documents each property with the schema named here,
which a client generator turns into a typed object.
"""

from __future__ import annotations

from typing import Any

import msgspec

from api import wire
from runner_assembly.contract.plan import RunnerJobPlan


class ToolVersion(msgspec.Struct, kw_only=True):
    """A tool found on the PATH and the version it reports (null when it reports none)."""

    name: str
    version: str | None


class WorkReady(msgspec.Struct, kw_only=True, rename="camel"):
    """The work-ready capability summary (SPEC 2.11): versions and names, never values. A
    runner's startup summary may lack a ``version`` or ``dependencyPolicy`` (null)."""

    version: str | None
    tools: list[ToolVersion]
    dependency_policy: str | None
    values_printed: bool


class DryRunPlan(msgspec.Struct, kw_only=True, rename="camel"):
    """What a mutation would do, changing nothing. A task command names its ``command``,
    the task's state and version before and after, and the events it would append; a
    session command names its ``operation`` and ``sessionId``; a batch lists each item's
    plan in ``items``; a dispatch, retry or command adds its runner job's plan. Other
    members are the command's own (for example ``idempotentReplay``)."""

    command: str | None = None
    operation: str | None = None
    task_id: str | None = None
    session_id: str | None = None
    state_before: str | None = None
    state_after: str | None = None
    version_before: int | None = None
    version_after: int | None = None
    events: list[str] | None = None
    items: list[DryRunPlan] | None = None


JSON_OBJECT = "JsonObject"
"""A free-form JSON object (``api.openapi.FREE_FORM``): what a judge was asked, what a
runner reported of its assembly."""

TYPED: dict[tuple[str, str], object] = {
    ("TaskDetail", "contract"): wire.SubmitBody,
    ("TaskDetail", "workReady"): WorkReady,
    ("Health", "workReady"): WorkReady,
    ("RunnerJob", "plan"): RunnerJobPlan,
    ("RunnerJob", "runnerStartup"): WorkReady,
    ("RunnerJob", "assembly"): JSON_OBJECT,
    ("DryRun", "plan"): DryRunPlan,
    ("JudgeRun", "request"): JSON_OBJECT,
    ("ErrorBody", "details"): dict[str, Any],
}
"""Each (answer schema, property) documented with a type (or a named free-form schema).
An error's ``details`` may echo what the request sent, so it is any object."""

DESCRIPTIONS: dict[tuple[str, str], str] = {
    ("TaskDetail", "contract"): "The submitted body, as stored (absent fields stay absent).",
    ("RunnerJob", "assembly"): "The runner's bounded assembly event (SPEC 6): its steps, "
                               "image, projected secrets by name, failure; as the runner "
                               "reported it.",
    ("JudgeRun", "request"): "What the judge was asked, as recorded.",
    ("ErrorBody", "details"): "Facts of the error by name (ids, the field at fault, limits).",
}
