"""Attempt summary projection: the formal attempt history, one row per attempt."""

from __future__ import annotations

from datetime import datetime
from typing import get_args

import msgspec

from ledger.events import (
    AttemptFinished,
    AttemptMaterializationFailed,
    AttemptMaterialized,
    AttemptReserved,
    TaskCancelled,
    TaskEvent,
    TokenUsage,
    reported_time,
)
from ledger.states import AttemptStatus
from ledger.streams import RecordedEntry
from ledger.task import STREAM_TYPE as TASK_STREAM
from ledger.task import attempt_state_after
from projections.projection import Fold, Projection, Rows
from projections.task_summary import TASKS

USAGE_COLUMNS = ("input_tokens", "cached_input_tokens", "output_tokens",
                 "reasoning_output_tokens")
"""The token counts of an attempt (:class:`ledger.events.TokenUsage`'s fields)."""


class AttemptRow(msgspec.Struct, frozen=True):
    """A row of ``attempt_summary``; field order is the column order."""

    attempt_id: str
    task_id: str
    retry_index: int
    state: AttemptStatus
    idempotency_key: str | None
    reason: str | None
    previous_attempt_id: str | None
    run_id: str
    command_id: str
    runner_job_id: str
    session_id: str
    backend_profile: str
    failure_kind: str | None
    failure_message: str | None
    exit_code: int | None
    change_seq: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    input_tokens: int | None = None
    cached_input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_output_tokens: int | None = None
    """The token usage its job reported (docs/backends.md); None when it reported none."""




def attempt_id_of(entry: RecordedEntry) -> str | None:
    """The attempt an entry is about, if any (cancel: resolved by the caller)."""
    return getattr(entry.event, "attempt_id", None)


def evolve(row: AttemptRow | None, entry: RecordedEntry) -> AttemptRow | None:
    """Fold one task-stream entry into the row of the attempt it concerns."""
    event, at, seq = entry.event, entry.recorded_at, entry.change_seq
    if isinstance(event, AttemptReserved):
        return AttemptRow(
            attempt_id=event.attempt_id, task_id=entry.stream_id,
            retry_index=event.retry_index, state=AttemptStatus.RESERVED,
            idempotency_key=event.idempotency_key, reason=event.reason,
            previous_attempt_id=event.previous_attempt_id, run_id=event.run_id,
            command_id=event.command_id, runner_job_id=event.runner_job_id,
            session_id=event.session_id, backend_profile=event.backend_profile,
            failure_kind=None, failure_message=None, exit_code=None, change_seq=seq,
            created_at=at, started_at=None, finished_at=None, updated_at=at,
        )
    if row is None:
        return None
    assert isinstance(event, TaskEvent), "a task-stream fold"
    state = attempt_state_after(row.state, event)
    if isinstance(event, AttemptMaterialized):
        return msgspec.structs.replace(row, state=state, failure_kind=None,
                                       failure_message=None, started_at=at,
                                       change_seq=seq, updated_at=at)
    if isinstance(event, AttemptMaterializationFailed):
        return msgspec.structs.replace(row, state=state, failure_kind=event.failure_kind,
                                       failure_message=event.failure_message,
                                       change_seq=seq, updated_at=at)
    if isinstance(event, AttemptFinished):  # the job's own times, not the refresh's
        return msgspec.structs.replace(row, state=state, failure_kind=event.failure_kind,
                                       failure_message=event.failure_message,
                                       exit_code=event.exit_code,
                                       started_at=reported_time(event.started_at) or row.started_at,
                                       finished_at=reported_time(event.finished_at) or at,
                                       change_seq=seq, updated_at=at, **_usage(event))
    if isinstance(event, TaskCancelled) and state != row.state:
        return msgspec.structs.replace(row, state=state, finished_at=at,
                                       change_seq=seq, updated_at=at)
    return row


def _usage(event: AttemptFinished) -> dict[str, int | None]:
    """The usage columns an ended attempt takes: its job's reported counts, else none."""
    usage = event.usage
    if not isinstance(usage, TokenUsage):
        return dict.fromkeys(USAGE_COLUMNS)
    return {name: getattr(usage, name) for name in USAGE_COLUMNS}


def _attempt_key(entry: RecordedEntry, rows: Rows) -> tuple[str, str] | None:
    """The (task, attempt) an entry is about; a cancel is about the task's latest attempt."""
    attempt_id = attempt_id_of(entry)
    if attempt_id is None and type(entry.event) is TaskCancelled:
        task = rows.of(TASKS).get(entry.stream_id)
        attempt = task.latest_attempt if task is not None else None
        attempt_id = attempt["attemptId"] if attempt else None
    return None if attempt_id is None else (entry.stream_id, attempt_id)


# The task-stream events that name an attempt, and the cancel that closes the latest one.
_EVENTS = frozenset({TaskCancelled, *(kind for kind in get_args(TaskEvent)
                                      if "attempt_id" in kind.__struct_fields__)})
# An attempt id is unique within its task only (SPEC 2.2): a caller may name the same id twice.
ATTEMPTS = Projection("attempt_summary", AttemptRow, key=("task_id", "attempt_id"), origin=Fold(
    TASK_STREAM, _attempt_key, evolve, events=_EVENTS,
    created_by=frozenset({AttemptReserved})))
PROJECTIONS = (ATTEMPTS,)
COLUMNS = ATTEMPTS.columns
