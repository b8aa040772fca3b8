"""What the event store needs to know about a kind of stream, and the recorded entry type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import msgspec

from ledger import task
from ledger.events import task_event_decoder


class Command(Protocol):
    """Anything addressed to one stream."""

    @property
    def stream_id(self) -> str: ...


@dataclass(frozen=True)
class StreamKind:
    """The pure functions and decoder of one stream type."""

    stream_type: str
    decode: Callable[[str], Any]
    decide: Callable[[Any, Any], list[Any]]
    evolve: Callable[[Any, Any], Any]


class RecordedEntry(msgspec.Struct, frozen=True):
    """One committed ledger entry with its decoded event."""

    change_seq: int
    stream_type: str
    stream_id: str
    stream_version: int
    event: Any
    actor: str
    recorded_at: datetime


TASK_STREAM = StreamKind(
    stream_type=task.STREAM_TYPE,
    decode=task_event_decoder.decode,
    decide=task.decide,
    evolve=task.evolve,
)

COMMAND_STREAMS: dict[type[Any], StreamKind] = {
    task.SubmitTask: TASK_STREAM,
    task.CancelTask: TASK_STREAM,
    task.MarkTaskRead: TASK_STREAM,
}
STREAM_KINDS: dict[str, StreamKind] = {TASK_STREAM.stream_type: TASK_STREAM}


def stream_kind_for(command: Command) -> StreamKind:
    """The stream kind a command is addressed to."""
    return COMMAND_STREAMS[type(command)]
