"""The ledger relay of ``svc serve --workers N``: a worker's commands are committed by the one
writer its supervisor hosts, answered exactly as its own writer would answer them; a host that
cannot be reached leaves the worker writing through its own writer, and a host lost with
commands in flight answers them commit-unknown. Nothing is unpickled before the token."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import pickle
import stat
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import asyncpg
import pytest

from api.app import relay_writer
from ledger import intake
from ledger.database import create_pool
from ledger.errors import CommitUnknown, DomainError, LedgerUnavailable, NotFound, Refused
from ledger.relay import (
    OWN_GROUP_FROM,
    RelayAddress,
    RelayedWriter,
    RelayHost,
    _error_payload,
    _rebuilt,
)
from ledger.states import TaskStatus
from ledger.streams import RecordedEntry
from ledger.task import CancelTask, SubmitTask
from ledger.writer import LedgerWriter
from projections.store import plan_projection
from tests.support import task_body


@dataclass
class Worker:
    """A worker's writer in front of the relay, with its own writer's pool watched: every
    statement the worker itself sent, and every entry it counted as committed."""

    writer: RelayedWriter
    own_pool: asyncpg.Pool
    sent: list[str] = field(default_factory=list)
    counted: list[RecordedEntry] = field(default_factory=list)

    def wrote_itself(self) -> bool:
        return any("ledger_advance" in query for query in self.sent)


@pytest.fixture
def host(database_url: str) -> Iterator[RelayHost]:
    relay = RelayHost(functools.partial(relay_writer, database_url))
    relay.start()
    yield relay
    relay.stop()


class MakeWorker(Protocol):
    """Makes a worker's writer in front of a relay address."""

    def __call__(self, address: RelayAddress, *, lone_local: bool = False
                 ) -> Awaitable[Worker]: ...


@pytest.fixture
async def worker_of(database_url: str) -> AsyncIterator[MakeWorker]:
    made: list[Worker] = []

    async def make(address: RelayAddress, *, lone_local: bool = False) -> Worker:
        pool = await create_pool(database_url, min_size=1, max_size=1, transactions_only=True)
        counted: list[RecordedEntry] = []
        worker = Worker(RelayedWriter(LedgerWriter(pool, plan_projection), address,
                                      on_commit=counted.extend, lone_local=lone_local),
                        pool, counted=counted)
        async with pool.acquire() as held:
            held.add_query_logger(lambda record: worker.sent.append(record.query))
        await worker.writer.start()
        made.append(worker)
        return worker

    yield make
    for worker in made:
        await worker.writer.close()
        await worker.own_pool.close()


def _submit() -> SubmitTask:
    return intake.submit_command(task_body(), actor="test")


async def test_a_workers_commands_are_committed_by_the_hosts_writer(
        host: RelayHost, worker_of: MakeWorker, database_url: str) -> None:
    worker = await worker_of(host.address)
    outcome = await worker.writer.execute(_submit(), "test")
    grouped = await worker.writer.execute_all(
        [_submit(), CancelTask(outcome.stream_id, None)], "test")
    assert not worker.wrote_itself()
    assert outcome.change_seq is not None and outcome.state.task_id == outcome.stream_id
    assert [each.stream_id for each in grouped] == [grouped[0].stream_id, outcome.stream_id]
    assert grouped[1].state.state is TaskStatus.CANCELLED
    conn = await asyncpg.connect(database_url)
    try:
        stored = await conn.fetch("SELECT change_seq, stream_id FROM ledger ORDER BY 1")
    finally:
        await conn.close()
    entries = [*outcome.entries, *grouped[0].entries, *grouped[1].entries]
    assert [(row["change_seq"], row["stream_id"]) for row in stored] == [
        (entry.change_seq, entry.stream_id) for entry in entries]
    assert worker.counted == entries  # the worker's own metrics count what the host wrote


async def test_a_lone_command_is_written_by_the_worker_and_a_crowd_by_the_host(
        host: RelayHost, worker_of: MakeWorker, database_url: str) -> None:
    worker = await worker_of(host.address, lone_local=True)
    for _ in range(3):  # one caller at a time: no batch to share, no hop to the host
        worker.sent.clear()
        lone = await worker.writer.execute(_submit(), "test")
        assert lone.change_seq is not None and worker.wrote_itself()
    await asyncio.gather(*(worker.writer.execute(_submit(), "test") for _ in range(20)))
    worker.sent.clear()  # commands that arrive with others unanswered go to the host
    crowd = await asyncio.gather(*(worker.writer.execute(_submit(), "test")
                                   for _ in range(20)))
    assert not worker.wrote_itself()
    conn = await asyncpg.connect(database_url)
    try:
        stored = {row["stream_id"] for row in await conn.fetch("SELECT stream_id FROM ledger")}
    finally:
        await conn.close()
    assert {outcome.stream_id for outcome in [lone, *crowd]} <= stored


async def test_a_large_atomic_group_is_written_by_the_worker_and_a_small_one_by_the_host(
        host: RelayHost, worker_of: MakeWorker, database_url: str) -> None:
    worker = await worker_of(host.address)
    large = await worker.writer.execute_all([_submit() for _ in range(OWN_GROUP_FROM)],
                                            "test", atomic=True)
    assert worker.wrote_itself()  # a batch submit: no hop, nothing pickled
    worker.sent.clear()
    small = await worker.writer.execute_all([_submit(), _submit()], "test", atomic=True)
    assert not worker.wrote_itself()
    conn = await asyncpg.connect(database_url)
    try:
        stored = {row["stream_id"]: row["change_seq"]
                  for row in await conn.fetch("SELECT stream_id, change_seq FROM ledger")}
    finally:
        await conn.close()
    assert {o.stream_id: o.change_seq for o in [*large, *small]} == stored


async def test_a_refusal_comes_back_as_the_same_error(host: RelayHost, worker_of: MakeWorker,
                                                      database_url: str) -> None:
    worker = await worker_of(host.address)
    missing = CancelTask("tsk_0000000000000000000000000a", None)
    with pytest.raises(NotFound) as relayed:
        await worker.writer.execute(missing, "test")
    pool = await create_pool(database_url, min_size=1, max_size=1)
    own = LedgerWriter(pool, plan_projection)
    await own.start()
    try:
        with pytest.raises(NotFound) as direct:
            await own.execute(missing, "test")
    finally:
        await own.close()
        await pool.close()
    assert relayed.value.args == direct.value.args
    assert vars(relayed.value) == vars(direct.value)
    assert isinstance(relayed.value, DomainError) and not worker.wrote_itself()


async def test_without_a_host_a_worker_writes_through_its_own_writer(
        tmp_path: Path, worker_of: MakeWorker) -> None:
    nowhere = RelayAddress(str(tmp_path / "absent.sock"), os.urandom(32))
    worker = await worker_of(nowhere)
    outcome = await worker.writer.execute(_submit(), "test")
    assert outcome.change_seq is not None and worker.wrote_itself()


async def test_a_host_lost_in_flight_answers_commit_unknown_then_the_worker_goes_on(
        host: RelayHost, worker_of: MakeWorker, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ledger.relay.RECONNECT_S", 0.0)
    worker = await worker_of(host.address)
    blocker = await asyncpg.connect(database_url)
    blocked = blocker.transaction()
    await blocked.start()
    await blocker.execute("SELECT 1 FROM ledger_head FOR UPDATE")  # the host's commit waits
    try:
        in_flight = asyncio.ensure_future(worker.writer.execute(_submit(), "test"))
        for _ in range(200):
            if await blocker.fetchval("SELECT count(*) FROM pg_stat_activity "
                                      "WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))"):
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the host's commit never reached the head row")
        await asyncio.to_thread(host.stop)
        with pytest.raises(CommitUnknown):
            await asyncio.wait_for(in_flight, 10)
    finally:
        await blocked.rollback()
        await blocker.close()
    # the host is gone: its own writer
    after = await asyncio.wait_for(worker.writer.execute(_submit(), "test"), 30)
    assert after.change_seq is not None and worker.wrote_itself()


async def _fake_host(path: str, answer: Callable[[bytes], bytes | None]
                     ) -> asyncio.AbstractServer:
    """A host that reads the token and one request, then writes ``answer(request)`` (a
    frame's payload) or, given None, closes the connection."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            size = struct.unpack(">I", await reader.readexactly(4))[0]
            request = await reader.readexactly(size)
        reply = answer(request)
        if reply is not None:
            writer.write(struct.pack(">I", len(reply)) + reply)
            await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(serve, path)


@pytest.mark.parametrize("answer", [
    lambda request: None,  # the host's process died with the command
    lambda request: struct.pack(">QB", pickle.loads(request)[0], 1) + b"not a pickle",
], ids=["connection-lost", "unreadable-answer"])
async def test_an_answer_lost_or_unreadable_is_commit_unknown_never_a_hang(
        tmp_path: Path, worker_of: MakeWorker, monkeypatch: pytest.MonkeyPatch,
        answer: Callable[[bytes], bytes | None]) -> None:
    monkeypatch.setattr("ledger.relay.RECONNECT_S", 3600.0)
    address = RelayAddress(str(tmp_path / "fake.sock"), os.urandom(32))
    server = await _fake_host(address.path, answer)
    try:
        worker = await worker_of(address)
        with pytest.raises(CommitUnknown):
            await asyncio.wait_for(worker.writer.execute(_submit(), "test"), 10)
        if answer(pickle.dumps((1,))) is None:  # lost: the worker writes for itself now
            after = await asyncio.wait_for(worker.writer.execute(_submit(), "test"), 30)
            assert after.change_seq is not None and worker.wrote_itself()
    finally:
        server.close()


@pytest.mark.parametrize("error", [
    NotFound("task tsk_x not found", taskId="tsk_x"),
    Refused("secret-unavailable", "the profile's secret is missing", profile="profile-1"),
    OSError(2, "No such file or directory", "f"),
    ExceptionGroup("two", [ValueError("a"), KeyError("b")]),
], ids=["domain", "refused", "oserror", "group"])
def test_an_error_crosses_with_its_class_arguments_and_attributes(
        error: BaseException) -> None:
    crossed = _rebuilt(pickle.loads(_error_payload(error)))
    assert type(crossed) is type(error) and repr(crossed) == repr(error)
    assert str(crossed) == str(error) and vars(crossed) == vars(error)


def test_an_error_that_cannot_cross_is_named() -> None:
    local = type("Unpicklable", (Exception,), {})("lost in transit")
    crossed = _rebuilt(pickle.loads(_error_payload(local)))
    assert isinstance(crossed, RuntimeError) and str(crossed) == "Unpicklable: lost in transit"


async def test_a_closed_worker_writer_stays_closed(host: RelayHost, worker_of: MakeWorker
                                                   ) -> None:
    worker = await worker_of(host.address)
    await worker.writer.close()
    with pytest.raises(LedgerUnavailable):
        await asyncio.wait_for(worker.writer.execute(_submit(), "test"), 10)


async def test_nothing_is_unpickled_before_the_token(host: RelayHost, tmp_path: Path) -> None:
    planted = tmp_path / "unpickled"

    class Trap:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return Path.touch, (str(planted),)

    reader, writer = await asyncio.open_unix_connection(host.address.path)
    for frame in (b"not the token", pickle.dumps(Trap())):
        writer.write(struct.pack(">I", len(frame)) + frame)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed without an answer
    writer.close()
    assert not planted.exists()


async def test_an_oversized_first_frame_is_refused_unread(host: RelayHost) -> None:
    reader, writer = await asyncio.open_unix_connection(host.address.path)
    writer.write(struct.pack(">I", 1 << 30))  # announces a gigabyte before any token
    with contextlib.suppress(ConnectionError):
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


def test_the_socket_is_only_for_this_user_and_gone_once_stopped(database_url: str) -> None:
    relay = RelayHost(functools.partial(relay_writer, database_url))
    socket = Path(relay.start().path)
    try:
        assert stat.S_IMODE(socket.parent.stat().st_mode) == 0o700
        assert socket.is_socket()
    finally:
        relay.stop()
    assert not socket.parent.exists()
