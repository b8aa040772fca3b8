"""Event types of the task stream: frozen, tagged msgspec Structs stored forever.

Schema evolution: new fields get defaults; a field's type or a tag never changes; a changed
meaning gets a new event type.
"""

from __future__ import annotations

from typing import Any

import msgspec


class TaskSubmitted(msgspec.Struct, frozen=True, tag="task-submitted", tag_field="type"):
    """A task entered a queue; ``contract`` is the redacted submitted body."""

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


class TaskReadCursorAdvanced(
    msgspec.Struct, frozen=True, tag="task-read-cursor-advanced", tag_field="type"
):
    """A reader has seen the task up to ``version``."""

    reader_id: str
    version: int


class TaskCancelled(msgspec.Struct, frozen=True, tag="task-cancelled", tag_field="type"):
    """The task was cancelled by hand."""

    reason: str | None = None


TaskEvent = TaskSubmitted | TaskReadCursorAdvanced | TaskCancelled

TASK_CHANGING_EVENTS: tuple[type[msgspec.Struct], ...] = (TaskSubmitted, TaskCancelled)
"""Events that change the task itself (bump ``version``); a read changes only a cursor."""

EVENT_TYPES: dict[type[Any], str] = {
    TaskSubmitted: "task-submitted",
    TaskReadCursorAdvanced: "task-read-cursor-advanced",
    TaskCancelled: "task-cancelled",
}

event_encoder = msgspec.json.Encoder()
task_event_decoder = msgspec.json.Decoder(TaskEvent)


def event_type_of(event: msgspec.Struct) -> str:
    """The stored tag of an event."""
    return EVENT_TYPES[type(event)]
