"""The runner's frequent reports, its lines and heartbeats, taken without Litestar's handler
layers (docs/decisions.md, "A runner's lines and heartbeats beside Litestar's handler layers").

A fleet of agents sends one of these a second per job, and for such a small request the
layers between the router and the handler (authentication, which waves a runner route
through; the handler's dependency and parameter resolution; the response's assembly) cost
more than the report itself. This middleware answers the two routes as their handlers
would, with the same functions (:func:`api.runner_routes.take_lines`,
:func:`~api.runner_routes.take_heartbeat`): the body read under the route's limit, decoded
strictly, the job's token checked by the runner protocol, the answer encoded once. It sits
inside the observability middleware, so a report is counted, logged and given its request
id as before, and an error it raises is answered there with the one error envelope.

Anything else passes on to Litestar untouched, and so does a report whose job id is not one
the route's parameter accepts: Litestar's own validation answers it. The app refuses to start
with the middleware if the two routes grow anything it would step over
(:func:`bypass_problems`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import get_args

from litestar import Litestar
from litestar.enums import ScopeType
from litestar.handlers import HTTPRouteHandler
from litestar.params import KwargDefinition
from litestar.routes import HTTPRoute
from litestar.types import ASGIApp, Receive, Scope, Send

from api.access import runner_access
from api.auth_principal import ACTING
from api.body import receive_body
from api.params import SessionId
from api.read_cache import encoded
from api.runner_routes import RunnerController, take_heartbeat, take_lines
from api.runner_service import RunnerApi

Report = Callable[[RunnerApi, str, str | None, bytes], Awaitable[object]]
JOB_TEMPLATE = RunnerController.path.replace(":str}", "}")
"""The runner routes' path template as Litestar's router names it (no parameter type)."""
REPORTS: dict[str, Report] = {
    f"{JOB_TEMPLATE}/lines": take_lines,
    f"{JOB_TEMPLATE}/heartbeat": take_heartbeat,
}
"""The routes taken here, by path template, with what takes each."""
_JOB_ID: KwargDefinition = get_args(SessionId)[1]
"""The routes' ``runner_job_id`` parameter: its bounds and pattern."""
_JOB_PATTERN = re.compile(_JOB_ID.pattern or "")


def accepted_job_id(value: object) -> str | None:
    """``value`` if the routes' ``runner_job_id`` parameter accepts it (as msgspec checks
    it: the pattern searched, not matched), else None."""
    if isinstance(value, str) and (_JOB_ID.min_length or 0) <= len(value) \
            <= (_JOB_ID.max_length or len(value)) and _JOB_PATTERN.search(value):
        return value
    return None


def bypass_problems(app: Litestar) -> list[str]:
    """Why the reports' handler layers could not be stepped over in ``app`` (empty: they
    can): each route must exist, answer a runner token only, and have nothing of its own
    that the middleware would skip (guards, hooks, response headers or cookies, middleware
    of a router, controller or handler), nor may the app check hosts, CSRF or compress."""
    problems = [f"the app sets {name}" for name in ("allowed_hosts", "csrf_config",
                                                    "compression_config")
                if getattr(app, name, None)]
    handlers = {route.path_format: handler for route in app.routes
                if isinstance(route, HTTPRoute) for handler in route.route_handlers
                if isinstance(handler, HTTPRouteHandler) and "POST" in handler.http_methods}
    for template in REPORTS:
        handler = handlers.get(template)
        if handler is None:
            problems.append(f"no POST route {template}")
            continue
        layers = handler.ownership_layers
        if runner_access(handler) != "only":
            problems.append(f"{template} takes more than a runner token")
        if handler.resolve_guards() or handler.resolve_before_request() \
                or handler.resolve_after_response() or handler.resolve_response_headers() \
                or handler.resolve_response_cookies() \
                or any(getattr(layer, "after_request", None) for layer in layers) \
                or any(getattr(layer, "middleware", None) for layer in layers[1:]):
            problems.append(f"{template} has guards, hooks, headers or middleware of its own")
    return problems


def report_middleware(runner_api: Callable[[], RunnerApi]) -> Callable[[ASGIApp], ASGIApp]:
    """ASGI middleware (after routing): ``POST`` of a runner's lines or heartbeat answered
    here, with the started app's runner protocol (``runner_api``)."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def handle(scope: Scope, receive: Receive, send: Send) -> None:
            take = REPORTS.get(str(scope.get("path_template", ""))) \
                if scope["type"] == ScopeType.HTTP and scope.get("method") == "POST" else None
            job = accepted_job_id(scope.get("path_params", {}).get("runner_job_id")) \
                if take is not None else None
            handler = scope.get("route_handler")
            if take is None or job is None or not isinstance(handler, HTTPRouteHandler):
                await app(scope, receive, send)
                return
            runner = runner_api()
            acting = ACTING.set(None)  # as the authentication middleware does for the route
            try:
                raw = await receive_body(scope, receive,
                                         handler.resolve_request_max_body_size())
                answer = await take(runner, job, _authorization(scope), raw)
            finally:
                ACTING.reset(acting)
            await encoded(answer).to_asgi_response()(scope, receive, send)

        return handle

    return wrap


def _authorization(scope: Scope) -> str | None:
    """The request's first ``Authorization`` header, as Litestar's headers give it."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            return value.decode("latin-1")
    return None
