"""The session API (SPEC 4.2): sessions, their output and trace, read cursors, conversation
control, storage summaries, and commands added to runs.

Reads come from the session projections and the session's own line store; they never touch
the queue's records. Reading one session first follows its running turn (takes in new lines,
records an ended job), so what it answers is current.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.params import PathParameter, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from api import session_wire as sw
from api import views, wire
from api.body import decode, read_body
from api.errors import READ_ERRORS, WRITE_ERRORS
from api.queue_routes import Cursor, DryRunFlag
from ledger import session_lines
from ledger.errors import InvalidRequest, NotFound
from ledger.session import CancelSession, MarkSessionRead
from ledger.states import SessionFilter, SessionStatus
from projections import session_queries
from runner_assembly.orchestration.session_service import NewCommand, NewSession, SessionService

SessionId = Annotated[str, PathParameter(min_length=1, max_length=128,
                                         pattern=wire.IDENTIFIER_PATTERN)]
RunId = SessionId
Reader = Annotated[str, QueryParameter(name="readerId", min_length=1, max_length=128,
                                       pattern=wire.IDENTIFIER_PATTERN)]
ProfileQuery = Annotated[str | None, QueryParameter(
    name="backendProfile", pattern=r"^profile-[1-4]$")]
StateQuery = Annotated[SessionFilter, QueryParameter(name="state")]
SessionLimit = Annotated[int, QueryParameter(ge=1, le=500)]
AfterSeq = Annotated[int, QueryParameter(name="afterSeq", ge=0, le=2**62)]
LineLimit = Annotated[int, QueryParameter(ge=1, le=1000)]
DEFAULT_READER = "default"


async def session_detail(state: State, session_id: str,
                         reader_id: str = DEFAULT_READER) -> sw.SessionDetail:
    """The session from its projections and line heads, or ``not-found``."""
    row = await session_queries.get_session(state.pool, session_id, reader_id)
    if row is None:
        raise NotFound(f"session {session_id} not found", sessionId=session_id)
    turns = await session_queries.recent_turns(state.pool, session_id)
    output_seq = await session_lines.last_seq(state.pool, session_id, "output")
    trace_seq = await session_lines.last_seq(state.pool, session_id, "trace")
    return views.session_detail(row, turns, output_seq, trace_seq, reader_id)


def _service(state: State) -> SessionService:
    service: SessionService = state.sessions
    return service


async def _lines(state: State, session_id: str, channel: str, after_seq: int,
                 limit: int) -> sw.LinePage:
    await _service(state).sync(session_id)
    session = await session_queries.get_session(state.pool, session_id, DEFAULT_READER)
    if session is None:
        raise NotFound(f"session {session_id} not found", sessionId=session_id)
    lines, last = await session_lines.page(state.pool, session_id, channel, after_seq, limit)
    return sw.LinePage(
        session_id=session_id, channel=channel,
        items=[sw.LineItem(line.seq, line.runner_job_id, line.line, line.recorded_at)
               for line in lines],
        next_after_seq=lines[-1].seq if lines else after_seq, last_seq=last,
        running=session.state == SessionStatus.RUNNING)


class SessionController(Controller):
    """Sessions: create, list, show, output, trace, read, control, storage refresh."""

    path = "/api/v1/sessions"
    tags = ("sessions",)

    @post("/", status_code=HTTP_201_CREATED, responses=WRITE_ERRORS)
    async def create(self, request: Request[Any, Any, Any], state: State,
                     dry_run: DryRunFlag = False) -> Response[sw.SessionDetail | wire.DryRun]:
        """Create a session and its persistent volume (a PVC, or a directory locally)."""
        body = await read_body(request, sw.SessionCreateBody, empty_ok=True)
        profile = body.backend_profile or state.settings.default_profile
        if dry_run:
            plan = {"sessionId": body.session_id, "backendProfile": profile,
                    "volume": "create or resolve", "valuesPrinted": False}
            return Response(wire.DryRun(mutation=False, plan=plan), status_code=HTTP_200_OK)
        session_id = await _service(state).create(NewSession(
            session_id=body.session_id, conversation_id=body.conversation_id,
            backend_profile=profile,
            run_base=msgspec.to_builtins(body.run_base) if body.run_base else {}))
        return Response(await session_detail(state, session_id), status_code=HTTP_201_CREATED)

    @get("/", responses=READ_ERRORS)
    async def index(self, state: State, session_state: StateQuery = SessionFilter.DEFAULT,
                   reader_id: Reader = DEFAULT_READER, backend_profile: ProfileQuery = None,
                   cursor: Cursor = None, limit: SessionLimit = 50) -> sw.SessionList:
        """Sessions; ``state=default`` shows the running and the unread ones."""
        page = await session_queries.list_sessions(
            state.pool, state=session_state, reader_id=reader_id,
            backend_profile=backend_profile, cursor=cursor, limit=limit)
        return sw.SessionList([views.session_item(r) for r in page.rows],
                              page.next_cursor, page.high_water)

    @get("/{session_id:str}", responses=READ_ERRORS)
    async def show(self, state: State, session_id: SessionId,
                   reader_id: Reader = DEFAULT_READER) -> sw.SessionDetail:
        """One session: identity, thread, state, storage, recent turns, line heads."""
        await _service(state).sync(session_id)
        return await session_detail(state, session_id, reader_id)

    @get("/{session_id:str}/output", responses=READ_ERRORS)
    async def output(self, state: State, session_id: SessionId, after_seq: AfterSeq = 0,
                     limit: LineLimit = 200) -> sw.LinePage:
        """Output lines after ``afterSeq`` (redacted, each bounded)."""
        return await _lines(state, session_id, "output", after_seq, limit)

    @get("/{session_id:str}/trace", responses=READ_ERRORS)
    async def trace(self, state: State, session_id: SessionId, after_seq: AfterSeq = 0,
                    limit: LineLimit = 200) -> sw.LinePage:
        """Trace lines (runner events) after ``afterSeq``."""
        return await _lines(state, session_id, "trace", after_seq, limit)

    @post("/{session_id:str}/read", status_code=HTTP_200_OK, responses=WRITE_ERRORS)
    async def read(self, request: Request[Any, Any, Any], state: State, session_id: SessionId,
                   dry_run: DryRunFlag = False) -> sw.SessionDetail | wire.DryRun:
        """Advance ``readerId``'s cursor to the session's current version."""
        body = await read_body(request, sw.SessionReadBody, empty_ok=True)
        command = MarkSessionRead(session_id, body.reader_id)
        if dry_run:
            return await _plan(state, "read", command)
        await _service(state).read(session_id, body.reader_id)
        return await session_detail(state, session_id, body.reader_id)

    @post("/{session_id:str}/control", status_code=HTTP_200_OK, responses=WRITE_ERRORS)
    async def control(self, request: Request[Any, Any, Any], state: State,
                      session_id: SessionId,
                      dry_run: DryRunFlag = False) -> sw.SessionDetail | wire.DryRun:
        """Conversation control: ``{"action": "cancel"}`` stops the running turn."""
        body = await read_body(request, sw.ControlBody)
        if dry_run:
            return await _plan(state, "cancel", CancelSession(session_id, body.reason))
        await _service(state).cancel(session_id, body.reason)
        return await session_detail(state, session_id)

    @post("/{session_id:str}/storage/refresh", status_code=HTTP_200_OK,
          responses=WRITE_ERRORS)
    async def refresh_storage(self, request: Request[Any, Any, Any], state: State,
                              session_id: SessionId) -> sw.SessionDetail:
        """Record the runner's volume summary: the body a runner posts, or (empty body)
        the summary the session's latest runner job wrote back."""
        raw = await request.body()
        summary = None
        if raw.strip() and raw.strip() != b"{}":
            body = read_summary(raw)
            summary = msgspec.to_builtins(body)
            if body.storage_updated_at is not None:
                summary["storageUpdatedAt"] = body.storage_updated_at.isoformat()
        await _service(state).refresh_storage(session_id, summary)
        return await session_detail(state, session_id)


def read_summary(raw: bytes) -> sw.StorageSummaryBody:
    """Decode a posted volume summary strictly."""
    return decode(raw, sw.StorageSummaryBody, empty_ok=False)


async def _plan(state: State, name: str, command: Any) -> wire.DryRun:
    outcome = await state.writer.plan(command)
    return wire.DryRun(mutation=False, plan={
        "operation": name, "sessionId": command.session_id,
        "events": [type(e).__name__ for e in outcome.events]})


class RunCommandController(Controller):
    """Commands added to a run: each is a turn of the run's session."""

    path = "/api/v1/runs/{run_id:str}/commands"
    tags = ("runs", "sessions")

    @post("/", status_code=HTTP_201_CREATED, responses=WRITE_ERRORS)
    async def add(self, request: Request[Any, Any, Any], state: State, run_id: RunId,
                  dry_run: DryRunFlag = False) -> Response[sw.CommandResult | wire.DryRun]:
        """Add a command (a turn with its prompt) to a run; it resumes the session's
        thread. An evicted session answers ``session-store-evicted`` and creates nothing."""
        body = await read_body(request, sw.CommandBody)
        if body.command_id is not None and not body.command_id.startswith("cmd_"):
            raise InvalidRequest("commandId must start with cmd_", field="commandId")
        result = await _service(state).add_command(NewCommand(
            run_id=run_id, prompt=body.payload.prompt, thread_id=body.payload.thread_id,
            command_id=body.command_id, transient_env=dict(body.transient_env or {})),
            dry_run=dry_run)
        if dry_run:
            return Response(wire.DryRun(mutation=False, plan=result), status_code=HTTP_200_OK)
        answer = sw.CommandResult(
            session_id=result["sessionId"], run_id=result["runId"],
            command_id=result["commandId"], runner_job_id=result["runnerJobId"],
            thread_id=result["threadId"], resumed=result["resumed"], created=result["created"],
            session_path=views.session_path(result["sessionId"]))
        return Response(answer, status_code=HTTP_201_CREATED if answer.created else HTTP_200_OK)
