"""Read queries of the API keys: find a key by its hash, by its id, list them, and whether
any admin key is usable."""

from __future__ import annotations

from ledger.database import Queryable
from ledger.sqlfile import load_queries
from projections.api_keys import API_KEYS, ApiKeyRow

SQL = load_queries("projections", "api_keys.sql")


async def key_by_sha256(db: Queryable, digest: str) -> ApiKeyRow | None:
    """The key whose sha256 is ``digest``, revoked or not."""
    record = await db.fetchrow(SQL["key_by_sha256"], digest)
    return None if record is None else API_KEYS.from_record(record)


async def key_by_id(db: Queryable, key_id: str) -> ApiKeyRow | None:
    """The key ``key_id``."""
    record = await db.fetchrow(SQL["key_by_id"], key_id)
    return None if record is None else API_KEYS.from_record(record)


async def list_keys(db: Queryable) -> list[ApiKeyRow]:
    """Every key, oldest first."""
    return [API_KEYS.from_record(record) for record in await db.fetch(SQL["list_keys"])]


async def has_admin_key(db: Queryable) -> bool:
    """True when an admin key of every tenant is neither revoked nor expired."""
    return bool(await db.fetchval(SQL["has_admin_key"]))
