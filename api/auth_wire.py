"""Wire types of the API-key routes (``/api/v1/auth/keys``): what an admin sends and sees.
A key is in an answer once, when it is created; lists show its prefix only."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec
from msgspec import Meta

from api.auth_principal import Role
from api.wire import Camel, Identifier

TENANT_PATTERN = r"^(\*|[A-Za-z0-9][A-Za-z0-9._:@-]*)$"
MAX_EXPIRY_S = 10 * 366 * 24 * 3600
KeyTenant = Annotated[str, Meta(min_length=1, max_length=128, pattern=TENANT_PATTERN,
                                description="The key's tenant, or * for every tenant")]


class KeyCreateBody(Camel, frozen=True):
    """A new key: its tenant, roles, optional projects and optional lifetime."""

    tenant: KeyTenant
    roles: Annotated[list[Role], Meta(min_length=1, max_length=5)]
    projects: Annotated[list[Identifier], Meta(max_length=100)] = msgspec.field(
        default_factory=list)
    expires_in_seconds: Annotated[int, Meta(ge=60, le=MAX_EXPIRY_S)] | None = None


class KeyView(msgspec.Struct, rename="camel", kw_only=True):
    """A key as lists show it: never the key, only its first characters."""

    key_id: str
    prefix: str
    tenant: str
    roles: list[str]
    projects: list[str]
    expires_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime
    change_seq: int


class KeyCreated(KeyView, kw_only=True):
    """A key just created: the only answer that holds the key itself."""

    key: str


class KeyList(msgspec.Struct, rename="camel"):
    """Every key, oldest first."""

    items: list[KeyView]
