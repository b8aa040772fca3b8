"""Group-commit command execution: load and decide, then append and project in one statement.

Concurrent commands of one process are queued and committed together: one transaction, one
head-row lock and one WAL flush serve a whole batch (DESIGN.md 3, option b). The batch is
written by one statement (``ledger.store.commit``) that locks the head row first and holds it
only while Postgres runs it, never across a turn of this process: commits are ordered by
``change_seq`` across processes, and a reader that has seen changeSeq N never later sees a
new entry at or below N. A batch decided from stored rows is numbered after the head this
writer knows and applies only while that is still the head (otherwise it is decided again);
a batch that read nothing (fresh tasks) is numbered by Postgres wherever the head is.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import asyncpg
import msgspec
from asyncpg.transaction import Transaction

from ledger import store
from ledger.database import DbConnection
from ledger.errors import CommitUnknown, DomainError, LedgerUnavailable, StreamVersionConflict
from ledger.events import LedgerEvent
from ledger.streams import Command, RecordedEntry, stream_kind_for
from ledger.task import SubmitTask
from ledger.together import Statement


class ProjectFn(Protocol):
    """The projection writes for a batch's entries (``projections.store.plan_projection``):
    it may read the rows they change, and returns array-fed upserts that run in the append's
    statement. With ``numbered_by_postgres`` the entries are numbered from 1, and it answers
    None when their rows would depend on a stored row."""

    def __call__(self, conn: DbConnection, entries: list[RecordedEntry], *,
                 numbered_by_postgres: bool = False) -> Awaitable[Sequence[Statement] | None]:
        ...


class Writer(Protocol):
    """What executes commands: a :class:`LedgerWriter`, or a worker's
    :class:`ledger.relay.RelayedWriter` in front of one."""

    async def start(self) -> None: ...
    async def close(self) -> None: ...
    async def execute(self, command: Command, actor: str) -> Outcome: ...
    async def execute_all(self, commands: Sequence[Command], actor: str, *,
                          atomic: bool = False) -> list[Outcome]: ...
    async def plan(self, command: Command) -> Outcome: ...
    async def plan_all(self, commands: Sequence[Command]) -> list[Outcome]: ...


MAX_CONFLICT_RETRIES = 3
PIPELINED = 2
"""Batches of fresh tasks one writer has in flight at once."""
GATHER_SHARE = 0.5
"""While a batch commits, the next one gathers commands until this share of a commit's
usual time has passed since it started (or it ended): not a batch of one at once."""
COMMIT_TIME_WEIGHT = 0.2
"""The weight of the newest commit in the moving average of commit times."""
OPTIMISTIC_TRIES = 3
"""Commits of one batch after a head that another process moved first, before the batch is
decided under the head lock instead."""


@dataclass
class Outcome:
    """What a command did: the events it appended (none for a no-op) and the state after;
    ``entries`` are those events as committed (changeSeq, version, time)."""

    stream_id: str
    events: list[LedgerEvent]
    state: Any
    change_seq: int | None = None
    before: Any = None
    entries: list[RecordedEntry] = field(default_factory=list)


@dataclass(frozen=True)
class _Together:
    """Commands committed all or none, in order (``execute_all(..., atomic=True)``)."""

    commands: tuple[Command, ...]


Result = Outcome | list[Outcome] | Exception
"""What one queued item got: its outcome, the outcomes of a :class:`_Together`, or why not."""


@dataclass
class _Item:
    command: Command | _Together
    actor: str
    future: asyncio.Future[Any]
    pending_indexes: list[int] = field(default_factory=list)
    """The batch's pending events this item appends (per command of a :class:`_Together`:
    ``pending_groups``)."""
    pending_groups: list[list[int]] = field(default_factory=list)
    after: _Item | None = None
    """The command before this one in an :meth:`LedgerWriter.execute_all` group."""

    def commands(self) -> tuple[Command, ...]:
        """The commands this item carries."""
        command = self.command
        return command.commands if isinstance(command, _Together) else (command,)


@dataclass
class _Decided:
    """A batch decided: each command's outcome, its entries ready to append, and the
    projection writes that go with them."""

    outcomes: list[Result]
    prepared: store.Prepared
    statements: list[Statement]


class _Skipped(Exception):
    """A grouped command not run because the one before it was refused or failed."""


def utc_now() -> datetime:
    """The wall clock in UTC."""
    return datetime.now(UTC)


async def load_states(conn: DbConnection, commands: Sequence[Command]) -> dict[str, Any]:
    """Fold each addressed stream into ``(state, stream_version)``.

    Commands that create their stream (``creates_stream``) start from nothing, unread. A
    stream of another type under the same id (a session named like a task) is not this
    command's stream: its state is nothing (not found), at its real version.
    """
    existing = {c.stream_id for c in commands if not getattr(c, "creates_stream", False)}
    streams = await store.read_streams(conn, sorted(existing)) if existing else {}
    states: dict[str, Any] = {}
    for command in commands:
        kind = stream_kind_for(command)
        state, version = None, 0
        entries = streams.get(command.stream_id, [])
        if any(entry.stream_type != kind.stream_type for entry in entries):
            states[command.stream_id] = (None, entries[-1].stream_version)
            continue
        for entry in entries:
            state, version = kind.evolve(state, entry.event), entry.stream_version
        states[command.stream_id] = (state, version)
    return states


class LedgerWriter:
    """Executes commands against the ledger, batching concurrent ones into one transaction."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        project: ProjectFn,
        *,
        max_batch: int = 256,
        clock: Callable[[], datetime] = utc_now,
        on_commit: Callable[[list[RecordedEntry]], None] | None = None,
    ) -> None:
        self._pool = pool
        self._project = project
        self._on_commit = on_commit
        """Told each batch's entries once they are committed (metrics)."""
        self._max_batch = max_batch
        self._clock = clock
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._commit_s = 0.0
        """How long a batch usually takes to commit (a moving average, seconds)."""
        self._last_start = 0.0
        """When the newest batch in flight started (the loop's clock)."""
        self._head: store.Head | None = None
        """The head this writer last committed or read: what it decides the next batch
        after, until a commit shows that another process moved it."""
        self._kept: list[DbConnection] = []
        """Connections a batch left as it found them, kept for the next (at most one per
        batch in flight): a release and an acquire cost a task, a timeout and a wake-up
        per batch, a tenth of a lone submit's CPU."""

    async def start(self) -> None:
        """Start the batching loop."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ledger-writer")

    async def close(self) -> None:
        """Stop the loop; queued commands fail with ``infra-failed`` and change nothing."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while self._kept:
            with contextlib.suppress(Exception):
                await self._pool.release(self._kept.pop())
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if not item.future.done():
                item.future.set_exception(LedgerUnavailable("the service is shutting down"))

    async def execute(self, command: Command, actor: str) -> Outcome:
        """Append the command's events (with its projections) and return the outcome."""
        return await self.enqueue(command, actor)

    def enqueue(self, command: Command, actor: str) -> asyncio.Future[Outcome]:
        """Queue the command for the next batch: :meth:`execute` without awaiting it."""
        if self._task is None:
            raise LedgerUnavailable("the ledger writer is not running")
        # The writer's own loop (no running-loop look-up per command); the queue is unbounded.
        future: asyncio.Future[Outcome] = self._task.get_loop().create_future()
        self._queue.put_nowait(_Item(command, actor, future))
        return future

    async def execute_all(self, commands: Sequence[Command], actor: str, *,
                          atomic: bool = False) -> list[Outcome]:
        """Execute ``commands`` in order as if one after another, but in one transaction
        when the batch allows (one head lock, one WAL flush). The first refusal or failure
        is raised and the commands after it are not run; those before it stay committed,
        exactly as with consecutive :meth:`execute` calls.

        ``atomic``: all of them or none, in one transaction; a refusal is raised with
        ``details["index"]``, the command's place in ``commands``, and nothing is stored."""
        if self._task is None:
            raise LedgerUnavailable("the ledger writer is not running")
        loop = self._task.get_loop()
        if atomic:
            together: asyncio.Future[list[Outcome]] = loop.create_future()
            self._queue.put_nowait(_Item(_Together(tuple(commands)), actor, together))
            return await together
        items: list[_Item] = []
        for command in commands:  # queued without yielding: the next batch takes them all
            items.append(_Item(command, actor, loop.create_future(),
                               after=items[-1] if items else None))
            self._queue.put_nowait(items[-1])
        results = await asyncio.gather(*(item.future for item in items),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, _Skipped):
                raise result
        return [result for result in results if isinstance(result, Outcome)]

    async def plan(self, command: Command) -> Outcome:
        """Decide without appending: the dry-run of a command. Raises the same refusals."""
        async with self._pool.acquire() as conn:
            states = await load_states(conn, [command])
        kind = stream_kind_for(command)
        before, _ = states[command.stream_id]
        events = kind.decide(before, command)
        state = before
        for event in events:
            state = kind.evolve(state, event)
        return Outcome(command.stream_id, events, state, before=before)

    async def plan_all(self, commands: Sequence[Command]) -> list[Outcome]:
        """Decide ``commands`` in order without appending, each seeing the ones before it:
        the dry-run of ``execute_all(commands, atomic=True)``, refusing as it does."""
        async with self._pool.acquire() as conn:
            states = await load_states(conn, commands)
        pending: list[store.PendingEvent] = []
        decide = functools.partial(_decide_one, states=states, pending=pending, actor="",
                                   now=self._clock())
        result, _ = _decide_together(commands, decide, states, pending)
        if isinstance(result, DomainError):
            raise result
        return result

    async def _run(self) -> None:
        """Take what is queued as a batch and commit it. Batches of fresh tasks and keyed
        submits (:func:`_may_create`), which Postgres numbers where the head is, overlap (up
        to :data:`PIPELINED`): the next one is decided while the one ahead commits, and
        waits at the head row inside Postgres, not for this process to come round (a
        guessed stream that a batch ahead stores makes the unique stream version refuse
        the later statement whole, which is then decided again from stored rows). Any
        other batch waits until every earlier one has ended, and runs alone. While one is
        committing, the next gathers for up to half a usual commit (:data:`GATHER_SHARE`):
        sent at once it would hold the head row for a whole commit with one command."""
        in_flight: set[asyncio.Task[None]] = set()
        batch: list[_Item] = []
        try:
            while True:
                batch = [await self._queue.get()]
                size = len(batch[0].commands())
                if in_flight:  # gather while the batch ahead commits, not a batch of one
                    gathered = self._last_start + GATHER_SHARE * self._commit_s
                    wait = gathered - asyncio.get_running_loop().time()
                    if wait > 0:
                        await asyncio.wait(in_flight, timeout=wait,
                                           return_when=asyncio.FIRST_COMPLETED)
                while size < self._max_batch and not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                    size += len(batch[-1].commands())
                overlaps = all(item.after is None and all(map(_may_create, item.commands()))
                               for item in batch)
                while in_flight and (not overlaps or len(in_flight) >= PIPELINED):
                    await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                task = asyncio.create_task(self._commit(batch))
                self._last_start, batch = asyncio.get_running_loop().time(), []
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
        finally:
            for item in batch:  # taken, never sent: nothing of it changed
                _fail(item, LedgerUnavailable("the service is shutting down"))
            for task in in_flight:  # stopped: the batches in flight may commit or not
                task.cancel()
            if in_flight:
                await asyncio.wait(in_flight)

    async def _commit(self, batch: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await self._commit_batch(batch)
            took = loop.time() - started
            self._commit_s += (COMMIT_TIME_WEIGHT if self._commit_s else 1.0) * (
                took - self._commit_s)  # the first commit seeds the average
        except asyncio.CancelledError:
            for item in batch:
                _fail(item, CommitUnknown("the service stopped while committing: the change "
                                          "may or may not be stored"))
            raise

    async def _commit_batch(self, batch: list[_Item]) -> None:
        for _ in range(MAX_CONFLICT_RETRIES):
            try:
                outcomes = await self._try_batch(batch)
            except StreamVersionConflict:
                continue
            except CommitUnknown as unknown:  # never re-run: the batch may be stored
                for item in batch:
                    _fail(item, unknown)
                return
            except Exception as error:  # isolate the failing command, then report it
                if len(batch) > 1:
                    for item in batch:
                        await self._commit_batch([item])
                    return
                _fail(batch[0], store.translate_error(error))
                return
            for item, outcome in zip(batch, outcomes, strict=True):
                if item.future.done():
                    continue
                if isinstance(outcome, Exception):
                    item.future.set_exception(outcome)
                else:
                    item.future.set_result(outcome)
            return
        for item in batch:
            _fail(item, StreamVersionConflict())

    async def _connection(self) -> DbConnection:
        """A kept connection that is still open, else one from the pool."""
        while self._kept:
            conn = self._kept.pop()
            if _open(conn):
                return conn
            with contextlib.suppress(Exception):  # a lost one has returned itself already
                await self._pool.release(conn)
        return await self._pool.acquire()

    async def _try_batch(self, batch: list[_Item]) -> list[Result]:
        conn = await self._connection()
        try:
            outcomes, recorded = await self._commit_on(conn, batch)
        except BaseException:
            # A broken connection may fail its release: that must never replace the batch's
            # own outcome (a commit that succeeded, or commit-unknown) with another error.
            with contextlib.suppress(Exception):
                await self._pool.release(conn)
            raise
        if len(self._kept) < PIPELINED and _open(conn) and not conn.is_in_transaction():
            self._kept.append(conn)
        else:
            with contextlib.suppress(Exception):
                await self._pool.release(conn)
        if recorded and self._on_commit is not None:
            self._on_commit(recorded)
        for item, result in zip(batch, outcomes, strict=True):
            if isinstance(result, Outcome):
                _with_entries(result, item.pending_indexes, recorded)
            elif isinstance(result, list):
                for outcome, indexes in zip(result, item.pending_groups, strict=True):
                    _with_entries(outcome, indexes, recorded)
        return outcomes

    async def _commit_on(
        self, conn: DbConnection, batch: list[_Item]
    ) -> tuple[list[Result], list[RecordedEntry]]:
        """Commit the batch in one statement: numbered by Postgres when it read nothing,
        else after the head this writer knows, decided again (up to :data:`OPTIMISTIC_TRIES`
        times, then under the head lock) when another process moved that head first.

        A batch whose commands all create their stream, or probably do (:func:`_may_create`),
        reads nothing and is numbered by Postgres; when a guessed stream exists after all,
        the ledger's unique stream version refuses the whole statement (nothing is written)
        and the batch is decided from stored rows instead."""
        commands = [command for item in batch for command in item.commands()]
        if all(map(_may_create, commands)):
            guessed = not all(getattr(command, "creates_stream", False) for command in commands)
            try:
                decided = await self._decide(conn, batch, None)
                # a refusal decided on guessed (unread) streams says nothing: read them
                if decided is not None and not (guessed and any(
                        isinstance(outcome, Exception) for outcome in decided.outcomes)):
                    written = await self._write(conn, decided, None)
                    assert written is not None, "numbered where the head is"
                    return written
            except StreamVersionConflict:
                if not guessed:
                    raise  # a real conflict
        for _ in range(OPTIMISTIC_TRIES):
            head, self._head = self._head or await store.read_head(conn), None
            decided = await self._decide(conn, batch, head)
            assert decided is not None
            if (written := await self._write(conn, decided, head)) is not None:
                return written
        return await self._commit_locked(conn, batch)

    async def _write(self, conn: DbConnection, decided: _Decided, after: store.Head | None
                     ) -> tuple[list[Result], list[RecordedEntry]] | None:
        """Commit a decided batch (nothing to write when its commands changed nothing);
        None when it was numbered after a head that had moved."""
        if not decided.prepared.recorded:
            self._head = after or self._head
            return decided.outcomes, []
        committed = await store.commit(conn, after, decided.prepared, decided.statements)
        if committed is None:
            return None
        if self._head is None or committed.head.last_seq > self._head.last_seq:
            self._head = committed.head  # overlapping batches may answer out of order
        recorded = decided.prepared.recorded
        if committed.shift:
            recorded = [msgspec.structs.replace(entry,
                                                change_seq=entry.change_seq + committed.shift)
                        for entry in recorded]
        return decided.outcomes, recorded

    async def _commit_locked(
        self, conn: DbConnection, batch: list[_Item]
    ) -> tuple[list[Result], list[RecordedEntry]]:
        """Decide and commit the batch in a transaction holding the head row from before
        its first read; a connection lost during COMMIT is :class:`CommitUnknown`."""
        async with _holding_errors(conn.transaction()) as transaction:
            head = await store.lock_head(conn)
            decided = await self._decide(conn, batch, head)
            assert decided is not None
            written = await self._write(conn, decided, head)
            assert written is not None, "the head is locked"
            try:
                await transaction.commit()
            except Exception as error:
                self._head = None
                if store.is_outage(error):
                    raise store.lost_commit() from error
                raise
        return written

    async def _decide(self, conn: DbConnection, batch: list[_Item],
                      after: store.Head | None) -> _Decided | None:
        """Decide every command from its stream as stored, number the events after
        ``after`` (from 1 without), and plan the projection writes; None when numbered from
        1 but the projections need stored rows. Nothing is written here. Numbered from 1,
        every stream is taken as new (unread)."""
        commands = [command for item in batch for command in item.commands()]
        states = (await load_states(conn, commands) if after is not None
                  else {command.stream_id: (None, 0) for command in commands})
        pending: list[store.PendingEvent] = []
        outcomes: list[Result] = []
        decided: dict[int, Result] = {}
        now = self._clock()
        for item in batch:
            if _predecessor_failed(item, decided):
                outcomes.append(decided.setdefault(id(item), _Skipped()))
                continue
            decide = functools.partial(_decide_one, states=states, pending=pending,
                                       actor=item.actor, now=now)
            result: Result
            if isinstance(item.command, _Together):
                result, item.pending_groups = _decide_together(item.command.commands, decide,
                                                               states, pending)
            else:
                try:
                    result, item.pending_indexes = decide(item.command)
                except DomainError as refusal:
                    result = refusal
            outcomes.append(decided.setdefault(id(item), result))
        prepared = store.prepare_append(0 if after is None else after.last_seq, pending)
        statements: Sequence[Statement] | None = []
        if prepared.recorded:
            try:
                statements = await self._project(conn, prepared.recorded,
                                                 numbered_by_postgres=after is None)
            except asyncpg.PostgresError as error:
                raise store.translate_error(error) from error
        if statements is None:
            return None
        return _Decided(outcomes, prepared, list(statements))


def _may_create(command: Command) -> bool:
    """Whether ``command`` creates its stream, or probably does: a submit under an
    idempotency key names a stream that exists only when the key was used before."""
    return bool(getattr(command, "creates_stream", False)) or isinstance(command, SubmitTask)


def _decide_one(command: Command, *, states: dict[str, Any],
                pending: list[store.PendingEvent], actor: str, now: datetime
                ) -> tuple[Outcome, list[int]]:
    """Decide ``command`` on its stream's state in ``states`` (which it then updates),
    appending its events to ``pending``: its outcome and the indexes of its events there.
    A refusal is raised and changes nothing."""
    kind = stream_kind_for(command)
    state, version = states[command.stream_id]
    before = state
    events = kind.decide(state, command)
    indexes = []
    for event in events:
        version += 1
        state = kind.evolve(state, event)
        indexes.append(len(pending))
        pending.append(store.PendingEvent(kind.stream_type, command.stream_id, version, event,
                                          actor, now))
    states[command.stream_id] = (state, version)
    return Outcome(command.stream_id, events, state, before=before), indexes


def _decide_together(commands: Sequence[Command],
                     decide: Callable[[Command], tuple[Outcome, list[int]]],
                     states: dict[str, Any], pending: list[store.PendingEvent]
                     ) -> tuple[list[Outcome] | DomainError, list[list[int]]]:
    """Decide ``commands`` in order, each seeing the ones before it: their outcomes and
    the indexes of each one's events in ``pending``. On the first refusal undo them all
    and answer it, with ``details["index"]``."""
    saved, mark = dict(states), len(pending)
    outcomes: list[Outcome] = []
    groups: list[list[int]] = []
    for index, command in enumerate(commands):
        try:
            outcome, indexes = decide(command)
        except DomainError as refusal:
            states.clear()
            states.update(saved)
            del pending[mark:]
            refusal.details["index"] = index
            return refusal, []
        outcomes.append(outcome)
        groups.append(indexes)
    return outcomes, groups


def _with_entries(outcome: Outcome, indexes: list[int], recorded: list[RecordedEntry]) -> None:
    """Give ``outcome`` its committed entries (the batch's ``recorded`` at ``indexes``)."""
    if indexes:
        outcome.entries = [recorded[index] for index in indexes]
        outcome.change_seq = outcome.entries[-1].change_seq


def _predecessor_failed(item: _Item, decided: dict[int, Result]) -> bool:
    """Whether the command before ``item`` in its group was refused, skipped or failed
    (decided in this batch, or already answered by an earlier one)."""
    previous = item.after
    if previous is None:
        return False
    if id(previous) in decided:
        return isinstance(decided[id(previous)], Exception)
    future = previous.future
    return future.done() and (future.cancelled() or future.exception() is not None)


@contextlib.asynccontextmanager
async def _holding_errors(transaction: Transaction) -> AsyncIterator[Transaction]:
    """Start ``transaction`` and hand it over for the caller to commit; on any error roll it
    back and raise the error as a ledger error."""
    await transaction.start()
    try:
        yield transaction
    except asyncpg.PostgresError as error:
        with contextlib.suppress(Exception):
            await transaction.rollback()
        raise store.translate_error(error) from error
    except BaseException:
        with contextlib.suppress(Exception):
            await transaction.rollback()
        raise


def _open(conn: DbConnection) -> bool:
    """Whether ``conn`` is still open (a lost connection's pool proxy refuses the question:
    it has returned itself to the pool)."""
    try:
        return not conn.is_closed()
    except asyncpg.InterfaceError:
        return False


def _fail(item: _Item, error: Exception) -> None:
    if not item.future.done():
        item.future.set_exception(error)
