"""Wire types of the session API (SPEC 4.2)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from api.wire import Answer, BackendProfile, Camel, Identifier, Prompt, Reason
from ledger.states import SessionStatus, StorageKind, TurnStatus
from projections.rows import JsonObject
from runner_assembly.assembly import model
from runner_assembly.contract.messages import StorageSummaryBody as StorageSummaryBody
from runner_assembly.contract.messages import ThreadId

Stream = Literal["stdout", "stderr"]
"""The backend's stream an output line came from."""
SessionFilter = Literal["default", "running", "unread", "terminal", "idle", "all"]
CommandId = Annotated[str, Meta(min_length=4, max_length=128, pattern=r"^cmd_[A-Za-z0-9._:@-]*$")]


class RunBase(Camel, frozen=True):
    """What a session's run executes with (the assembly fields of a task contract)."""

    workspace_ref: model.WorkspaceRef | None = None
    resource_bundle_ref: model.ResourceBundleRef | None = None
    execution_policy: model.ExecutionPolicy | None = None
    metadata: JsonObject | None = None


class SessionCreateBody(Camel, frozen=True):
    """Body of ``POST /api/v1/sessions`` (may be empty)."""

    session_id: model.SessionId | None = None
    conversation_id: Identifier | None = None
    backend_profile: BackendProfile | None = None
    run_base: RunBase | None = None


class CommandPayload(Camel, frozen=True):
    """``payload`` of a command: the turn's prompt and, to resume a given thread, its id."""

    prompt: Prompt
    thread_id: ThreadId | None = None


class CommandBody(Camel, frozen=True):
    """Body of ``POST /api/v1/runs/{runId}/commands``."""

    payload: CommandPayload
    command_id: CommandId | None = None
    transient_env: model.TransientEnv | None = None


class SessionReadBody(Camel, frozen=True):
    """Body of ``POST …/read`` (may be empty: reader ``default``)."""

    reader_id: Identifier = "default"


class ControlBody(Camel, frozen=True):
    """Body of ``POST …/control``: conversation control."""

    action: Literal["cancel"]
    reason: Reason | None = None


class Storage(Answer, kw_only=True, frozen=True):
    """The storage fields of SPEC 2.6, as the runner last summarised them."""

    storage_kind: StorageKind
    pvc_name: str | None
    pvc_phase: str | None
    storage_size_bytes: int | None
    storage_files_count: int | None
    storage_sha256: str | None
    storage_updated_at: datetime | None
    expires_at: datetime


class Turn(Answer, kw_only=True, frozen=True):
    """One command of a run in the session and its runner job."""

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


class SessionItem(Answer, kw_only=True, frozen=True):
    """A session in a list, with ``unread`` for the reader."""

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


class SessionDetail(SessionItem, kw_only=True, frozen=True):
    """A session: identity, state, storage, recent turns and where its lines end."""

    run_id: str | None
    storage: Storage
    recent_turns: list[Turn]
    output_last_seq: int
    trace_last_seq: int
    reader_id: str
    session_path: str


class SessionList(msgspec.Struct, rename="camel"):
    """A page of sessions, newest change first."""

    items: list[SessionItem]
    next_cursor: str | None
    change_seq: int


class LineItem(msgspec.Struct, rename="camel"):
    """One output or trace line; ``stream``: the backend's stream of an output line
    (``stdout`` or ``stderr``; a trace line is ``stdout``); ``part`` of ``parts``: a piece
    of a line longer than 64 KiB (the pieces, concatenated in ``seq`` order, are the line;
    null for a whole line)."""

    seq: int
    runner_job_id: str
    line: str
    recorded_at: datetime
    stream: Stream = "stdout"
    part: int | None = None
    parts: int | None = None


class LinePage(msgspec.Struct, rename="camel"):
    """Lines after ``afterSeq``; ask again with ``nextAfterSeq`` for more."""

    session_id: str
    channel: str
    items: list[LineItem]
    next_after_seq: int
    last_seq: int
    running: bool


class CommandResult(msgspec.Struct, rename="camel", kw_only=True):
    """The turn a command started (or the one its ``commandId`` had started)."""

    session_id: str
    run_id: str
    command_id: str
    runner_job_id: str
    thread_id: str | None
    resumed: bool
    created: bool
    session_path: str
