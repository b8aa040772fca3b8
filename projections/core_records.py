"""Core-layer projections: run, command and runner-job records, folded from the run stream.

One fold row per run carries all three; the writer stores each in its own table.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import msgspec

from ledger.events import (
    RunAssembled,
    RunCreated,
    RunFinished,
    RunIdentity,
    RunnerJobCreated,
    RunnerStarted,
)
from ledger.run import STREAM_TYPE as RUN_STREAM
from ledger.states import RunStatus
from ledger.streams import RecordedEntry
from projections.projection import Derived, Fold, Projection, Rows


class RunRow(RunIdentity, frozen=True):
    """The folded state of one run, its command and its runner job (identities first)."""

    status: RunStatus
    exit_code: int | None
    failure_kind: str | None
    failure_message: str | None
    driver: str | None
    handle: str | None
    resource_bundle_ref: dict[str, object] | None
    prompt_sha256: str
    prompt_bytes: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    change_seq: int
    job_plan: dict[str, object] | None = None
    assembly: dict[str, object] | None = None
    base: dict[str, object] | None = None
    runner_startup: dict[str, object] | None = None
    """The runner's startup event: its work-ready capability summary."""


class CommandRow(msgspec.Struct, frozen=True):
    """A row of ``command_record``, derived from its run."""

    command_id: str
    run_id: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    change_seq: int


class JobRow(msgspec.Struct, frozen=True):
    """A row of ``runner_job_record``, derived from its run."""

    runner_job_id: str
    run_id: str
    driver: str | None
    handle: str | None
    status: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    change_seq: int


def evolve(row: RunRow | None, entry: RecordedEntry) -> RunRow | None:
    """Fold one run-stream entry."""
    event, at, seq = entry.event, entry.recorded_at, entry.change_seq
    kind = type(event)
    if kind is RunCreated:
        assert isinstance(event, RunCreated)
        return RunRow(
            run_id=event.run_id, task_id=event.task_id, attempt_id=event.attempt_id,
            command_id=event.command_id, runner_job_id=event.runner_job_id,
            session_id=event.session_id, conversation_id=event.conversation_id,
            backend_profile=event.backend_profile, status=RunStatus.CREATED, exit_code=None,
            failure_kind=None, failure_message=None, driver=None, handle=None,
            resource_bundle_ref=event.resource_bundle_ref, prompt_sha256=event.prompt_sha256,
            prompt_bytes=event.prompt_bytes, created_at=at, started_at=None,
            finished_at=None, change_seq=seq, base=event.base,
        )
    if row is None:
        return None
    if kind is RunnerJobCreated:
        assert isinstance(event, RunnerJobCreated)
        return msgspec.structs.replace(row, status=RunStatus.RUNNING, driver=event.driver,
                                       handle=event.handle, started_at=at, change_seq=seq,
                                       job_plan=event.plan)
    if kind is RunAssembled:
        assert isinstance(event, RunAssembled)
        return msgspec.structs.replace(row, assembly=event.assembly, change_seq=seq)
    if kind is RunnerStarted:
        assert isinstance(event, RunnerStarted)
        return msgspec.structs.replace(row, runner_startup=event.capability, change_seq=seq)
    assert isinstance(event, RunFinished)
    return msgspec.structs.replace(row, status=event.status, exit_code=event.exit_code,
                                   failure_kind=event.failure_kind,
                                   failure_message=event.failure_message, finished_at=at,
                                   change_seq=seq)


def _commands(_before: RunRow | None, row: RunRow) -> Iterator[CommandRow]:
    """The ``command_record`` row of a run (a session run has no first command)."""
    if row.command_id:
        yield CommandRow(row.command_id, row.run_id, row.status, row.created_at,
                         row.finished_at, row.change_seq)


def _jobs(_before: RunRow | None, row: RunRow) -> Iterator[JobRow]:
    """The ``runner_job_record`` row of a run (none for a session run, as its command)."""
    if row.command_id:
        yield JobRow(row.runner_job_id, row.run_id, row.driver, row.handle, row.status,
                     row.created_at, row.started_at, row.finished_at, row.change_seq)


def _run_key(entry: RecordedEntry, _rows: Rows) -> str:
    return entry.stream_id


RUNS = Projection("run_record", RunRow, key=("run_id",), origin=Fold(
    RUN_STREAM, _run_key, evolve, created_by=frozenset({RunCreated})))
COMMANDS = Projection("command_record", CommandRow, key=("command_id",),
                      origin=Derived(RUNS, _commands))
JOBS = Projection("runner_job_record", JobRow, key=("runner_job_id",),
                  origin=Derived(RUNS, _jobs))
PROJECTIONS = (RUNS, COMMANDS, JOBS)
