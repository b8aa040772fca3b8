"""One ledger writer for every API process of one ``svc serve --workers N``.

Each worker batching only its own commands would send batches 1/N the size, and its
commits would queue at the head row behind the other workers': more processes, fewer
submits. Instead the supervising ``svc serve`` runs one :class:`LedgerWriter` on a thread of
its own (:class:`RelayHost`), and each worker hands its commands to it over a Unix socket
(:class:`RelayedWriter`): one writer, batches N times larger, no contention on this machine.

Correctness never rests on the relay: the head row orders every commit whoever writes it
(DESIGN 3), so a worker that cannot reach the host writes through its own writer, as a
second machine's ``svc serve`` does. A host lost with commands in flight answers them
commit-unknown, exactly as a database connection lost while committing.

Frames are a 4-byte big-endian length and a pickle. The socket lives in a fresh directory
only this user can enter, and its first frame must be the host's random token (handed to the
workers in their settings, beside the database URL it guards no less well): no frame is
unpickled before the token has been checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import pickle
import secrets
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ledger.errors import CommitUnknown
from ledger.streams import Command, RecordedEntry
from ledger.writer import LedgerWriter, Outcome

_log = logging.getLogger("svc.relay")
_HEADER = struct.Struct(">I")
_ANSWER = struct.Struct(">QB")
"""What precedes an answer's pickle: its request number, and whether it is an outcome (1)
or an error (0); a worker that cannot unpickle the rest still knows whom to tell."""
TOKEN_FRAME_MAX = 1024
"""The longest first frame a host reads (the token is 32 bytes); what an authenticated
worker sends after it is not limited."""
RECONNECT_S = 1.0
"""How long a worker that lost the host writes through its own writer before trying again."""
LONE_BELOW = 0.5
"""A worker whose commands arrive with fewer than this many of its others unanswered (a
moving average) writes a command that finds none unanswered through its own writer: a lone
caller would wait for two more hops between processes, and there is no batch to share."""
OWN_GROUP_FROM = 16
"""An atomic group of at least this many commands (a batch submit) is written by the worker
that received it: it is a batch of its own, and the two hops would carry every command and
outcome pickled (about a fifth of the group's CPU) through the host's one thread."""
BUSY_WEIGHT = 0.2
"""The weight of the newest command in that moving average."""
LOST = ("the ledger writer process was lost while committing: the change may or may not be "
        "stored; retry with the same idempotency key")


def _dumps(value: object) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


@dataclass(frozen=True)
class RelayAddress:
    """Where a relay host listens and the token its first frame must carry."""

    path: str
    token: bytes

    def encode(self) -> str:
        """The address as text, ``<token hex>@<socket path>``, for a worker."""
        return f"{self.token.hex()}@{self.path}"

    @classmethod
    def decode(cls, value: str | None) -> RelayAddress | None:
        """The address :meth:`encode` wrote (None: no relay)."""
        token, _, path = (value or "").partition("@")
        return cls(path, bytes.fromhex(token)) if path else None


class _Framed(asyncio.Protocol):
    """Length-prefixed frames both ways; what is sent in one turn of the loop leaves in one
    write."""

    max_frame: int | None = None
    """Frames longer than this close the connection (None: no limit)."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._incoming = bytearray()
        self._outgoing: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        buffer = self._incoming
        buffer += data
        offset = 0
        while len(buffer) - offset >= _HEADER.size and not self.closing():
            (size,) = _HEADER.unpack_from(buffer, offset)
            if self.max_frame is not None and size > self.max_frame:
                self.close()
                return
            end = offset + _HEADER.size + size
            if len(buffer) < end:
                break
            frame = bytes(buffer[offset + _HEADER.size:end])
            offset = end
            self.frame_received(frame)
        del buffer[:offset]

    def frame_received(self, frame: bytes) -> None:
        """One whole frame arrived."""
        raise NotImplementedError

    def send_frame(self, frame: bytes) -> None:
        """Queue ``frame``; the queue leaves at the end of this turn of the loop."""
        if not self._outgoing:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outgoing += (_HEADER.pack(len(frame)), frame)

    def _flush(self) -> None:
        chunks, self._outgoing = self._outgoing, []
        if not self.closing():
            assert self._transport is not None
            self._transport.writelines(chunks)

    def closing(self) -> bool:
        """Whether the connection is closed or closing."""
        return self._transport is None or self._transport.is_closing()

    def close(self) -> None:
        """Close the connection (what is queued is dropped)."""
        if self._transport is not None:
            self._transport.close()


def _error_payload(error: BaseException) -> bytes:
    """``error`` as a pickle the worker rebuilds with the same class, arguments and
    attributes: the error itself when it survives pickling (``OSError`` keeps its
    ``errno``), else its parts (a ``DomainError`` whose ``__init__`` cannot take its own
    ``args`` back), else a ``RuntimeError`` naming it."""
    with contextlib.suppress(Exception):
        payload = _dumps(error)
        pickle.loads(payload)
        return payload
    with contextlib.suppress(Exception):
        payload = _dumps((type(error), error.args, dict(vars(error))))
        _rebuilt(pickle.loads(payload))
        return payload
    return _dumps(RuntimeError(f"{type(error).__name__}: {error}"))


def _rebuilt(value: Any) -> BaseException:
    """The error an error payload holds."""
    if isinstance(value, BaseException):
        return value
    cls, args, attributes = value
    error: BaseException = cls.__new__(cls)
    error.args = args
    vars(error).update(attributes)
    return error


class _HostSide(_Framed):
    """The host's end of one worker's connection."""

    def __init__(self, writer: LedgerWriter, token: bytes) -> None:
        super().__init__()
        self._writer = writer
        self._token = token
        self._trusted = False
        self._grouped: set[asyncio.Future[Any]] = set()
        self.max_frame = TOKEN_FRAME_MAX

    def frame_received(self, frame: bytes) -> None:
        if not self._trusted:
            self._trusted = hmac.compare_digest(frame, self._token)
            if self._trusted:
                self.max_frame = None
            else:
                self.close()
            return
        request_id, actor, commands, grouped, atomic = pickle.loads(frame)
        answer: asyncio.Future[Any]
        try:
            if grouped:
                answer = asyncio.ensure_future(
                    self._writer.execute_all(commands, actor, atomic=atomic))
                self._grouped.add(answer)  # a task only the loop refers to may be collected
                answer.add_done_callback(self._grouped.discard)
            else:
                answer = self._writer.enqueue(commands[0], actor)
        except Exception as error:
            self._answer(request_id, None, error)
            return
        answer.add_done_callback(functools.partial(self._answered, request_id))

    def _answered(self, request_id: int, answer: asyncio.Future[Any]) -> None:
        if answer.cancelled():
            self._answer(request_id, None, CommitUnknown(LOST))
        elif (error := answer.exception()) is not None:
            self._answer(request_id, None, error)
        else:
            self._answer(request_id, answer.result(), None)

    def _answer(self, request_id: int, result: object, error: BaseException | None) -> None:
        if error is None:
            try:
                self.send_frame(_ANSWER.pack(request_id, 1) + _dumps(result))
                return
            except Exception:  # never expected: the worker must not think nothing happened
                error = CommitUnknown(LOST)
        self.send_frame(_ANSWER.pack(request_id, 0) + _error_payload(error))


class _WorkerSide(_Framed):
    """A worker's connection to the host: requests out, answers matched back by number."""

    def __init__(self, token: bytes, on_commit: Callable[[list[RecordedEntry]], None] | None
                 ) -> None:
        super().__init__()
        self._token = token
        self._on_commit = on_commit
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._numbers = iter(range(1, 1 << 62))
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.send_frame(self._token)

    def request(self, actor: str, commands: Sequence[Command], *, grouped: bool,
                atomic: bool = False) -> asyncio.Future[Any]:
        """Send the commands; the future answers what the host's writer answered. Raises
        (sending nothing) when they cannot be pickled."""
        if self.lost or self.closing():
            raise ConnectionResetError("the ledger relay connection is closed")
        request_id = next(self._numbers)
        frame = _dumps((request_id, actor, list(commands), grouped, atomic))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self.send_frame(frame)
        return future

    def frame_received(self, frame: bytes) -> None:
        request_id, ok = _ANSWER.unpack_from(frame)
        future = self._pending.pop(request_id, None)
        if future is None or future.done():
            return
        try:
            value = pickle.loads(memoryview(frame)[_ANSWER.size:])
            if not ok:
                future.set_exception(_rebuilt(value))
                return
        except Exception:  # an answer this process cannot read: what happened is unknown
            _log.exception("unreadable answer from the ledger relay")
            future.set_exception(CommitUnknown(LOST))
            return
        future.set_result(value)
        if self._on_commit is not None:
            try:
                for outcome in value if isinstance(value, list) else [value]:
                    if outcome.entries:
                        self._on_commit(outcome.entries)
            except Exception:  # metrics only: the answer stands
                _log.exception("counting relayed entries failed")

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(CommitUnknown(LOST))


class RelayedWriter:
    """A worker's writer: commands go to the relay host while it can be reached, else
    through ``local`` (this process's own writer); dry-runs are always planned here.

    With ``lone_local``, a command that arrives alone (none of this worker's others
    unanswered, and usually so: :data:`LONE_BELOW`) is written through ``local`` too: one
    caller at a time gains nothing from the host's batches and would pay two hops. The head
    row orders its commit with the host's like any other process's (DESIGN 3)."""

    def __init__(self, local: LedgerWriter, address: RelayAddress,
                 on_commit: Callable[[list[RecordedEntry]], None] | None = None, *,
                 lone_local: bool = True) -> None:
        self._local = local
        self._address = address
        self._on_commit = on_commit
        self._lone_local = lone_local
        self._side: _WorkerSide | None = None
        self._retry_at = 0.0
        self._closed = False
        self._unanswered = 0
        """This worker's commands not answered yet (either way)."""
        self._busy = 0.0
        """How many were unanswered when a command arrived (a moving average)."""

    async def start(self) -> None:
        """Start the local writer and connect to the host."""
        await self._local.start()
        await self._reach()

    async def close(self) -> None:
        """Disconnect (commands in flight there answer commit-unknown) and stop the local
        writer."""
        self._closed = True
        if self._side is not None:
            self._side.close()
            self._side = None
        await self._local.close()

    async def execute(self, command: Command, actor: str) -> Outcome:
        """:meth:`LedgerWriter.execute`, on the host's writer when it can be reached and
        the command is not alone."""
        with self._counted() as alone:
            answer = None if alone else await self._forward(actor, [command], grouped=False)
            if answer is None:
                return await self._local.execute(command, actor)
            result: Outcome = await answer
            return result

    async def execute_all(self, commands: Sequence[Command], actor: str, *,
                          atomic: bool = False) -> list[Outcome]:
        """:meth:`LedgerWriter.execute_all`, on the host's writer when it can be reached,
        the group is not alone and not a large atomic one (:data:`OWN_GROUP_FROM`)."""
        with self._counted() as alone:
            own = alone or (atomic and len(commands) >= OWN_GROUP_FROM)
            answer = None if own else await self._forward(actor, commands, grouped=True,
                                                           atomic=atomic)
            if answer is None:
                return await self._local.execute_all(commands, actor, atomic=atomic)
            results: list[Outcome] = await answer
            return results

    @contextlib.contextmanager
    def _counted(self) -> Iterator[bool]:
        """Count a command as unanswered while the block runs; yields whether it arrived
        alone (then it is for the local writer)."""
        unanswered = self._unanswered
        self._busy += BUSY_WEIGHT * (unanswered - self._busy)
        self._unanswered += 1
        try:
            yield self._lone_local and unanswered == 0 and self._busy < LONE_BELOW
        finally:
            self._unanswered -= 1

    async def plan(self, command: Command) -> Outcome:
        """:meth:`LedgerWriter.plan` (reads only: here)."""
        return await self._local.plan(command)

    async def plan_all(self, commands: Sequence[Command]) -> list[Outcome]:
        """:meth:`LedgerWriter.plan_all` (reads only: here)."""
        return await self._local.plan_all(commands)

    async def _forward(self, actor: str, commands: Sequence[Command], *, grouped: bool,
                       atomic: bool = False) -> asyncio.Future[Any] | None:
        """The host's answer to come, or None (nothing sent) when the host cannot be reached
        or the commands cannot be pickled: then they are for the local writer."""
        side = await self._reach()
        if side is None:
            return None
        try:
            return side.request(actor, commands, grouped=grouped, atomic=atomic)
        except (pickle.PicklingError, TypeError, AttributeError, ConnectionError):
            return None  # nothing was sent

    async def _reach(self) -> _WorkerSide | None:
        """The host connection; a lost one is re-tried at most every :data:`RECONNECT_S`."""
        side = self._side
        if side is not None and not side.lost:
            return side
        self._side = None
        if self._closed or time.monotonic() < self._retry_at:
            return None
        self._retry_at = time.monotonic() + RECONNECT_S
        loop = asyncio.get_running_loop()
        try:
            _, side = await loop.create_unix_connection(
                lambda: _WorkerSide(self._address.token, self._on_commit), self._address.path)
        except OSError:
            return None
        if side.lost:  # the host closed it before this turn came round
            return None
        self._side = side
        return side


class RelayHost:
    """The relay's host: a :class:`LedgerWriter` serving every worker, on a thread with its
    own event loop (in the supervising ``svc serve``, which otherwise only waits)."""

    def __init__(self, writer_on: Callable[[], AbstractAsyncContextManager[LedgerWriter]]
                 ) -> None:
        self._writer_on = writer_on
        self._directory = Path(tempfile.mkdtemp(prefix="svc-ledger-"))  # mode 0700
        self.address = RelayAddress(str(self._directory / "writer.sock"),
                                    secrets.token_bytes(32))
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="ledger-relay", daemon=True)

    def start(self, timeout: float = 30.0) -> RelayAddress:
        """Start serving; the address once it listens. Raises what stopped it starting."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the ledger relay did not start")
        if self._failure is not None:
            raise self._failure
        return self.address

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving (after the workers stopped) and remove the socket's directory."""
        self._stopping.set()  # seen by a thread that has not made its loop yet
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # its loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        shutil.rmtree(self._directory, ignore_errors=True)

    def _run(self) -> None:
        try:
            import uvloop

            uvloop.run(self._serve())
        except BaseException as error:  # start() raises it; once serving, it is logged
            if self._ready.is_set():
                _log.error("the ledger relay stopped; each worker writes through its own "
                           "ledger writer", exc_info=error)
            self._failure = error
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self._writer_on() as writer:
            await writer.start()
            try:
                server = await self._loop.create_unix_server(
                    lambda: _HostSide(writer, self.address.token), self.address.path)
                self._ready.set()
                async with server:
                    if not self._stopping.is_set():
                        await self._stop.wait()
            finally:
                await writer.close()
