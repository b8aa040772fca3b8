"""Authentication and authorization (DESIGN 12): one middleware turns the bearer credential
into a principal and decides with what the route declares (``api.access``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from litestar import Litestar
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler, HTTPRouteHandler
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.routes import HTTPRoute
from litestar.types import ASGIApp, Receive, Scope, Send

from api.access import OPEN_KEY, is_open, required_role, runner_access
from api.auth_principal import ACTING, RUNNER, Principal
from api.auth_sources import CredentialSources
from api.docs_ui import SCHEMA_PATH
from ledger.errors import DomainError

MAX_CREDENTIAL = 8192
"""The longest credential read: room for JWTs (ServiceAccount and OIDC tokens run to a few
KiB), far below a header's limit."""
DOCS_PATTERN = rf"^{SCHEMA_PATH}(/|$)"


class Unauthenticated(DomainError):
    """A valid credential is required: send ``Authorization: Bearer <API key or token>``."""


class Forbidden(DomainError):
    """The credential's roles do not allow this route."""


def is_docs(path: str) -> bool:
    """True for the OpenAPI document and its docs page."""
    return path == SCHEMA_PATH or path.startswith(SCHEMA_PATH + "/")


def bearer_credential(authorization: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer …`` header (None when absent or not
    a bearer credential)."""
    if not authorization:
        return None
    scheme, _, credential = authorization.partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential or len(credential) > MAX_CREDENTIAL:
        return None
    return credential


class AuthenticationMiddleware(AbstractAuthenticationMiddleware):
    """Turns ``Authorization: Bearer …`` into the request's principal (``request.user``)
    with the credential source its shape names (``api.auth_sources``), then authorizes it
    for the route (:func:`authorize`); the ledger entries the request makes name that
    principal as their actor.

    Not a Litestar guard: Litestar hands each guard a ``copy`` of the route handler, about
    3 % of a small request's CPU."""

    def __init__(self, app: ASGIApp, sources: Callable[[], CredentialSources]) -> None:
        super().__init__(app, exclude=DOCS_PATTERN, exclude_from_auth_key=OPEN_KEY)
        self.sources = sources

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request; the acting principal is forgotten after it."""
        acting = ACTING.set(None)
        try:
            await super().__call__(scope, receive, send)
        finally:
            ACTING.reset(acting)

    async def authenticate_request(self, connection: ASGIConnection[Any, Any, Any, Any]
                                   ) -> AuthenticationResult:
        """The principal of the request's credential, or 401."""
        runner = runner_access(connection.route_handler)
        credential = bearer_credential(connection.headers.get("authorization"))
        if runner == "only":  # the route checks its job's token, as ever (an API key is none)
            return AuthenticationResult(RUNNER, None)
        if credential is None:
            raise Unauthenticated()
        source = self.sources().pick(credential)
        if source is None and runner == "also":  # a runner token: the route checks it
            return AuthenticationResult(RUNNER, None)
        principal = None if source is None else await source.authenticate(credential)
        if principal is None:
            raise Unauthenticated("the credential is unknown, revoked or expired")
        authorize(principal, connection.route_handler, connection.scope)
        ACTING.set(principal.id)
        return AuthenticationResult(principal, None)


def authorize(principal: Principal, handler: BaseRouteHandler, scope: Scope) -> None:
    """The one authorization decision of every route that is not open: may ``principal``
    call ``handler``? (A runner token may call the runner routes, which check it against
    its job.) Raises 403 ``forbidden`` when the route needs a role the principal lacks."""
    if principal.kind == "runner":
        if runner_access(handler):
            return
        raise Unauthenticated()
    needed = required_role(handler, str(scope.get("method", "")))
    if needed is None or not principal.may(needed):
        raise Forbidden(f"this route needs the {needed or 'a declared'} role",
                        role=needed, principal=principal.id)


def undeclared_routes(app: Litestar) -> list[str]:
    """Every ``METHOD path`` that is neither open nor a read and declares no role."""
    missing = []
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            if not isinstance(handler, HTTPRouteHandler) or is_open(handler):
                continue
            for method in handler.http_methods:
                path = route.path_format
                if method == "OPTIONS" or is_docs(path) or runner_access(handler) == "only":
                    continue
                if required_role(handler, method) is None:
                    missing.append(f"{method} {path}")
    return missing
