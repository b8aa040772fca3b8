"""Task summary projection: one row per task, folded from the task stream."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from ledger import events as ev
from ledger.states import TaskStatus
from ledger.streams import RecordedEntry
from ledger.task import STREAM_TYPE as TASK_STREAM
from ledger.task import attempt_state_after, task_state_after
from projections.projection import Fold, Merge, Projection, Rows

SESSION_PATH = "/api/v1/sessions/{}"


class TaskSummaryRow(ev.TaskPlace, frozen=True):
    """A row of ``task_summary``; field order is the column order (the place fields first)."""

    state: TaskStatus
    backend_profile: str | None
    summary: str
    version: int
    change_seq: int
    payload_hash: str
    latest_attempt: dict[str, Any] | None
    session_path: str | None
    creator: str
    created_at: datetime
    updated_at: datetime


class ContractRow(msgspec.Struct, frozen=True):
    """A row of ``task_contract``: the contract a task was submitted with, never changed."""

    task_id: str
    contract: dict[str, Any]




def evolve(row: TaskSummaryRow | None, entry: RecordedEntry) -> TaskSummaryRow | None:
    """Fold one task-stream entry into the summary row (reads leave it unchanged)."""
    event = entry.event
    kind = type(event)
    if kind is ev.TaskSubmitted:
        assert isinstance(event, ev.TaskSubmitted)
        return TaskSummaryRow(
            task_id=event.task_id, tenant_id=event.tenant_id, project_id=event.project_id,
            queue=event.queue, lane=event.lane, title=event.title, priority=event.priority,
            state=task_state_after(TaskStatus.PENDING, event),
            backend_profile=event.backend_profile,
            summary="submitted; waiting for dispatch", version=1, change_seq=entry.change_seq,
            payload_hash=event.payload_hash, latest_attempt=None,
            session_path=None, creator=event.creator, created_at=entry.recorded_at,
            updated_at=entry.recorded_at,
        )
    if row is None or kind is ev.TaskReadCursorAdvanced:
        return row
    assert isinstance(event, ev.TaskEvent), "a task-stream fold"
    changed = {"version": row.version + 1, "change_seq": entry.change_seq,
               "updated_at": entry.recorded_at, "state": task_state_after(row.state, event)}
    if kind is ev.TaskCancelled:
        assert isinstance(event, ev.TaskCancelled)
        summary = f"cancelled: {event.reason}" if event.reason else "cancelled"
        return msgspec.structs.replace(row, summary=summary,
                                       latest_attempt=_latest(row, event), **changed)
    if kind is ev.AttemptReserved:
        assert isinstance(event, ev.AttemptReserved)
        attempt = {
            "attemptId": event.attempt_id, "retryIndex": event.retry_index,
            "state": attempt_state_after(None, event), "runId": event.run_id,
            "commandId": event.command_id,
            "runnerJobId": event.runner_job_id, "sessionId": event.session_id,
            "sessionPath": SESSION_PATH.format(event.session_id),
            "failureKind": None, "failureMessage": None,
        }
        # A task recorded before submit fixed its profile takes the one its attempt runs on.
        return msgspec.structs.replace(
            row, latest_attempt=attempt, session_path=attempt["sessionPath"],
            backend_profile=row.backend_profile or event.backend_profile,
            summary=f"attempt {event.retry_index} reserved; creating its runner job",
            **changed)
    assert row.latest_attempt is not None, "attempt event before task-attempt-reserved"
    if kind is ev.AttemptMaterialized:
        return msgspec.structs.replace(
            row, latest_attempt=_latest(row, event, failureKind=None, failureMessage=None),
            summary=f"running (attempt {row.latest_attempt['retryIndex']})", **changed)
    if kind is ev.AttemptMaterializationFailed:
        assert isinstance(event, ev.AttemptMaterializationFailed)
        return msgspec.structs.replace(
            row, latest_attempt=_latest(row, event, failureKind=event.failure_kind,
                                        failureMessage=event.failure_message),
            summary=f"runner job not created: {event.failure_kind}", **changed)
    assert isinstance(event, ev.AttemptFinished)
    detail = event.failure_kind or (f"exit code {event.exit_code}"
                                    if event.exit_code else "")
    summary = event.outcome + (f": {detail}" if detail else "")
    return msgspec.structs.replace(
        row, latest_attempt=_latest(row, event, failureKind=event.failure_kind,
                                    failureMessage=event.failure_message),
        summary=summary, **changed)


def _latest(row: TaskSummaryRow, event: Any, **fields: Any) -> dict[str, Any] | None:
    """The latest attempt after an event: changed only when the event concerns it (a cancel
    concerns the latest attempt; an attempt event, the attempt it names)."""
    attempt = row.latest_attempt
    if attempt is None or getattr(event, "attempt_id", attempt["attemptId"]) != \
            attempt["attemptId"]:
        return attempt
    return {**attempt, "state": attempt_state_after(attempt["state"], event), **fields}


def _stream_row(entry: RecordedEntry, _rows: Rows) -> str:
    return entry.stream_id


def _contract(_row: ContractRow | None, entry: RecordedEntry) -> ContractRow:
    event = entry.event
    assert isinstance(event, ev.TaskSubmitted)
    return ContractRow(entry.stream_id, event.contract)


TASKS = Projection("task_summary", TaskSummaryRow, key=("task_id",), origin=Fold(
    TASK_STREAM, _stream_row, evolve, created_by=frozenset({ev.TaskSubmitted})))
CONTRACTS = Projection("task_contract", ContractRow, key=("task_id",), merge=Merge.KEEP,
                       origin=Fold(TASK_STREAM, _stream_row, _contract,
                                   events=frozenset({ev.TaskSubmitted}),
                                   created_by=frozenset({ev.TaskSubmitted})))
PROJECTIONS = (TASKS, CONTRACTS)
COLUMNS = TASKS.columns
