"""API-key projection: one row per key, found by its sha256 when a request presents it."""

from __future__ import annotations

from datetime import datetime

import msgspec

from ledger import events as ev
from ledger.api_key import STREAM_TYPE as API_KEY_STREAM
from ledger.streams import RecordedEntry
from projections.projection import Fold, Projection, Rows


class ApiKeyRow(msgspec.Struct, frozen=True):
    """A row of ``api_key``: what authenticates a key, never the key itself."""

    key_id: str
    key_sha256: str
    prefix: str
    tenant: str
    roles: list[str]
    projects: list[str]
    expires_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime
    change_seq: int


def evolve(row: ApiKeyRow | None, entry: RecordedEntry) -> ApiKeyRow | None:
    """The row after an issue or a revocation."""
    event = entry.event
    if isinstance(event, ev.KeyIssued):
        expires = None if event.expires_at is None else datetime.fromisoformat(event.expires_at)
        return ApiKeyRow(
            key_id=event.key_id, key_sha256=event.key_sha256, prefix=event.prefix,
            tenant=event.tenant, roles=list(event.roles), projects=list(event.projects),
            expires_at=expires, revoked_at=None, created_at=entry.recorded_at,
            change_seq=entry.change_seq)
    if row is None:
        return None
    return msgspec.structs.replace(row, revoked_at=entry.recorded_at,
                                   change_seq=entry.change_seq)


def _key(entry: RecordedEntry, _rows: Rows) -> str:
    return entry.stream_id


API_KEYS = Projection("api_key", ApiKeyRow, key=("key_id",), origin=Fold(
    API_KEY_STREAM, _key, evolve, created_by=frozenset({ev.KeyIssued})))
PROJECTIONS = (API_KEYS,)
