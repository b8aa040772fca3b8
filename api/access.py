"""What a route declares about who may call it (DESIGN 12), in its ``opt``: read by the
authentication middleware (``api.auth``) and by the OpenAPI document (``security`` of each
operation).

:data:`OPEN`: anyone (health, readiness, metrics; the docs pages are open by path).
:func:`role`: an API key holding that role (a read needs ``reader`` unless it names another).
:data:`RUNNER_ONLY`: the runner protocol, its job's own token only (the route checks it).
:data:`RUNNER_TOO`: a runner token (checked by the route) or an API key holding the role.
"""

from __future__ import annotations

from litestar.handlers import BaseRouteHandler

from api.auth_principal import ROLES

OPEN_KEY = "svc_open"
ROLE_KEY = "role"
RUNNER_KEY = "svc_runner"
OPEN: dict[str, object] = {OPEN_KEY: True}
RUNNER_ONLY: dict[str, object] = {RUNNER_KEY: "only"}
RUNNER_TOO: dict[str, object] = {RUNNER_KEY: "also"}
READS = frozenset({"GET", "HEAD"})


def role(name: str) -> dict[str, object]:
    """``opt`` of a route that needs ``name`` (one of ``ROLES``)."""
    if name not in ROLES:
        raise ValueError(f"unknown role {name!r}")
    return {ROLE_KEY: name}


def required_role(handler: BaseRouteHandler, method: str) -> str | None:
    """The role a route needs for ``method``: its declared one, ``reader`` for a read,
    None for an undeclared write (refused: every write names its role)."""
    declared = handler.opt.get(ROLE_KEY)
    if isinstance(declared, str):
        return declared
    return "reader" if method in READS else None


def is_open(handler: BaseRouteHandler) -> bool:
    """True for a route declared open."""
    return bool(handler.opt.get(OPEN_KEY))


def runner_access(handler: BaseRouteHandler) -> str | None:
    """``only``, ``also`` or None: whether a runner token may call the route."""
    value = handler.opt.get(RUNNER_KEY)
    return value if isinstance(value, str) else None
