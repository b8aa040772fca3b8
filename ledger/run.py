"""The run stream of the core layer: a run, its command and its runner job, for one attempt.

Every command here is idempotent: recording what is already recorded appends nothing, so a
crashed or concurrent materialisation can be replayed safely.
"""

from __future__ import annotations

import msgspec

from ledger import events as ev
from ledger.addressed import Addressed
from ledger.errors import NotFound
from ledger.states import RunStatus

STREAM_TYPE = "run"


class _OnRun(msgspec.Struct, Addressed, frozen=True):
    run_id: str


class CreateRun(ev.NewRun, Addressed, frozen=True):
    """Create the core run, command and runner-job identity of an attempt (once)."""


class RecordRunnerJob(_OnRun, frozen=True):
    """The driver created or adopted the runner job."""

    driver: str
    handle: str
    plan: dict[str, object] | None = None


class RecordAssembly(_OnRun, frozen=True):
    """The runner reported its assembly event (recorded once)."""

    assembly: dict[str, object]


class RecordRunnerStartup(_OnRun, frozen=True):
    """The runner reported its startup event (recorded once)."""

    capability: dict[str, object]


class FinishRun(_OnRun, frozen=True):
    """The run reached a terminal status."""

    end: ev.RunEnd


RunCommand = CreateRun | RecordRunnerJob | RecordAssembly | RecordRunnerStartup | FinishRun


class RunState(msgspec.Struct, frozen=True):
    """What ``decide`` needs to know about a run."""

    run_id: str
    runner_job_id: str
    job_recorded: bool = False
    assembled: bool = False
    status: RunStatus | None = None
    started: bool = False
    """The runner's startup event is recorded."""


def decide(state: RunState | None, command: RunCommand) -> list[ev.RunEvent]:
    """Events for a run command; repeated records are no-ops."""
    if isinstance(command, CreateRun):
        if state is not None:
            return []
        return [ev.RunCreated(**msgspec.structs.asdict(command))]
    if state is None:
        raise NotFound(f"run {command.run_id} not found", runId=command.run_id)
    if isinstance(command, RecordRunnerJob):
        if state.job_recorded:
            return []
        return [ev.RunnerJobCreated(state.runner_job_id, command.driver, command.handle,
                                    command.plan)]
    if isinstance(command, RecordAssembly):
        return [] if state.assembled else [ev.RunAssembled(command.assembly)]
    if isinstance(command, RecordRunnerStartup):
        return [] if state.started else [ev.RunnerStarted(command.capability)]
    if state.status is not None:
        return []
    return [ev.RunFinished(**msgspec.structs.asdict(command.end))]


def evolve(state: RunState | None, event: ev.RunEvent) -> RunState:
    """Fold one run event."""
    if isinstance(event, ev.RunCreated):
        return RunState(run_id=event.run_id, runner_job_id=event.runner_job_id)
    assert state is not None, "event before run-created"
    if isinstance(event, ev.RunnerJobCreated):
        return msgspec.structs.replace(state, job_recorded=True)
    if isinstance(event, ev.RunAssembled):
        return msgspec.structs.replace(state, assembled=True)
    if isinstance(event, ev.RunnerStarted):
        return msgspec.structs.replace(state, started=True)
    return msgspec.structs.replace(state, status=event.status)
