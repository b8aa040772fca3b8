"""The per-tenant cap of live sessions (``SVC_MAX_SESSIONS_PER_TENANT``, DESIGN 13).

A live session keeps a volume and was not evicted; the count is one indexed query of the
session projection. Opening a session that counts holds the tenant's advisory lock from the
count to the commit of its ``session-opened`` entry, so two creates at the cap's edge never
both pass (DESIGN 11: no in-process lock). The lock is always the last one a caller takes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

from ledger.database import DbConnection, Queryable, advisory_lock
from ledger.errors import DomainError
from projections import orchestration_queries as oq


class SessionLimitReached(DomainError):
    """The tenant holds as many live sessions as ``SVC_MAX_SESSIONS_PER_TENANT`` allows."""


@dataclass(frozen=True)
class SessionCap:
    """Counts a tenant's live sessions against the cap (``limit`` 0: no cap)."""

    pool: asyncpg.Pool
    fence_pool: asyncpg.Pool
    limit: int

    async def check(self, tenant_id: str, db: Queryable | None = None) -> None:
        """Refuse (429 ``session-limit-reached``) when the tenant is at the cap."""
        if self.limit <= 0:
            return
        live = await oq.live_sessions(db or self.pool, tenant_id)
        if live >= self.limit:
            raise SessionLimitReached(
                f"the tenant holds {live} live sessions, the most SVC_MAX_SESSIONS_PER_TENANT "
                f"allows ({self.limit}): end or let expire one before opening another",
                tenantId=tenant_id, liveSessions=live, limit=self.limit)

    @asynccontextmanager
    async def opening(self, tenant_id: str | None, session_id: str,
                      conn: DbConnection | None = None) -> AsyncIterator[None]:
        """Hold the tenant's lock (on ``conn`` when the caller holds a fence connection)
        while the session ``session_id`` is opened; refuse first when it does not exist yet
        and the tenant is at the cap. ``tenant_id`` None: the session does not count (it
        keeps no volume), nothing is held."""
        if self.limit <= 0 or tenant_id is None:
            yield
            return
        if conn is None:
            async with self.fence_pool.acquire() as own, \
                    self.opening(tenant_id, session_id, own):
                yield
            return
        async with advisory_lock(conn, f"sessions-of-tenant/{tenant_id}"):
            if await oq.session_state(conn, session_id) is None:
                await self.check(tenant_id, conn)
            yield
