"""Encoded answers of the hot GET reads, each computed once per ledger head.

Every projection row changes only in a transaction that advances the ledger head
(``ledger_head.last_seq``), so a read's answer is a function of what was asked and the head it
saw. An answer is encoded once and kept under that pair; a request that finds the head
unchanged gets the stored bytes after one one-row query instead of a query, a decode per row,
the view and an encode. Any commit moves the head, so read-your-writes and the ``updatedAfter``
and cursor semantics are those of an uncached read. Entries also expire after
:data:`MAX_AGE_S`, which bounds how long an answer outlives a projection rebuilt in place
(``svc ledger replay``, which does not move the head). The cache is per process and bounded:
several API processes stay correct, each keyed by the one head in Postgres.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import msgspec
from litestar import Response
from litestar.response.base import ASGIResponse
from litestar.types import HTTPResponseStartEvent, Receive, Scope, Send

from ledger.database import Queryable
from projections import queries
from projections import scope as scoping

MAX_ENTRIES = 512
MAX_AGE_S = 1.0
_encoder = msgspec.json.Encoder()
_JSON = (b"content-type", b"application/json")


class _AsIs(ASGIResponse):
    """The ASGI side of :class:`EncodedJson`: the start and the body, nothing to compute."""

    __slots__ = ("_body", "_start")

    def __init__(self, start: HTTPResponseStartEvent, body: bytes) -> None:
        # No super().__init__: nothing is left to compute.
        self._start = start
        self._body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(self._start)
        await send({"type": "http.response.body", "body": self._body, "more_body": False})


class EncodedJson(Response[Any]):
    """A JSON answer already encoded (headers as Litestar sends them: the given ones, then
    type and length), sent without Litestar's per-request response assembly."""

    def __init__(self, body: bytes, status_code: int = 200,
                 headers: dict[str, str] | None = None) -> None:  # no super(): nothing to merge
        self.content = body
        self.status_code = status_code
        self.headers = headers or {}
        self.media_type = "application/json"
        self.background = None
        self.cookies = []
        self.encoding = "utf-8"
        self.response_type_encoders = {}

    def to_asgi_response(self, *args: object, **kwargs: object) -> ASGIResponse:
        """The answer as it goes out (the handler layers add no headers or cookies)."""
        headers = [(name.lower().encode("latin-1"), value.encode("latin-1"))
                   for name, value in self.headers.items()]
        headers += (_JSON, (b"content-length", b"%d" % len(self.content)))
        status = self.status_code or 200
        return _AsIs({"type": "http.response.start", "status": status,
                      "headers": headers}, self.content)


def encoded(value: object, status_code: int = 200,
            headers: dict[str, str] | None = None) -> EncodedJson:
    """``value`` (a wire struct) encoded once, as an answer."""
    return EncodedJson(_encoder.encode(value), status_code, headers)


class ReadCache:
    """A bounded map of (question, head) to an encoded JSON answer."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_age_s: float = MAX_AGE_S) -> None:
        self._entries: OrderedDict[Hashable, tuple[int, float, bytes]] = OrderedDict()
        self._max_entries = max_entries
        self._max_age_s = max_age_s

    def get(self, key: Hashable, head: int) -> bytes | None:
        """The answer stored for ``key`` at ``head``, if fresh."""
        entry = self._entries.get(key)
        if entry is None or entry[0] != head or time.monotonic() - entry[1] > self._max_age_s:
            return None
        self._entries.move_to_end(key)
        return entry[2]

    def put(self, key: Hashable, head: int, body: bytes) -> None:
        """Store the answer to ``key`` as of ``head`` (an older head never replaces a newer)."""
        entry = self._entries.get(key)
        if entry is not None and entry[0] > head:
            return
        self._entries[key] = (head, time.monotonic(), body)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    async def answer(self, scope: scoping.Scope, key: Hashable, head: int,
                     compute: Callable[[], Awaitable[tuple[int, object]]]) -> Response[bytes]:
        """The JSON answer to ``key`` asked in ``scope`` at ``head``: stored, or computed
        (with the head its snapshot saw), encoded once and stored. Answers are kept per
        scope: one tenant's answer is never served to another (DESIGN 12)."""
        scoped = (scope.cache_key, key)
        body = self.get(scoped, head)
        if body is None:
            seen, value = await compute()
            body = _encoder.encode(value)
            self.put(scoped, seen, body)
        return EncodedJson(body)


class SharedHead:
    """The ledger head for concurrent readers of one process, one query for many.

    A reader never takes an answer from a query sent before it arrived (that could predate
    a commit it has already seen acknowledged): it waits for the next query, which starts
    as soon as none is running. So each reader gets the head as of some moment after its
    arrival, as if it had asked alone, while one query answers every reader that arrived
    during the previous one."""

    def __init__(self, pool: Queryable) -> None:
        self._pool = pool
        self._next: asyncio.Future[int] | None = None
        self._running = False
        self._task: asyncio.Task[None] | None = None
        """The query under way (a reference, so it cannot be collected while it runs)."""

    async def read(self) -> int:
        """The last committed changeSeq, read after this call began."""
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            self._next.add_done_callback(_retrieve)
        answer = self._next
        if not self._running:
            self._send()
        return await asyncio.shield(answer)

    def _send(self) -> None:
        answer, self._next = self._next, None
        if answer is not None:
            self._running = True
            self._task = asyncio.get_running_loop().create_task(self._query(answer),
                                                                name="ledger-head")

    async def _query(self, answer: asyncio.Future[int]) -> None:
        try:
            answer.set_result(await queries.high_water(self._pool))
        except Exception as error:
            answer.set_exception(error)
        except asyncio.CancelledError:  # the app is stopping: no further query
            answer.cancel()
            self._running = False
            raise
        self._running = False
        self._send()


def _retrieve(answer: asyncio.Future[int]) -> None:
    """Mark a shared answer's error as seen (its readers may all have gone)."""
    if not answer.cancelled():
        answer.exception()
