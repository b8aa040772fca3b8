"""Read queries of the session layer: the session list, one session, its recent turns."""

from __future__ import annotations

from dataclasses import dataclass

from ledger.database import Queryable
from ledger.sqlfile import load_queries
from ledger.states import TERMINAL_SESSIONS, SessionFilter, SessionStatus
from projections.queries import MAX_SEQ, RowDecoder, decode_cursor, encode_cursor
from projections.rows import SessionHead, SessionView, TurnFields
from projections.scope import EVERYTHING, Scope

SQL = load_queries("projections", "session_queries.sql")
RECENT_TURNS = 10
FILTERS: dict[SessionFilter, tuple[frozenset[SessionStatus], bool]] = {
    SessionFilter.ALL: (frozenset(SessionStatus), False),
    SessionFilter.RUNNING: (frozenset({SessionStatus.RUNNING}), False),
    SessionFilter.UNREAD: (frozenset(), True),
    SessionFilter.TERMINAL: (TERMINAL_SESSIONS, False),
    SessionFilter.IDLE: (frozenset({SessionStatus.IDLE}), False),
    SessionFilter.DEFAULT: (frozenset({SessionStatus.RUNNING}), True),
}
"""A list filter: the session states it selects, and whether it also selects unread ones."""

_ITEMS = RowDecoder(SessionHead)
_DETAILS = RowDecoder(SessionView, nested=("storage",))
_TURNS = RowDecoder(TurnFields)


@dataclass(frozen=True)
class SessionPage:
    """Rows of one session list page, the next cursor and the high-water mark."""

    rows: list[SessionHead]
    next_cursor: str | None
    high_water: int


async def list_sessions(db: Queryable, *, state: SessionFilter, reader_id: str,
                        backend_profile: str | None, cursor: str | None,
                        limit: int, scope: Scope = EVERYTHING) -> SessionPage:
    """Sessions of the tenant ``scope`` sees, matching the filter, newest change first."""
    high_water: int = await db.fetchval(SQL["high_water"])
    before = decode_cursor(cursor)[1] if cursor else MAX_SEQ
    states, unread = FILTERS[state]
    rows = _ITEMS.many(await db.fetch(SQL["list_sessions"], reader_id, before,
                                      backend_profile, sorted(states), limit + 1, unread,
                                      scope.tenant_filter))
    next_cursor = encode_cursor("d", rows[limit - 1].change_seq) if len(rows) > limit \
        else None
    return SessionPage(rows[:limit], next_cursor, high_water)


async def get_session(db: Queryable, session_id: str,
                      reader_id: str) -> SessionView | None:
    """One session's row with ``unread`` for the reader."""
    return _DETAILS.maybe(await db.fetchrow(SQL["get_session"], session_id, reader_id))


async def recent_turns(db: Queryable, session_id: str) -> list[TurnFields]:
    """The session's newest turns."""
    return _TURNS.many(await db.fetch(SQL["recent_turns"], session_id, RECENT_TURNS))
