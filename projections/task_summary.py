"""Task summary projection: one row per task, folded from the task stream."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from ledger.events import TaskCancelled, TaskReadCursorAdvanced, TaskSubmitted
from ledger.streams import RecordedEntry
from ledger.task import CANCELLED, PENDING


class TaskSummaryRow(msgspec.Struct, frozen=True):
    """A row of ``task_summary``; field order is the column order."""

    task_id: str
    tenant_id: str
    project_id: str
    queue: str
    lane: str
    title: str
    priority: int
    state: str
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


COLUMNS = tuple(TaskSummaryRow.__struct_fields__)


def evolve(row: TaskSummaryRow | None, entry: RecordedEntry) -> TaskSummaryRow | None:
    """Fold one task-stream entry into the summary row (reads leave it unchanged)."""
    event = entry.event
    kind = type(event)
    if kind is TaskSubmitted:
        assert isinstance(event, TaskSubmitted)
        return TaskSummaryRow(
            task_id=event.task_id, tenant_id=event.tenant_id, project_id=event.project_id,
            queue=event.queue, lane=event.lane, title=event.title, priority=event.priority,
            state=PENDING, backend_profile=event.backend_profile,
            summary="submitted; waiting for dispatch", version=1, change_seq=entry.change_seq,
            payload_hash=event.payload_hash, latest_attempt=None,
            session_path=None, creator=event.creator, created_at=entry.recorded_at,
            updated_at=entry.recorded_at,
        )
    if row is None or kind is TaskReadCursorAdvanced:
        return row
    if kind is TaskCancelled:
        assert isinstance(event, TaskCancelled)
        summary = f"cancelled: {event.reason}" if event.reason else "cancelled"
        return msgspec.structs.replace(
            row, state=CANCELLED, summary=summary, version=row.version + 1,
            change_seq=entry.change_seq, updated_at=entry.recorded_at,
        )
    return row
