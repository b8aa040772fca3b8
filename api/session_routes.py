"""``GET /api/v1/sessions/{sessionId}``: the session identity (full session API: later)."""

from __future__ import annotations

from typing import Annotated

from litestar import get
from litestar.datastructures import State
from litestar.params import PathParameter

from api import wire
from api.errors import READ_ERRORS
from ledger.errors import NotFound
from projections import queries

_STATE = {"created": "starting", "running": "running"}


@get("/api/v1/sessions/{session_id:str}", tags=["sessions"], responses=READ_ERRORS)
async def show_session(
    state: State, session_id: Annotated[str, PathParameter(
        min_length=1, max_length=128, pattern=wire.IDENTIFIER_PATTERN)]
) -> wire.Session:
    """sessionId, conversationId, threadId, state and backend profile of a session."""
    row = await queries.get_session(state.pool, session_id)
    if row is None:
        raise NotFound(f"session {session_id} not found", sessionId=session_id)
    return wire.Session(
        session_id=row["session_id"], conversation_id=row["conversation_id"], thread_id=None,
        state=_STATE.get(row["status"], "idle"), backend_profile=row["backend_profile"],
        latest_run_id=row["run_id"], change_seq=row["high_water"],
    )
