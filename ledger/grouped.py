"""Group commit for the runners' frequent reports: the reports that arrive together go to
Postgres in one statement and one commit (DESIGN 3 (b), applied to line batches and beats).

A fleet of agents sends hundreds of small reports a second. Each alone costs Postgres a
round trip, a transaction and a WAL flush, which cost more than the report's own rows
(``docs/performance.md``). Here a report waits for the group in flight, or, while several
jobs are reporting, for :data:`GATHER_S` more reports, then the group is written by one
call of ``write_group``, in an order fixed by each report's key (a job's rows are locked in
the same order by every group). A report arriving alone, or from the only job reporting,
is written at once: a single printing agent never waits for a group that will not come.

When the group's statement fails (a deadlock between two groups, a row a report refuses
by raising), no report of it is answered from it: each is written again on its own by
``write_one``, so each gets its own answer or error, as without grouping. A report is
idempotent by its numbering, so one written by a group whose commit was lost is answered
as already taken, never stored twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

GATHER_S = 0.05
"""How long a report waits for others while several jobs are reporting. Measured with 200
jobs printing a line a second (``docs/performance.md``): Postgres's CPU a batch fell by a
third at 10 ms, by half at 30 ms, by nearly two thirds at 50 ms, the listener's by a third."""
CROWD_S = 0.1
"""Reports of two jobs this close together mean several jobs are reporting."""
MAX_ITEMS = 64
MAX_WEIGHT = 1024 * 1024
"""A group holds at most this much weight (a line batch weighs its bytes); a heavier
report is a group of its own."""
MAX_IN_FLIGHT = 2
"""Groups written at once: one gathers while the other commits."""


@dataclass
class _Waiting(Generic[Item, Result]):
    item: Item
    key: str
    weight: int
    at: float
    answer: asyncio.Future[Result] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


class Grouped(Generic[Item, Result]):
    """Writes items in groups (see the module's description); :meth:`write` is one item's
    answer."""

    def __init__(self, write_group: Callable[[Sequence[Item]], Awaitable[Sequence[Result]]],
                 write_one: Callable[[Item], Awaitable[Result]], key: Callable[[Item], str],
                 weight: Callable[[Item], int] = lambda _: 1, *,
                 gather_s: float = GATHER_S, max_items: int = MAX_ITEMS,
                 max_weight: int = MAX_WEIGHT) -> None:
        """``write_group(items)`` writes items (sorted by ``key``, stable) in one statement
        and answers each in order; ``write_one(item)`` writes one alone."""
        self._write_group = write_group
        self._write_one = write_one
        self._key = key
        self._weight = weight
        self.gather_s = gather_s
        self.max_items = max_items
        self.max_weight = max_weight
        self._waiting: list[_Waiting[Item, Result]] = []
        self._in_flight = 0
        self._timer: asyncio.TimerHandle | None = None
        self._last_key = ""
        self._last_at = float("-inf")
        self._crowd_until = float("-inf")
        self._tasks: set[asyncio.Task[None]] = set()
        self.groups = 0
        """Groups written so far (a group of one included), for measurements."""
        self.items = 0

    async def write(self, item: Item) -> Result:
        """Write ``item`` with the group it joins; its own answer (or error)."""
        waiting: _Waiting[Item, Result] = _Waiting(item, self._key(item), self._weight(item),
                                                   time.monotonic())
        now = waiting.at
        if waiting.key != self._last_key and now - self._last_at < CROWD_S:
            self._crowd_until = now + CROWD_S
        self._last_key, self._last_at = waiting.key, now
        self._waiting.append(waiting)
        if self._timer is not None and len(self._waiting) >= self.max_items:
            self._timer.cancel()  # a full group does not wait for more
            self._timer = None
        self._kick()
        return await waiting.answer

    def _kick(self) -> None:
        """Start a group if one may start: at once, or, while crowded, once the oldest
        report waiting has gathered others for :data:`GATHER_S`."""
        if not self._waiting or self._in_flight >= MAX_IN_FLIGHT or self._timer is not None:
            return
        now = time.monotonic()
        wait = self._waiting[0].at + self.gather_s - now
        if now < self._crowd_until and len(self._waiting) < self.max_items and wait > 0:
            self._timer = asyncio.get_running_loop().call_later(wait, self._gathered)
            return
        self._start()

    def _gathered(self) -> None:
        self._timer = None
        if self._waiting and self._in_flight < MAX_IN_FLIGHT:
            self._start()

    def _start(self) -> None:
        group: list[_Waiting[Item, Result]] = []
        weight = 0
        while self._waiting and len(group) < self.max_items and \
                (not group or weight + self._waiting[0].weight <= self.max_weight):
            waiting = self._waiting.pop(0)
            if waiting.answer.done():  # its caller went away before it was written
                continue
            group.append(waiting)
            weight += waiting.weight
        if not group:
            return
        self._in_flight += 1
        task = asyncio.ensure_future(self._run(sorted(group, key=lambda w: w.key)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, group: list[_Waiting[Item, Result]]) -> None:
        try:
            self.groups += 1
            self.items += len(group)
            try:
                results = await self._write_group([waiting.item for waiting in group])
            except Exception:
                await asyncio.gather(*(self._alone(waiting) for waiting in group))
                return
            for waiting, result in zip(group, results, strict=True):
                if not waiting.answer.done():
                    waiting.answer.set_result(result)
        except BaseException as error:  # cancelled: no caller may wait forever
            for waiting in group:
                if not waiting.answer.done():
                    waiting.answer.set_exception(error)
            raise
        finally:
            self._in_flight -= 1
            self._kick()

    async def _alone(self, waiting: _Waiting[Item, Result]) -> None:
        try:
            result = await self._write_one(waiting.item)
        except Exception as error:
            if not waiting.answer.done():
                waiting.answer.set_exception(error)
            return
        if not waiting.answer.done():
            waiting.answer.set_result(result)
