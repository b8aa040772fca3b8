"""Who calls (DESIGN 12): the principal a credential stands for, the roles and what each
role may do, API-key material, and the principal a request acts as (the ledger's actor)."""

from __future__ import annotations

import hashlib
import secrets
from contextvars import ContextVar
from typing import Literal

import msgspec

Role = Literal["reader", "submitter", "operator", "judge", "admin"]
ROLES: tuple[Role, ...] = ("reader", "submitter", "operator", "judge", "admin")
GRANTS: dict[str, frozenset[str]] = {
    "reader": frozenset({"reader"}),
    "submitter": frozenset({"reader", "submitter"}),
    "operator": frozenset({"reader", "submitter", "operator"}),
    "judge": frozenset({"reader", "judge"}),
    "admin": frozenset(ROLES),
}
"""What each role may do: ``reader`` every GET; ``submitter`` + submit and read cursors;
``operator`` + everything that spends stored credentials; ``judge`` + judge records (a judge
reads, it does not dispatch); ``admin`` everything (keys, every tenant)."""

ALL_TENANTS = "*"
KEY_PREFIX = "svck_"
KEY_BYTES = 24
"""Random bytes of an API key: 192 bits, URL-safe base64 (32 characters) after the prefix."""
SHOWN_PREFIX = len(KEY_PREFIX) + 6
"""How much of a key ``svc auth key list`` shows: its prefix and 6 characters (36 bits)."""


class Principal(msgspec.Struct, frozen=True):
    """The caller a credential stands for: ``kind`` names its credential source
    (``api.auth_sources``). ``runner``: a bearer token the route itself checks against its
    runner job (DESIGN 9); it holds no role."""

    id: str
    tenant: str
    projects: tuple[str, ...] = ()
    roles: frozenset[str] = frozenset()
    kind: Literal["key", "runner", "serviceaccount", "oidc"] = "key"

    def may(self, role: str) -> bool:
        """True when one of the principal's roles grants ``role``."""
        return any(role in GRANTS.get(held, ()) for held in self.roles)


RUNNER = Principal(id="runner", tenant="", kind="runner")
"""A credential that is not an API key, on a route that takes a runner token."""
STATIC_ADMIN = Principal(id="admin", tenant=ALL_TENANTS, roles=frozenset({"admin"}))
"""The operator's own admin key (``SVC_ADMIN_KEY_SHA256``), known by its hash only."""

ACTING: ContextVar[str | None] = ContextVar("svc_acting_principal", default=None)
"""The id of the principal the current request acts for (unset outside requests)."""


def acting_as(default: str) -> str:
    """The actor of a ledger entry: the principal of the request being served, else
    ``default`` (the service's own loops)."""
    return ACTING.get() or default


def new_key() -> str:
    """A fresh API key: ``svck_`` and 192 random bits, URL-safe."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def key_sha256(credential: str) -> str:
    """The hex sha256 a key is stored and found by (keys are random: no salt, no stretching
    is needed)."""
    return hashlib.sha256(credential.encode()).hexdigest()


def shown_prefix(key: str) -> str:
    """The start of a key that lists may show to tell keys apart."""
    return key[:SHOWN_PREFIX]


def is_api_key(credential: str) -> bool:
    """True for a credential in the API-key format (anything else may be a runner token)."""
    return credential.startswith(KEY_PREFIX)


class Grant(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a credential from outside the ledger (a mapped ServiceAccount) may do: one tenant
    (``*``: every tenant), its roles and optional projects (empty: every project)."""

    tenant: str
    roles: tuple[Role, ...]
    projects: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.tenant or not self.roles:
            raise ValueError("a grant names a tenant and at least one role")
