"""The runner's frequent reports, its lines and heartbeats, taken without Litestar's handler
layers (docs/performance.md, "A report beside the framework").

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
the route's parameter accepts: Litestar's own validation answers it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from litestar.enums import ScopeType
from litestar.handlers import HTTPRouteHandler
from litestar.types import ASGIApp, Receive, Scope, Send

from api.body import receive_body
from api.read_cache import encoded
from api.runner_routes import RunnerController, take_heartbeat, take_lines
from api.runner_service import RunnerApi
from runner_assembly.contract.messages import IDENTIFIER_PATTERN

Report = Callable[[RunnerApi, str, str | None, bytes], Awaitable[object]]
JOB_TEMPLATE = RunnerController.path.replace(":str}", "}")
"""The runner routes' path template as Litestar's router names it (no parameter type)."""
REPORTS: dict[str, Report] = {
    f"{JOB_TEMPLATE}/lines": take_lines,
    f"{JOB_TEMPLATE}/heartbeat": take_heartbeat,
}
"""The routes taken here, by path template, with what takes each."""
_JOB_ID = re.compile(IDENTIFIER_PATTERN)
JOB_ID_MAX = 128
"""The route parameter's bounds (:data:`api.params.SessionId`), checked as msgspec checks
them (a pattern is searched, not matched)."""


def accepted_job_id(value: object) -> str | None:
    """``value`` if the routes' ``runner_job_id`` parameter accepts it, else None."""
    if isinstance(value, str) and 1 <= len(value) <= JOB_ID_MAX and _JOB_ID.search(value):
        return value
    return None


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
            raw = await receive_body(scope, receive, handler.resolve_request_max_body_size())
            answer = await take(runner_api(), job, _authorization(scope), raw)
            await encoded(answer).to_asgi_response()(scope, receive, send)

        return handle

    return wrap


def _authorization(scope: Scope) -> str | None:
    """The request's first ``Authorization`` header, as Litestar's headers give it."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            return value.decode("latin-1")
    return None
