"""The task stream: commands, the decision state, and the pure ``decide``/``evolve`` pair."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from ledger.errors import InvalidTransition, NotFound
from ledger.events import (
    TASK_CHANGING_EVENTS,
    TaskCancelled,
    TaskEvent,
    TaskReadCursorAdvanced,
    TaskSubmitted,
)

STREAM_TYPE = "task"

PENDING, RUNNING, COMPLETED, FAILED, BLOCKED, CANCELLED = (
    "pending", "running", "completed", "failed", "blocked", "cancelled",
)
TASK_STATES = (PENDING, RUNNING, COMPLETED, FAILED, BLOCKED, CANCELLED)
CANCELLABLE = frozenset({PENDING, RUNNING, FAILED, BLOCKED})


class SubmitTask(msgspec.Struct, frozen=True):
    """Create a task from a validated, redacted contract."""

    task_id: str
    tenant_id: str
    project_id: str
    queue: str
    lane: str
    title: str
    priority: int
    backend_profile: str | None
    contract: dict[str, Any]
    payload_hash: str
    creator: str

    creates_stream: ClassVar[bool] = True
    """The task id is new: there is no stream to load (a clash fails on the unique key)."""

    @property
    def stream_id(self) -> str:
        return self.task_id


class CancelTask(msgspec.Struct, frozen=True):
    """Cancel a task by hand."""

    task_id: str
    reason: str | None = None

    @property
    def stream_id(self) -> str:
        return self.task_id


class MarkTaskRead(msgspec.Struct, frozen=True):
    """Advance a reader's cursor to the task's current version."""

    task_id: str
    reader_id: str

    @property
    def stream_id(self) -> str:
        return self.task_id


TaskCommand = SubmitTask | CancelTask | MarkTaskRead


class TaskState(msgspec.Struct, frozen=True):
    """What ``decide`` needs to know about one task stream."""

    task_id: str
    state: str
    version: int
    cursors: dict[str, int] = {}


def decide(state: TaskState | None, command: TaskCommand) -> list[TaskEvent]:
    """Return the events a command produces on the task, or raise a ``DomainError``."""
    if isinstance(command, SubmitTask):
        if state is not None:
            raise InvalidTransition("task already exists", taskId=command.task_id)
        return [TaskSubmitted(**msgspec.structs.asdict(command))]
    if state is None:
        raise NotFound(f"task {command.task_id} not found", taskId=command.task_id)
    if isinstance(command, CancelTask):
        if state.state not in CANCELLABLE:
            raise InvalidTransition(
                f"cannot cancel a {state.state} task", taskId=state.task_id, state=state.state
            )
        return [TaskCancelled(reason=command.reason)]
    if state.cursors.get(command.reader_id, 0) >= state.version:
        return []
    return [TaskReadCursorAdvanced(reader_id=command.reader_id, version=state.version)]


def evolve(state: TaskState | None, event: TaskEvent) -> TaskState:
    """Fold one event into the decision state."""
    if isinstance(event, TaskSubmitted):
        return TaskState(task_id=event.task_id, state=PENDING, version=1)
    assert state is not None, "event before task-submitted"
    version = state.version + 1 if isinstance(event, TASK_CHANGING_EVENTS) else state.version
    if isinstance(event, TaskCancelled):
        return msgspec.structs.replace(state, state=CANCELLED, version=version)
    cursors = {**state.cursors, event.reader_id: event.version}
    return msgspec.structs.replace(state, cursors=cursors)
