"""Task summary projection: one row per task, folded from the task stream."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec

from ledger import events as ev
from ledger.states import TaskStatus
from ledger.streams import RecordedEntry
from ledger.task import STREAM_TYPE as TASK_STREAM
from ledger.task import attempt_state_after, task_state_after
from projections.projection import Fold, Merge, Projection, Rows


class TaskSummaryRow(ev.TaskPlace, frozen=True):
    """A row of ``task_summary``; field order is the column order (the place fields first)."""

    state: TaskStatus
    backend_profile: str | None
    summary: str
    version: int
    change_seq: int
    payload_hash: str
    latest_attempt: dict[str, Any] | None
    creator: str
    created_at: datetime
    updated_at: datetime
    attempt_count: int
    """Statistic fields (SPEC 2.3): attempts reserved so far, and how long (ms, from its
    runner job's start to its end) the latest ended attempt that had started ran."""
    last_duration_ms: int | None
    latest_started_at: datetime | None
    """When the latest attempt's runner job started (the basis of ``last_duration_ms``)."""


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
            creator=event.creator, created_at=entry.recorded_at,
            updated_at=entry.recorded_at, attempt_count=0, last_duration_ms=None,
            latest_started_at=None,
        )
    if row is None or kind is ev.TaskReadCursorAdvanced:
        return row
    assert isinstance(event, ev.TaskEvent), "a task-stream fold"
    changed = {"version": row.version + 1, "change_seq": entry.change_seq,
               "updated_at": entry.recorded_at, "state": task_state_after(row.state, event)}
    if kind is ev.JudgeRecorded:
        return msgspec.structs.replace(row, **changed)
    if kind is ev.TaskCancelled:
        assert isinstance(event, ev.TaskCancelled)
        summary = f"cancelled: {event.reason}" if event.reason else "cancelled"
        latest = _latest(row, event)
        if row.latest_attempt is not None and latest is not None \
                and latest["state"] != row.latest_attempt["state"]:
            changed["last_duration_ms"] = _duration(row, entry)
        return msgspec.structs.replace(row, summary=summary, latest_attempt=latest, **changed)
    if kind is ev.AttemptReserved:
        assert isinstance(event, ev.AttemptReserved)
        attempt = {
            "attemptId": event.attempt_id, "retryIndex": event.retry_index,
            "state": attempt_state_after(None, event), "runId": event.run_id,
            "commandId": event.command_id,
            "runnerJobId": event.runner_job_id, "sessionId": event.session_id,
            "failureKind": None, "failureMessage": None,
        }
        # A task recorded before submit fixed its profile takes the one its attempt runs on.
        return msgspec.structs.replace(
            row, latest_attempt=attempt, attempt_count=row.attempt_count + 1,
            latest_started_at=None,
            backend_profile=row.backend_profile or event.backend_profile,
            summary=f"attempt {event.retry_index} reserved; creating its runner job",
            **changed)
    assert row.latest_attempt is not None, "attempt event before task-attempt-reserved"
    concerns_latest = getattr(event, "attempt_id", None) == row.latest_attempt["attemptId"]
    if kind is ev.AttemptMaterialized:
        if concerns_latest:
            changed["latest_started_at"] = entry.recorded_at
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
    if concerns_latest:
        changed["last_duration_ms"] = _duration(row, entry)
        began = ev.reported_time(event.started_at)
        if began is not None:  # the attempt's start is the backend's, as attempt_summary's
            changed["latest_started_at"] = began
    usage = ({"usage": _usage_object(event.usage)}
             if isinstance(event.usage, ev.TokenUsage) else {})
    return msgspec.structs.replace(
        row, latest_attempt=_latest(row, event, failureKind=event.failure_kind,
                                    failureMessage=event.failure_message, **usage),
        summary=summary, **changed)


def _usage_object(usage: ev.TokenUsage) -> dict[str, int]:
    """The ``usage`` a latest attempt keeps (camelCase, as the wire shows it)."""
    return {"inputTokens": usage.input_tokens, "cachedInputTokens": usage.cached_input_tokens,
            "outputTokens": usage.output_tokens,
            "reasoningOutputTokens": usage.reasoning_output_tokens}


def _duration(row: TaskSummaryRow, entry: RecordedEntry) -> int | None:
    """Whole milliseconds the latest attempt ran: the backend's own times when its job
    reported them, else from its runner job's start to this entry (an attempt that never
    started keeps the last duration of an earlier one)."""
    event = entry.event
    if isinstance(event, ev.AttemptFinished):
        began, ended = ev.reported_time(event.started_at), ev.reported_time(event.finished_at)
        if began is not None and ended is not None:
            return (ended - began) // timedelta(milliseconds=1)
    started = row.latest_started_at
    if started is None:
        return row.last_duration_ms
    return (entry.recorded_at - started) // timedelta(milliseconds=1)


def _latest(row: TaskSummaryRow, event: ev.TaskEvent,
            **fields: object) -> dict[str, object] | None:
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
