"""The HTTP server's settings and deadlines: keep-alive, header and body deadlines, a
connection cap kept below the file-descriptor limit, and a bounded graceful shutdown."""

from __future__ import annotations

import asyncio
import gc
import resource
from collections import OrderedDict
from dataclasses import dataclass
from typing import ClassVar, Literal, TypedDict

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

FD_RESERVE_MIN = 256
"""File descriptors always left to the database pool, logs and runner jobs (at least this
many, and at least a quarter of the limit)."""

_REFUSED_TEXT = b"too many open connections"
REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
           b"retry-after: 2\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
           % (len(_REFUSED_TEXT), _REFUSED_TEXT))
"""What a connection over the cap receives before it is closed (no idle one to make room)."""

_STOPPING_TEXT = b"the server is stopping"
STOPPING = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\nretry-after: 1\r\n\r\n%s"
            % (len(_STOPPING_TEXT), _STOPPING_TEXT))
"""What a client still sending its request receives when the server stops: nothing of that
request was acted on, so it may send it again, to this server's successor."""

RECEIVE_AT_STOP_S = 2
"""How much longer a request body still arriving when the server stops may take to arrive
(at most the shutdown grace): a client finishing its upload is served, a stuck one does not
hold the server for the whole grace."""

_TIMED_OUT_TEXT = b"request not received in time"
TIMED_OUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
             b"content-length: %d\r\nconnection: close\r\n\r\n%s"
             % (len(_TIMED_OUT_TEXT), _TIMED_OUT_TEXT))
"""What a client that started a request but missed its deadline receives before the close."""


@dataclass(frozen=True)
class HttpSettings:
    """Connection limits of ``svc serve``, in whole seconds (``SVC_HTTP_*`` and
    ``SVC_SHUTDOWN_GRACE_S``: :meth:`api.settings.ServiceSettings.http`)."""

    keepalive_s: int = 5
    header_timeout_s: int = 10
    body_timeout_s: int = 30
    max_connections: int = 4096
    shutdown_grace_s: int = 10


def raise_fd_limit() -> int:
    """Raise the soft limit on open files to the hard limit where allowed; returns the soft
    limit in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 65536


def connection_cap(requested: int, fd_limit: int) -> int:
    """The connection cap in force: ``requested``, but well below ``fd_limit``."""
    reserve = max(FD_RESERVE_MIN, fd_limit // 4)
    return max(1, min(requested, fd_limit - reserve))


YOUNG_COLLECTION_AT = 20_000
"""Tracked objects made (net of those freed) before the youngest generation is collected:
Python's 700 had a request collect many times while its own objects were alive (a batch of
tasks builds thousands), each time promoting them, to die a generation up. A request
leaves no garbage cycle (``tests/test_response_writes.py``), so a higher mark costs no
memory in the steady state."""


def settle_heap() -> None:
    """Once a serving process has started: collect, then move every object it holds into
    the collector's permanent generation. A full collection then walks only what was made
    since (tens of thousands of startup objects: modules, the app, its pools), instead of
    stalling the event loop for tens of milliseconds each time requests in flight were
    promoted past the youngest generations. From then on the youngest generation is
    collected every :data:`YOUNG_COLLECTION_AT` objects."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_AT, *gc.get_threshold()[1:])


class ConnectionRegistry:
    """The connections of one server: how many are open, and which are waiting for a
    request (idle or still sending headers), oldest first."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open = 0
        self.waiting: OrderedDict[DeadlineProtocol, None] = OrderedDict()


class JoinedWrites:
    """The transport as one response cycle sees it: the status line and headers wait for the
    body's first write, so a response leaves in one ``send`` (one system call, one segment)
    instead of two. Anything else (``100 Continue``, a ``HEAD`` answer) passes straight on."""

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self._transport = transport
        self._cycle: RequestResponseCycle | None = None if cycle.scope["method"] == "HEAD" \
            else cycle
        """The cycle until its header block is held (the cycle holds this object as its
        transport: let go of it then, or every request's cycle would wait for the cyclic
        garbage collector, with everything its scope holds)."""
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        """Hold the header block (the cycle's first write once its response started);
        send it together with the next write."""
        if self._held is not None:
            data, self._held = self._held + data, None
        elif self._cycle is not None and self._cycle.response_started:
            self._cycle = None
            self._held = data
            return
        self._transport.write(data)

    def close(self) -> None:
        """Send what is held, then close."""
        if self._held is not None:
            self._transport.write(self._held)
            self._held = None
        self._transport.close()

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline (from connection open, then
    from the start of each later request), a body deadline (from the end of the headers),
    and a connection cap that closes the oldest waiting connection to make room.

    Timers are armed per connection and per request, never per chunk of data."""

    limits: ClassVar[HttpSettings]
    registry: ClassVar[ConnectionRegistry]
    _deadline: asyncio.TimerHandle | None = None
    _counted = False
    _phase: Literal["headers", "body"] | None = None
    _stopping = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Count the connection, make room under the cap, and arm the header deadline."""
        super().connection_made(transport)
        registry = self.registry
        registry.open += 1
        self._counted = True
        if registry.open > registry.cap:
            oldest = next(iter(registry.waiting), None)
            if oldest is None:
                transport.write(REFUSED)
                self._cut()
                return
            oldest._cut()
        registry.waiting[self] = None
        self._arm(self.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection."""
        self._disarm()
        self._release()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        """A request starts: its headers are due within the header deadline (a first
        request's deadline already runs from connection open)."""
        super().on_message_begin()
        self._phase = "headers"
        if self._deadline is None:
            self._arm(self.limits.header_timeout_s)

    def on_headers_complete(self) -> None:
        """Headers are in: the connection is busy, and the body is due within its deadline."""
        self._disarm()
        self.registry.waiting.pop(self, None)
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and not isinstance(cycle.transport, JoinedWrites):
            cycle.transport = JoinedWrites(self.transport, cycle)  # type: ignore[assignment]
        self._phase = "body"
        self._arm(self.limits.body_timeout_s)

    def on_message_complete(self) -> None:
        """The whole request is in: no deadline until the next one starts."""
        super().on_message_complete()
        self._phase = None
        self._disarm()

    def on_response_complete(self) -> None:
        """When the connection goes idle, it becomes the newest waiting one."""
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None and self._counted:
            self.registry.waiting[self] = None
            self.registry.waiting.move_to_end(self)

    def shutdown(self) -> None:
        """The server stops. A request still arriving is not in flight yet: the rest of its
        body gets at most :data:`RECEIVE_AT_STOP_S` more (then it is served, its connection
        closed after the answer), a part of a header none; one that misses it is answered
        503, nothing of it acted on (a handler reads its whole body first), and closed.
        Anything else as uvicorn does: idle connections closed, a response under way
        finished within the shutdown grace."""
        if self._phase is None or self.pipeline or not self._may_answer():
            super().shutdown()
            return
        self._stopping = True
        if self._phase == "headers":
            self._expire()
            return
        super().shutdown()  # served, then closed
        window = min(self.limits.shutdown_grace_s, RECEIVE_AT_STOP_S)
        if self._deadline is None or self._deadline.when() > self.loop.time() + window:
            self._arm(window)

    def _arm(self, seconds: int) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _release(self) -> None:
        if self._counted:
            self._counted = False
            self.registry.open -= 1
            self.registry.waiting.pop(self, None)

    def _expire(self) -> None:
        """A deadline passed: answer 408 if a request was begun and nothing else is being
        answered on this connection, then close it."""
        if self._phase is not None and self._may_answer():
            self.transport.write(STOPPING if self._stopping else TIMED_OUT)
        self._cut()

    def _may_answer(self) -> bool:
        """No response is under way on the connection (pipelining, or an early answer)."""
        if self.cycle is None:
            return True
        if self._phase == "headers":  # self.cycle is the previous request's
            return self.cycle.response_complete
        return not self.cycle.response_started

    def _cut(self) -> None:
        """Close the connection now (deadline passed, or room needed under the cap)."""
        self._disarm()
        self._release()
        if not self.transport.is_closing():
            self.transport.close()


def protocol_class(settings: HttpSettings, cap: int) -> type[DeadlineProtocol]:
    """A protocol class for one server, bound to its settings and its own registry."""

    class ServerProtocol(DeadlineProtocol):
        limits = settings
        registry = ConnectionRegistry(cap)

    return ServerProtocol


WORKER_PROTOCOL = "httptools"
"""A placeholder: each worker process of ``--workers N`` replaces it with its own protocol,
bound to the settings it was handed (:class:`api.worker.WorkerConfig`)."""


class UvicornOptions(TypedDict):
    """The keyword arguments :func:`uvicorn_options` gives ``uvicorn.run``."""

    http: type[DeadlineProtocol] | str
    ws: Literal["none"]
    loop: Literal["uvloop"]
    workers: int
    timeout_keep_alive: int
    timeout_graceful_shutdown: int
    proxy_headers: Literal[False]


class ServeOptions(UvicornOptions):
    """Every keyword argument ``svc serve`` gives uvicorn (``uvicorn.run`` or its
    supervisor)."""

    host: str
    port: int
    log_level: str
    access_log: bool
    log_config: None


def uvicorn_options(settings: HttpSettings, workers: int = 1) -> UvicornOptions:
    """Keyword arguments for ``uvicorn.run``: uvloop, our protocol, the keep-alive timeout
    and the shutdown grace; no ``X-Forwarded-*`` rewriting of the client address and scheme
    (nothing reads them: a layer less per request). With one worker, raises this process's
    soft fd limit first; with more, each worker builds its protocol (and raises its own
    limit) when it starts."""
    if workers == 1:
        protocol: type[DeadlineProtocol] | str = protocol_class(
            settings, connection_cap(settings.max_connections, raise_fd_limit()))
    else:
        protocol = WORKER_PROTOCOL
    return {"http": protocol, "ws": "none", "loop": "uvloop", "workers": workers,
            "timeout_keep_alive": settings.keepalive_s,
            "timeout_graceful_shutdown": settings.shutdown_grace_s, "proxy_headers": False}
