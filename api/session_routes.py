"""The session API (SPEC 4.2): sessions, their output and trace, read cursors, conversation
control, storage summaries, and commands added to runs.

Reads come from the session projections and the session's own line store; they never touch
the queue's records and never write: lines and facts arrive from runners through the runner
protocol (``api/runner_routes.py``).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Response, get, post
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from api import examples, wire
from api import session_wire as sw
from api.access import RUNNER_TOO, role
from api.auth_principal import RUNNER
from api.body import convert, decode, read_body
from api.errors import OPENING_ERRORS, READ_ERRORS, WRITE_ERRORS, error_responses
from api.location import Located
from api.openapi import also_ok, body, command
from api.params import (
    AfterSeq,
    Caller,
    Cursor,
    DryRunFlag,
    HttpRequest,
    LineLimit,
    ProfileQuery,
    Reader,
    RunId,
    RunnerDep,
    SessionDep,
    SessionId,
    SessionLimit,
    SessionStateQuery,
)
from api.scoping import EVERYTHING
from api.services import DEFAULT_READER
from ledger.errors import InvalidRequest
from ledger.states import SessionFilter
from runner_assembly.assembly import model


class SessionController(Controller):
    """Sessions: create, list, show, output, trace, read, control, storage refresh."""

    path = "/api/v1/sessions"
    tags = ("sessions",)

    @post("/", status_code=HTTP_201_CREATED, responses=OPENING_ERRORS,
          after_request=Located("/api/v1/sessions/{sessionId}"),
          opt=body(sw.SessionCreateBody, examples.SESSION_CREATE, required=False)
          | also_ok("dry run: the plan, nothing created") | role("operator"))
    async def create_session(self, request: HttpRequest, session_api: SessionDep, caller: Caller,
                     dry_run: DryRunFlag = False) -> Response[sw.SessionDetail | wire.DryRun]:
        """Create a session and its persistent volume (a PVC, or a directory locally)."""
        body = await read_body(request, sw.SessionCreateBody, empty_ok=True,
                               gate=model.gate_run_base)
        if dry_run:
            return session_api.preview_create(caller, body)
        return await session_api.create(caller, body)

    @get("/", responses=READ_ERRORS)
    async def list_sessions(self, session_api: SessionDep, caller: Caller,
                    session_state: SessionStateQuery = SessionFilter.DEFAULT,
                    reader_id: Reader = DEFAULT_READER, backend_profile: ProfileQuery = None,
                    cursor: Cursor = None, limit: SessionLimit = 50) -> sw.SessionList:
        """Sessions; ``state=default`` shows the running and the unread ones."""
        return await session_api.index(caller, session_state, reader_id, backend_profile, cursor,
                                       limit)

    @get("/{session_id:str}", responses=READ_ERRORS)
    async def show_session(self, session_api: SessionDep, caller: Caller, session_id: SessionId,
                   reader_id: Reader = DEFAULT_READER) -> sw.SessionDetail:
        """One session: identity, thread, state, storage, recent turns, line heads."""
        return await session_api.show(caller, session_id, reader_id)

    @get("/{session_id:str}/output", responses=READ_ERRORS)
    async def session_output(self, session_api: SessionDep, caller: Caller, session_id: SessionId,
                     after_seq: AfterSeq = 0, limit: LineLimit = 200) -> sw.LinePage:
        """Output lines after ``afterSeq`` (redacted, each bounded)."""
        return await session_api.lines(caller, session_id, "output", after_seq, limit)

    @get("/{session_id:str}/trace", responses=READ_ERRORS)
    async def session_trace(self, session_api: SessionDep, caller: Caller, session_id: SessionId,
                    after_seq: AfterSeq = 0, limit: LineLimit = 200) -> sw.LinePage:
        """Trace lines (runner events) after ``afterSeq``."""
        return await session_api.lines(caller, session_id, "trace", after_seq, limit)

    @command("/{session_id:str}/read", sw.SessionReadBody, examples.SESSION_READ, WRITE_ERRORS,
              required=False, access=role("submitter"))
    async def mark_session_read(self, request: HttpRequest, session_api: SessionDep, caller: Caller,
                   session_id: SessionId,
                   dry_run: DryRunFlag = False) -> sw.SessionDetail | wire.DryRun:
        """Advance ``readerId``'s cursor to the session's current version."""
        body = await read_body(request, sw.SessionReadBody, empty_ok=True)
        answer = session_api.preview_read if dry_run else session_api.read
        return await answer(caller, session_id, body.reader_id)

    @command("/{session_id:str}/control", sw.ControlBody, examples.CONTROL, WRITE_ERRORS,
             access=role("operator"))
    async def control_session(self, request: HttpRequest, session_api: SessionDep, caller: Caller,
                      session_id: SessionId,
                      dry_run: DryRunFlag = False) -> sw.SessionDetail | wire.DryRun:
        """Conversation control: ``{"action": "cancel"}`` stops the running turn."""
        body = await read_body(request, sw.ControlBody)
        answer = session_api.preview_cancel if dry_run else session_api.cancel
        return await answer(caller, session_id, body.reason)

    @post("/{session_id:str}/storage/refresh", status_code=HTTP_200_OK,
          responses={**WRITE_ERRORS, **error_responses(401)}, opt=body(
              sw.StorageSummaryBody, examples.STORAGE, required=False, empty_object=True,
              description="The runner's volume summary (SPEC 2.6's snake_case names too); "
                          "empty or {}: take the summary the session's latest runner job "
                          "sent.") | role("operator") | RUNNER_TOO)
    async def refresh_session_storage(self, request: HttpRequest, session_api: SessionDep,
                              runner_api: RunnerDep, caller: Caller,
                              session_id: SessionId) -> sw.SessionDetail:
        """Record the volume summary a runner writes back (SPEC 2.6's snake_case names are
        accepted too). With a runner token, it must be of a live job of this session."""
        raw = await request.body()
        body = None if is_empty_object(raw) else read_summary(raw)
        by_runner = request.scope.get("user") is RUNNER  # else an operator's API key
        await runner_api.check_session(
            session_id, request.headers.get("authorization") if by_runner else None)
        # A runner's token was of a job of this very session; a key must see the session.
        return await session_api.refresh_storage(EVERYTHING if by_runner else caller,
                                                 session_id, body)


def is_empty_object(raw: bytes) -> bool:
    """An empty body, or any spelling of ``{}``."""
    if not raw.strip():
        return True
    try:
        return bool(msgspec.json.decode(raw) == {})
    except msgspec.DecodeError:
        return False


SNAKE_SUMMARY = {"storage_size_bytes": "storageSizeBytes",
                 "storage_files_count": "storageFilesCount",
                 "storage_sha256": "storageSha256", "pvc_name": "pvcName",
                 "pvc_phase": "pvcPhase", "storage_updated_at": "storageUpdatedAt"}


def read_summary(raw: bytes) -> sw.StorageSummaryBody:
    """Decode a posted volume summary strictly, under either name of each field."""
    document = decode(raw, dict[str, Any], empty_ok=False)
    renamed: dict[str, Any] = {}
    for name, value in document.items():
        camel = SNAKE_SUMMARY.get(name, name)
        if camel in renamed:
            raise InvalidRequest(f"{camel} is given twice (as {name} too)", field=camel)
        renamed[camel] = value
    return convert(renamed, sw.StorageSummaryBody)


class RunCommandController(Controller):
    """Commands added to a run: each is a turn of the run's session."""

    path = "/api/v1/runs/{run_id:str}/commands"
    tags = ("runs", "sessions")

    @post("/", status_code=HTTP_201_CREATED, responses=WRITE_ERRORS,
          after_request=Located("/api/v1/sessions/{sessionId}"),
          opt=body(sw.CommandBody, examples.COMMAND)
          | also_ok("dry run (the plan), or the command already added under this commandId")
          | role("operator"))
    async def add_command(self, request: HttpRequest, session_api: SessionDep, caller: Caller,
                  run_id: RunId,
                  dry_run: DryRunFlag = False) -> Response[sw.CommandResult | wire.DryRun]:
        """Add a command (a turn with its prompt) to a run; it resumes the session's
        thread. An evicted session answers ``session-store-evicted`` and creates nothing."""
        body = await read_body(request, sw.CommandBody, gate=model.gate)
        answer = session_api.preview_command if dry_run else session_api.add_command
        return await answer(caller, run_id, body)
