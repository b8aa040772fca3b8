"""One leader across processes: a session-level advisory lock held on a connection of its
own, for work that every process could do but one is enough for (the session loop).

A process asks :meth:`Leadership.leads` before each round of the work: it takes the lock
when it is free (a try, never a wait) and keeps it while its connection lives. Postgres
frees the lock with the connection, so when the leader dies (its process killed, its
connection cut) another process takes the lock at its next round. Two leaders for a moment
(a connection cut that its process has not noticed yet) are harmless: the work is safe in
many processes at once, one is only cheaper.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import asyncpg

from ledger.database import advisory_key
from ledger.store import is_outage

Connect = Callable[[], Awaitable[asyncpg.Connection]]
CONNECT_TIMEOUT_S = 5
"""How long a process waits for its leadership connection (a round without it: no lead)."""


class Leadership:
    """Who leads ``scope`` on one database; :meth:`leads` answers for this process."""

    def __init__(self, connect: Connect, scope: str) -> None:
        """``connect``: opens the dedicated connection (not a pool's: the lock lives as long
        as its session)."""
        self._connect = connect
        self._key = advisory_key(f"leader/{scope}")
        self._conn: asyncpg.Connection | None = None
        self._leading = False

    @classmethod
    def on(cls, database_url: str, scope: str) -> Leadership:
        """Leadership of ``scope`` on the database at ``database_url``."""

        async def connect() -> asyncpg.Connection:
            return await asyncpg.connect(database_url, statement_cache_size=0,
                                         timeout=CONNECT_TIMEOUT_S,
                                         server_settings={"application_name": "svc-leader"})

        return cls(connect, scope)

    async def leads(self) -> bool:
        """True while this process leads: the lock is taken if free; a lost connection
        loses it (and is opened again, to try again). A database that does not answer
        answers False."""
        conn = self._conn
        if conn is not None and conn.is_closed():
            conn, self._conn, self._leading = None, None, False
        if self._leading:
            return True
        try:
            if conn is None:
                conn = self._conn = await self._connect()
            self._leading = bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)",
                                                     self._key))
        except Exception as error:
            if not is_outage(error):
                raise
            await self.close()
        return self._leading

    async def close(self) -> None:
        """Give up leadership (the connection closes, the lock goes with it)."""
        conn, self._conn, self._leading = self._conn, None, False
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close(timeout=2)
