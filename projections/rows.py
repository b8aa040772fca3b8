"""Row types of the read queries: msgspec Structs with camelCase names, mapped to wire types
by `api/views.py`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from ledger.states import (
    AttemptStatus,
    RunStatus,
    SessionStatus,
    StorageKind,
    TaskStatus,
    TurnStatus,
)

JsonObject = dict[str, Any]


class TaskHead(msgspec.Struct, rename="camel", frozen=True):
    """The fields every view of a task starts with."""

    task_id: str
    tenant_id: str
    project_id: str
    queue: str
    lane: str
    title: str
    priority: int
    state: TaskStatus
    backend_profile: str | None
    summary: str
    version: int
    change_seq: int
    latest_attempt: JsonObject | None


class TaskItemRow(TaskHead, frozen=True, kw_only=True):
    """A task as a list page holds it."""

    created_at: datetime
    updated_at: datetime


class CommanderHead(msgspec.Struct, rename="camel", frozen=True):
    """What the commander view shows of a task."""

    task_id: str
    queue: str
    lane: str
    title: str
    state: TaskStatus
    version: int


class CommanderRow(CommanderHead, frozen=True, kw_only=True):
    """A task of the commander view; ``unread`` is None without a reader."""

    change_seq: int
    latest_attempt: JsonObject | None
    unread: bool | None


class StatsCounter(msgspec.Struct, rename="camel", frozen=True):
    """One counter of ``queue_stats``."""

    queue: str
    lane: str
    state: TaskStatus
    backend_profile: str | None
    count: int


class RunnerJobHead(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """A run's record with its job plan, assembly event and attempt state."""

    run_id: str
    task_id: str
    attempt_id: str
    attempt_state: AttemptStatus | None
    runner_job_id: str
    session_id: str
    backend_profile: str
    driver: str | None
    status: RunStatus
    exit_code: int | None
    failure_kind: str | None
    failure_message: str | None
    plan: JsonObject | None
    assembly: JsonObject | None
    runner_startup: JsonObject | None = None
    """The runner's startup event: its work-ready capability summary (SPEC 2.11, 6)."""


class RunView(RunnerJobHead, frozen=True, kw_only=True):
    """A run's runner job as read, with the high-water mark."""

    change_seq: int


class ReservedRun(msgspec.Struct, rename="camel", frozen=True):
    """The attempt a run id was reserved for."""

    task_id: str
    attempt_id: str
    state: AttemptStatus


class SessionHead(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """A session as the list shows it, with ``unread`` for the reader."""

    session_id: str
    conversation_id: str
    thread_id: str | None
    backend_profile: str
    state: SessionStatus
    unread: bool
    storage_kind: StorageKind
    latest_run_id: str | None
    latest_task_id: str | None
    turns: int
    failure_kind: str | None
    version: int
    change_seq: int
    expires_at: datetime
    updated_at: datetime


class StorageFields(msgspec.Struct, rename="camel", frozen=True):
    """The storage fields of SPEC 2.6, as the runner last summarised them."""

    storage_kind: StorageKind
    pvc_name: str | None
    pvc_phase: str | None
    storage_size_bytes: int | None
    storage_files_count: int | None
    storage_sha256: str | None
    storage_updated_at: datetime | None
    expires_at: datetime


class SessionView(SessionHead, frozen=True, kw_only=True):
    """One session: the list fields, its current run and its storage summary."""

    run_id: str | None
    storage: StorageFields


class TurnFields(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    """One command of a run in a session and its runner job."""

    run_id: str
    command_id: str
    runner_job_id: str
    task_id: str | None
    thread_id: str | None
    resumed: bool
    status: TurnStatus
    failure_kind: str | None
    exit_code: int | None
    created_at: datetime
    finished_at: datetime | None


class JudgeRunRow(msgspec.Struct, rename="camel", frozen=True):
    """A row of ``judge_run``; field order is the column order (camelCase on the wire)."""

    task_id: str
    judge_id: str
    attempt_id: str
    judge: str
    result: str
    failure_kind: str | None
    retry_suggested: bool
    retry_reason: str | None
    summary: str | None
    request: JsonObject
    change_seq: int
    created_at: datetime
