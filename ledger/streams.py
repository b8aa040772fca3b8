"""What the event store needs to know about a kind of stream, and the recorded entry type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import ModuleType
from typing import Any, Protocol

import msgspec

from ledger import api_key, run, runner_job, session, task
from ledger.events import (
    LedgerEvent,
    api_key_event_decoder,
    run_event_decoder,
    runner_job_event_decoder,
    session_event_decoder,
    task_event_decoder,
)


class Command(Protocol):
    """Anything addressed to one stream."""

    @property
    def stream_id(self) -> str: ...


@dataclass(frozen=True)
class StreamKind:
    """The pure functions and decoder of one stream type."""

    stream_type: str
    decode: Callable[[str], LedgerEvent]
    decide: Callable[[Any, Any], list[Any]]
    evolve: Callable[[Any, Any], Any]


class RecordedEntry(msgspec.Struct, frozen=True):
    """One committed ledger entry with its decoded event."""

    change_seq: int
    stream_type: str
    stream_id: str
    stream_version: int
    event: LedgerEvent
    actor: str
    recorded_at: datetime


def _kind(module: ModuleType, decode: Callable[[str], LedgerEvent]) -> StreamKind:
    """The stream kind of a ledger module (``STREAM_TYPE``, ``decide``, ``evolve``)."""
    return StreamKind(stream_type=module.STREAM_TYPE, decode=decode, decide=module.decide,
                      evolve=module.evolve)


TASK_STREAM = _kind(task, task_event_decoder.decode)
RUN_STREAM = _kind(run, run_event_decoder.decode)
SESSION_STREAM = _kind(session, session_event_decoder.decode)
RUNNER_JOB_STREAM = _kind(runner_job, runner_job_event_decoder.decode)
API_KEY_STREAM = _kind(api_key, api_key_event_decoder.decode)

COMMAND_STREAMS: dict[type[Command], StreamKind] = {
    **{kind: TASK_STREAM for kind in task.TaskCommand.__args__},
    **{kind: RUN_STREAM for kind in run.RunCommand.__args__},
    **{kind: SESSION_STREAM for kind in session.SessionCommand.__args__},
    **{kind: RUNNER_JOB_STREAM for kind in runner_job.RunnerJobCommand.__args__},
    **{kind: API_KEY_STREAM for kind in api_key.ApiKeyCommand.__args__},
}
STREAM_KINDS: dict[str, StreamKind] = {
    k.stream_type: k for k in (TASK_STREAM, RUN_STREAM, SESSION_STREAM, RUNNER_JOB_STREAM,
                               API_KEY_STREAM)}


def stream_kind_for(command: Command) -> StreamKind:
    """The stream kind a command is addressed to."""
    return COMMAND_STREAMS[type(command)]
