"""Read queries of the session layer: the session list, one session, its recent turns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import msgspec

from ledger.database import Queryable
from ledger.sqlfile import load_queries
from projections.queries import MAX_SEQ, RowDecoder, decode_cursor, encode_cursor

SQL = load_queries("projections", "session_queries.sql")
RECENT_TURNS = 10


class SessionItemRow(msgspec.Struct, frozen=True, kw_only=True):
    """A session as the list shows it, with ``unread`` for the reader."""

    session_id: str
    conversation_id: str
    thread_id: str | None
    backend_profile: str
    state: str
    unread: bool
    storage_kind: str
    latest_run_id: str | None
    latest_task_id: str | None
    turns: int
    failure_kind: str | None
    version: int
    change_seq: int
    expires_at: datetime
    updated_at: datetime


class SessionDetailRow(SessionItemRow, frozen=True, kw_only=True):
    """One session: the list fields, its current run and its storage summary."""

    run_id: str | None
    pvc_name: str | None
    pvc_phase: str | None
    storage_size_bytes: int | None
    storage_files_count: int | None
    storage_sha256: str | None
    storage_updated_at: datetime | None


class RecentTurn(msgspec.Struct, frozen=True, kw_only=True):
    """One of a session's newest turns."""

    run_id: str
    command_id: str
    runner_job_id: str
    task_id: str | None
    thread_id: str | None
    resumed: bool
    status: str
    failure_kind: str | None
    exit_code: int | None
    created_at: datetime
    finished_at: datetime | None


_ITEMS = RowDecoder(SessionItemRow)
_DETAILS = RowDecoder(SessionDetailRow)
_TURNS = RowDecoder(RecentTurn)


@dataclass(frozen=True)
class SessionPage:
    """Rows of one session list page, the next cursor and the high-water mark."""

    rows: list[SessionItemRow]
    next_cursor: str | None
    high_water: int


async def list_sessions(db: Queryable, *, state: str, reader_id: str,
                        backend_profile: str | None, cursor: str | None,
                        limit: int) -> SessionPage:
    """Sessions matching the filter, newest change first."""
    high_water: int = await db.fetchval(SQL["high_water"])
    before = decode_cursor(cursor)[1] if cursor else MAX_SEQ
    rows = _ITEMS.many(await db.fetch(SQL["list_sessions"], reader_id, before,
                                      backend_profile, state, limit + 1))
    next_cursor = encode_cursor("d", rows[limit - 1].change_seq) if len(rows) > limit \
        else None
    return SessionPage(rows[:limit], next_cursor, high_water)


async def get_session(db: Queryable, session_id: str,
                      reader_id: str) -> SessionDetailRow | None:
    """One session's row with ``unread`` for the reader."""
    return _DETAILS.maybe(await db.fetchrow(SQL["get_session"], session_id, reader_id))


async def recent_turns(db: Queryable, session_id: str) -> list[RecentTurn]:
    """The session's newest turns."""
    return _TURNS.many(await db.fetch(SQL["recent_turns"], session_id, RECENT_TURNS))
