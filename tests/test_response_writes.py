"""How ``svc serve``'s HTTP protocol writes answers: one write per response (status line,
headers and body together), and nothing of a finished request left for the cyclic garbage
collector (its pauses would stall every request of the worker)."""

from __future__ import annotations

import asyncio
import gc
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from api.app import create_app
from api.server import HttpSettings, protocol_class
from runner_assembly.settings import RunnerSettings
from tests.conftest import free_port
from tests.support import ADMIN_HEADER_LINE, task_body

REQUESTS = 40
BODY = b'{"ok":true}'


class CountedWrites:
    """A transport that counts the writes reaching it."""

    def __init__(self, transport: asyncio.Transport, writes: list[bytes]) -> None:
        self._transport = transport
        self.writes = writes

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self._transport, name)


async def answer(scope: dict[str, Any], receive: Callable[..., Any],
                 send: Callable[..., Any]) -> None:
    """A plain ASGI app: 200 with a small JSON body."""
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})


@asynccontextmanager
async def serving(writes: list[bytes], app: Any = answer) -> AsyncIterator[int]:
    """``app`` (its lifespan included) behind the protocol of ``svc serve`` in this process,
    each connection's writes counted."""
    base = protocol_class(HttpSettings(), 100)

    class Counted(base):  # type: ignore[valid-type, misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self.transport = CountedWrites(transport, writes)

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, http=Counted,
                                           ws="none", lifespan="auto", log_level="warning",
                                           log_config=None))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        await task


async def _exchange(port: int, requests: list[bytes]) -> list[bytes]:
    """Send each request on one kept-alive connection and read its whole answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = []
    try:
        for request in requests:
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            body = b"" if request.startswith(b"HEAD") else await reader.readexactly(length)
            answers.append(head + body)
    finally:
        writer.close()
        await writer.wait_closed()
    return answers


GET = b"GET /x HTTP/1.1\r\nHost: svc\r\n\r\n"
POST = b"POST /x HTTP/1.1\r\nHost: svc\r\nContent-Length: 2\r\n\r\n{}"
HEAD = b"HEAD /x HTTP/1.1\r\nHost: svc\r\n\r\n"


async def test_a_response_leaves_in_one_write() -> None:
    writes: list[bytes] = []
    async with serving(writes) as port:
        answers = await _exchange(port, [GET, POST, GET])
        assert writes == answers  # one write each: the header block waited for the body
        assert all(answer.startswith(b"HTTP/1.1 200") and answer.endswith(BODY)
                   for answer in answers)
        writes.clear()
        (head,) = await _exchange(port, [HEAD])
        assert b"".join(writes) == head and head.startswith(b"HTTP/1.1 200")


def _most_repeated(kinds: list[str]) -> int:
    """How often the commonest kind occurs: a cycle left by every request leaves at least
    one object of a kind per request; a connection's leaves a few in all."""
    return max(Counter(kinds).values(), default=0)


async def _garbage_of(port: int, requests: list[bytes]) -> tuple[list[bytes], list[str]]:
    """The answers to ``requests`` and the types of the garbage cycles they left."""
    await _exchange(port, requests[:2])  # the server's own first-use objects
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        answers = await _exchange(port, requests)
        gc.collect()
        return answers, [type(thing).__name__ for thing in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


async def test_finished_requests_leave_no_cyclic_garbage() -> None:
    async with serving([]) as port:
        answers, left = await _garbage_of(port, [GET, POST] * (REQUESTS // 2))
    assert len(answers) == REQUESTS
    assert "RequestResponseCycle" not in left, left[:20]
    assert _most_repeated(left) < REQUESTS // 2, left  # a connection's, not a request's


async def test_the_apps_requests_leave_no_cyclic_garbage(
        database_url: str, runner_settings: RunnerSettings) -> None:
    """Through the whole app: middleware, authentication, a submit's ledger write, a list."""
    submit = json.dumps(task_body()).encode()
    requests = [b"GET /api/v1/health HTTP/1.1\r\nHost: svc\r\n\r\n",
                b"POST /api/v1/queue/tasks HTTP/1.1\r\nHost: svc\r\n" + ADMIN_HEADER_LINE
                + b"Content-Type: application/json\r\nContent-Length: "
                + str(len(submit)).encode() + b"\r\n\r\n" + submit,
                b"GET /api/v1/queue/tasks?limit=5 HTTP/1.1\r\nHost: svc\r\n"
                + ADMIN_HEADER_LINE + b"\r\n"] * (REQUESTS // 4)
    app = create_app(database_url, settings=runner_settings)
    async with serving([], app) as port:
        answers, left = await _garbage_of(port, requests)
    assert [answer.split(b" ", 2)[1] for answer in answers] == [b"200", b"201", b"200"] * (
        REQUESTS // 4)
    assert _most_repeated(left) < REQUESTS // 4, left  # a connection's, not a request's
