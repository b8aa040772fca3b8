"""Zero setup (DESIGN 12): a ``svc serve`` that finds no usable admin key in the ledger
issues one and writes it, alone on one line, to ``${SVC_DATA_DIR}/admin.key`` (0600).
Concurrent starts on one database take turns (an advisory lock): exactly one key is made."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import asyncpg

from api.auth_keys import KeySpec, issue_command
from api.auth_principal import ALL_TENANTS
from ledger.database import create_pool
from ledger.writer import LedgerWriter, utc_now
from projections import key_queries
from projections.store import plan_projection

ADMIN_KEY_FILE = "admin.key"
ADMIN_SPEC = KeySpec(tenant=ALL_TENANTS, roles=("admin",))
BOOTSTRAP_ACTOR = "svc-serve"
_LOCK_KEY = 0x5356_4302  # one bootstrap at a time across processes (migrations use ...4301)


def admin_key_path(data_dir: Path) -> Path:
    """Where the first admin key is written."""
    return data_dir / ADMIN_KEY_FILE


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to a new file only its owner may read."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


async def ensure_admin_key(database_url: str, data_dir: Path) -> Path | None:
    """Issue the first admin key when the ledger holds no usable one; the file it was
    written to, or None when an admin key exists already."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
        try:
            if await key_queries.has_admin_key(conn):
                return None
            return await _issue_admin_key(database_url, data_dir)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    finally:
        await conn.close()


async def _issue_admin_key(database_url: str, data_dir: Path) -> Path:
    """Write the key to a private file, commit its hash, then put the file in place (a
    failed commit leaves no file behind)."""
    key, command = issue_command(ADMIN_SPEC, utc_now())
    path = admin_key_path(data_dir)
    partial = path.with_name(f".{ADMIN_KEY_FILE}.partial")
    _write_private(partial, key + "\n")
    pool = await create_pool(database_url, min_size=1, max_size=1)
    writer = LedgerWriter(pool, plan_projection)
    try:
        await writer.start()
        await writer.execute(command, BOOTSTRAP_ACTOR)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        await writer.close()
        await pool.close()
    os.replace(partial, path)
    return path
