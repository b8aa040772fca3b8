"""``Allow`` on ``OPTIONS``: every method of the path, not only those of the handler group
Litestar built the automatic ``OPTIONS`` handler with (it misses GET or POST when a path's
handlers are registered apart). The 405 answer takes its ``Allow`` from the router."""

from __future__ import annotations

from litestar.enums import ScopeType
from litestar.routes import HTTPRoute
from litestar.types import ASGIApp, Message, Receive, Scope, Send


def methods_by_path(routes: list[object]) -> dict[str, str]:
    """``Allow`` value of every HTTP path template."""
    found: dict[str, set[str]] = {}
    for route in routes:
        if isinstance(route, HTTPRoute):
            found.setdefault(route.path_format, set()).update(route.methods)
    return {path: ", ".join(sorted(methods)) for path, methods in found.items()}


def allow_middleware(app: ASGIApp) -> ASGIApp:
    """Rewrite ``Allow`` of the automatic ``OPTIONS`` answer from the app's routes."""
    allowed: dict[str, str] | None = None

    async def handle(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal allowed
        if scope["type"] != ScopeType.HTTP or scope.get("method") != "OPTIONS":
            await app(scope, receive, send)
            return
        if allowed is None:
            allowed = methods_by_path(list(scope["litestar_app"].routes))
        value = allowed.get(str(scope.get("path_template", "")))

        async def send_allow(message: Message) -> None:
            if message["type"] == "http.response.start" and value:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                message["headers"] = [*headers, (b"allow", value.encode())]
            await send(message)

        await app(scope, receive, send_allow)

    return handle
