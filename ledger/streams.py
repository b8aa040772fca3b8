"""What the event store needs to know about a kind of stream, and the recorded entry type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import msgspec

from ledger import run, runner_job, session, task
from ledger.events import (
    LedgerEvent,
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


TASK_STREAM = StreamKind(
    stream_type=task.STREAM_TYPE,
    decode=task_event_decoder.decode,
    decide=task.decide,
    evolve=task.evolve,
)

RUN_STREAM = StreamKind(
    stream_type=run.STREAM_TYPE,
    decode=run_event_decoder.decode,
    decide=run.decide,
    evolve=run.evolve,
)

SESSION_STREAM = StreamKind(
    stream_type=session.STREAM_TYPE,
    decode=session_event_decoder.decode,
    decide=session.decide,
    evolve=session.evolve,
)

RUNNER_JOB_STREAM = StreamKind(
    stream_type=runner_job.STREAM_TYPE,
    decode=runner_job_event_decoder.decode,
    decide=runner_job.decide,
    evolve=runner_job.evolve,
)

COMMAND_STREAMS: dict[type[Command], StreamKind] = {
    **{kind: TASK_STREAM for kind in task.TaskCommand.__args__},
    **{kind: RUN_STREAM for kind in run.RunCommand.__args__},
    **{kind: SESSION_STREAM for kind in session.SessionCommand.__args__},
    **{kind: RUNNER_JOB_STREAM for kind in runner_job.RunnerJobCommand.__args__},
}
STREAM_KINDS: dict[str, StreamKind] = {
    k.stream_type: k for k in (TASK_STREAM, RUN_STREAM, SESSION_STREAM, RUNNER_JOB_STREAM)}


def stream_kind_for(command: Command) -> StreamKind:
    """The stream kind a command is addressed to."""
    return COMMAND_STREAMS[type(command)]
