"""Group commit for the runners' frequent reports: the reports that arrive together go to
Postgres in one statement and one commit (DESIGN 3 (b), applied to line batches and beats).

A fleet of agents sends hundreds of small reports a second. Each alone costs Postgres a
round trip, a transaction and a WAL flush, which cost more than the report's own rows
(``docs/performance.md``). Here a report waits for the group in flight, or, while several
jobs are reporting, for :data:`GATHER_S` more reports, then the group is written by one
call of ``write_group``, in an order fixed by each report's key (a job's rows are locked in
the same order by every group). A report arriving alone, or from the only job reporting,
is written at once: a single printing agent never waits for a group that will not come.

When the group's statement fails (a row locked elsewhere for longer than the group's lock
timeout, a report the statement refuses by raising), no report of it is answered from it:
each is written again on its own by ``write_one`` (a key's reports in their order), so each
gets its own answer or error, as without grouping; when the database is down, the group's
error answers them all. A report is idempotent by its numbering, so one written by a group
whose commit was lost is answered as already taken, never stored twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ledger.errors import LedgerUnavailable

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
"""Groups being written at once (a group retried report by report included)."""
LOCK_TIMEOUT = "250ms"
"""The longest a group's statement waits for a row lock (one job's, held elsewhere) before
it fails and its reports are written one by one (``lock_timeout``, for its transaction)."""


class GroupCancelled(LedgerUnavailable):
    """The write of a report's group was cancelled (the server is stopping): answered 503
    ``infra-failed``, and the runner sends the report again."""


@dataclass
class _Waiting(Generic[Item, Result]):
    item: Item
    key: str
    weight: int
    at: float
    answer: asyncio.Future[Result] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())

    def answered(self, result: Result) -> None:
        """Give the caller ``result``, unless it went away."""
        if not self.answer.done():
            self.answer.set_result(result)

    def failed(self, error: BaseException) -> None:
        """Give the caller ``error``, unless it went away or was answered."""
        if not self.answer.done():
            self.answer.set_exception(error)


class Grouped(Generic[Item, Result]):
    """Writes items in groups (see the module's description); :meth:`write` is one item's
    answer."""

    def __init__(self, write_group: Callable[[Sequence[Item]], Awaitable[Sequence[Result]]],
                 write_one: Callable[[Item], Awaitable[Result]], key: Callable[[Item], str],
                 weight: Callable[[Item], int] = lambda _: 1, *,
                 retry_alone: Callable[[Exception], bool] = lambda _: True,
                 gather_s: float = GATHER_S, max_items: int = MAX_ITEMS,
                 max_weight: int = MAX_WEIGHT, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        """``write_group(items)`` writes items (sorted by ``key``, stable) in one statement
        and answers each in order; ``write_one(item)`` writes one alone. A group that failed
        with an error ``retry_alone`` refuses (the database is unreachable) answers each of
        its reports with that error instead of writing them one by one."""
        self._write_group = write_group
        self._write_one = write_one
        self._key = key
        self._weight = weight
        self._retry_alone = retry_alone
        self.gather_s = gather_s
        self.max_items = max_items
        self.max_weight = max_weight
        self.max_in_flight = max_in_flight
        self._waiting: list[_Waiting[Item, Result]] = []
        self._waiting_weight = 0
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
        self._waiting_weight += waiting.weight
        if self._timer is not None and self._full():
            self._timer.cancel()  # a full group does not wait for more
            self._timer = None
        self._kick()
        return await waiting.answer

    def _full(self) -> bool:
        return len(self._waiting) >= self.max_items or self._waiting_weight >= self.max_weight

    def _kick(self) -> None:
        """Start groups while one may start: at once, or, while crowded, once the oldest
        report waiting has gathered others for :data:`GATHER_S`."""
        while self._waiting and self._in_flight < self.max_in_flight and self._timer is None:
            now = time.monotonic()
            wait = self._waiting[0].at + self.gather_s - now
            if now < self._crowd_until and wait > 0 and not self._full():
                self._timer = asyncio.get_running_loop().call_later(wait, self._gathered)
                return
            self._start()

    def _gathered(self) -> None:
        self._timer = None
        self._kick()

    def _start(self) -> None:
        group: list[_Waiting[Item, Result]] = []
        weight = 0
        while self._waiting and len(group) < self.max_items and \
                (not group or weight + self._waiting[0].weight <= self.max_weight):
            waiting = self._waiting.pop(0)
            self._waiting_weight -= waiting.weight
            if waiting.answer.done():  # its caller went away before it was written
                continue
            group.append(waiting)
            weight += waiting.weight
        if not group:
            return
        self._in_flight += 1
        self.groups += 1
        self.items += len(group)
        ordered = sorted(group, key=lambda waiting: waiting.key)
        task = asyncio.ensure_future(self._run(ordered))
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._ended(done, ordered))

    def _ended(self, task: asyncio.Task[None], group: list[_Waiting[Item, Result]]) -> None:
        """A group's task is over, however it ended: no caller waits forever."""
        self._tasks.discard(task)
        self._in_flight -= 1
        error: BaseException = GroupCancelled("the write of this report was cancelled") \
            if task.cancelled() else task.exception() or GroupCancelled("no answer")
        for waiting in group:
            waiting.failed(error)
        self._kick()

    async def _run(self, group: list[_Waiting[Item, Result]]) -> None:
        try:
            results = await self._write_group([waiting.item for waiting in group])
        except Exception as error:
            if not self._retry_alone(error):
                raise  # every caller gets it (_ended)
            await self._each_alone(group)
            return
        for waiting, result in zip(group, results, strict=True):
            waiting.answered(result)

    async def _each_alone(self, group: list[_Waiting[Item, Result]]) -> None:
        """Write each report of a failed group on its own: a key's reports one after the
        other, in their order, different keys at once."""
        by_key: dict[str, list[_Waiting[Item, Result]]] = {}
        for waiting in group:
            by_key.setdefault(waiting.key, []).append(waiting)

        async def in_order(reports: list[_Waiting[Item, Result]]) -> None:
            for waiting in reports:
                await self._alone(waiting)

        await asyncio.gather(*(in_order(reports) for reports in by_key.values()))

    async def _alone(self, waiting: _Waiting[Item, Result]) -> None:
        try:
            waiting.answered(await self._write_one(waiting.item))
        except Exception as error:
            waiting.failed(error)
