"""The API-key stream (DESIGN 12): a key is issued once and may be revoked; nothing else.

The key itself never reaches the ledger: only its sha256 and a short display prefix.
"""

from __future__ import annotations

import msgspec

from ledger import events as ev
from ledger.addressed import Addressed
from ledger.errors import InvalidTransition, NotFound

STREAM_TYPE = "api-key"


class IssueKey(ev.ApiKeyFacts, Addressed, frozen=True):
    """Record a new key's hash, tenant, projects, roles and expiry."""

    @property
    def creates_stream(self) -> bool:
        """A fresh key id has no stream to load (a clash fails on the unique key)."""
        return True


class RevokeKey(msgspec.Struct, Addressed, frozen=True):
    """Refuse the key from now on (revoking a revoked key changes nothing)."""

    key_id: str
    reason: str | None = None


ApiKeyCommand = IssueKey | RevokeKey


class ApiKeyState(msgspec.Struct, frozen=True):
    """What ``decide`` needs to know about a key."""

    key_id: str
    revoked: bool = False


def decide(state: ApiKeyState | None, command: ApiKeyCommand) -> list[ev.ApiKeyEvent]:
    """Events for a key command."""
    if isinstance(command, IssueKey):
        if state is not None:
            raise InvalidTransition(f"key {command.key_id} is already issued",
                                    keyId=command.key_id)
        return [ev.KeyIssued(**msgspec.structs.asdict(command))]
    if state is None:
        raise NotFound(f"key {command.key_id} not found", keyId=command.key_id)
    return [] if state.revoked else [ev.KeyRevoked(command.reason)]


def evolve(state: ApiKeyState | None, event: ev.ApiKeyEvent) -> ApiKeyState:
    """Fold one key event."""
    if isinstance(event, ev.KeyIssued):
        return ApiKeyState(key_id=event.key_id)
    assert state is not None, "event before key-issued"
    return msgspec.structs.replace(state, revoked=True)
