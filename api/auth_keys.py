"""API keys (DESIGN 12): a credential found by its hash, issued and revoked through the
ledger. A key is shown once, to its creator; it is never stored, logged or listed."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from api.auth_principal import (
    STATIC_ADMIN,
    Principal,
    key_sha256,
    new_key,
    shown_prefix,
)
from api.auth_wire import KeyCreated, KeyView
from ledger.api_key import IssueKey, RevokeKey
from ledger.errors import NotFound
from ledger.ids import new_id
from ledger.writer import Writer, utc_now
from projections import key_queries
from projections.api_keys import ApiKeyRow


@dataclass(frozen=True)
class KeySpec:
    """What a new key may do: its tenant (``*``: every tenant), roles, projects (empty:
    every project of its tenant) and lifetime (None: until revoked)."""

    tenant: str
    roles: tuple[str, ...]
    projects: tuple[str, ...] = ()
    expires_in_s: int | None = None


def issue_command(spec: KeySpec, now: datetime) -> tuple[str, IssueKey]:
    """A fresh key and the command recording its hash (roles and projects as sets)."""
    key = new_key()
    expires = None if spec.expires_in_s is None else (
        now + timedelta(seconds=spec.expires_in_s)).isoformat()
    return key, IssueKey(
        key_id=new_id("key"), key_sha256=key_sha256(key), prefix=shown_prefix(key),
        tenant=spec.tenant, roles=sorted(set(spec.roles)), projects=sorted(set(spec.projects)),
        expires_at=expires)


def key_view(row: ApiKeyRow) -> KeyView:
    """A key as an answer shows it."""
    return KeyView(key_id=row.key_id, prefix=row.prefix, tenant=row.tenant, roles=row.roles,
                   projects=row.projects, expires_at=row.expires_at,
                   revoked_at=row.revoked_at, created_at=row.created_at,
                   change_seq=row.change_seq)


def principal_of(row: ApiKeyRow | None, digest: str, now: datetime) -> Principal | None:
    """The principal of a stored key whose hash equals ``digest`` (compared in constant
    time), unless it is revoked or expired."""
    if row is None or not hmac.compare_digest(row.key_sha256, digest):
        return None
    if row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
        return None
    return Principal(id=row.key_id, tenant=row.tenant, projects=tuple(row.projects),
                     roles=frozenset(row.roles))


class KeyService:
    """Authenticates API keys and issues, revokes and lists them."""

    def __init__(self, pool: asyncpg.Pool, writer: Writer, static_sha256: str | None,
                 clock: Callable[[], datetime] = utc_now) -> None:
        self.pool = pool
        self.writer = writer
        self.static_sha256 = static_sha256
        self.clock = clock

    def is_static(self, digest: str) -> bool:
        """True when ``digest`` is the sha256 of the operator's admin key
        (``SVC_ADMIN_KEY_SHA256``), compared in constant time."""
        return bool(self.static_sha256) and hmac.compare_digest(
            digest, self.static_sha256 or "")

    async def authenticate(self, credential: str) -> Principal | None:
        """The principal of an API key, or None when it is unknown, revoked or expired."""
        digest = key_sha256(credential)
        if self.is_static(digest):
            return STATIC_ADMIN
        row = await key_queries.key_by_sha256(self.pool, digest)
        return principal_of(row, digest, self.clock())

    async def issue(self, spec: KeySpec, actor: str) -> KeyCreated:
        """Issue a key through the ledger; the answer holds the key, to show once."""
        key, command = issue_command(spec, self.clock())
        entry = (await self.writer.execute(command, actor)).entries[0]
        expires = None if command.expires_at is None else datetime.fromisoformat(
            command.expires_at)
        return KeyCreated(
            key=key, key_id=command.key_id, prefix=command.prefix, tenant=command.tenant,
            roles=command.roles, projects=command.projects, expires_at=expires,
            revoked_at=None, created_at=entry.recorded_at, change_seq=entry.change_seq)

    async def revoke(self, key_id: str, actor: str) -> KeyView:
        """Revoke a key (again: no change); ``not-found`` for an unknown id."""
        await self.writer.execute(RevokeKey(key_id), actor)
        return await self.show(key_id)

    async def show(self, key_id: str) -> KeyView:
        """One key, or ``not-found``."""
        row = await key_queries.key_by_id(self.pool, key_id)
        if row is None:
            raise NotFound(f"key {key_id} not found", keyId=key_id)
        return key_view(row)

    async def list(self) -> list[KeyView]:
        """Every key, oldest first."""
        return [key_view(row) for row in await key_queries.list_keys(self.pool)]

