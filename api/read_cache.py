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

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable

import msgspec
from litestar import Response

MAX_ENTRIES = 512
MAX_AGE_S = 1.0
_encoder = msgspec.json.Encoder()


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

    async def answer(self, key: Hashable, head: int,
                     compute: Callable[[], Awaitable[tuple[int, object]]]) -> Response[bytes]:
        """The JSON answer to ``key`` at ``head``: stored, or computed (with the head its
        snapshot saw), encoded once and stored."""
        body = self.get(key, head)
        if body is None:
            seen, value = await compute()
            body = _encoder.encode(value)
            self.put(key, seen, body)
        return Response(body, media_type="application/json")
