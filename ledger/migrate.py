"""Numbered SQL migrations applied in order, each in its own transaction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_KEY = 0x5356_4301  # advisory lock: one migrator at a time across processes


@dataclass(frozen=True)
class Migration:
    """One numbered SQL file."""

    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    """Every migration shipped in ``ledger/migrations``, in order."""
    found = []
    for entry in resources.files("ledger").joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda m: m.version)


async def migrate(conn: asyncpg.Connection) -> list[Migration]:
    """Apply the migrations not yet recorded in ``schema_migrations``; return those applied.

    With the schema current this only reads, so the service's own role (which may not create
    tables) can call it at start.
    """
    if not await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL"):
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
    if not await pending_migrations(conn):
        return []
    applied: list[Migration] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        for migration in available_migrations():
            if migration.version in done:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version, migration.name,
                )
            applied.append(migration)
    return applied


async def pending_migrations(conn: asyncpg.Connection) -> list[Migration]:
    """Migrations not applied yet (empty when the schema is current)."""
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    done: set[int] = set()
    if exists:
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
    return [m for m in available_migrations() if m.version not in done]
