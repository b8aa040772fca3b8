"""Connection hygiene of a real ``svc serve``: idle, slow and stuck clients are held while
requests are served, closed after their deadlines, capped, and cut at shutdown."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from api.server import HttpSettings, connection_cap, raise_fd_limit
from api.settings import ServiceSettings
from tests.conftest import SERVER_PIDS, free_port, running_api, svc_executable
from tests.support import ADMIN_HEADER_LINE, write_profile_secret

IDLE = 1000
"""Idle connections: most never send a byte, the rest stay open after one request."""
KEPT_ALIVE = 100
SLOW_BODIES = 200
SLOWLORIS = 50
KEEPALIVE_S, HEADER_S, BODY_S = 8, 10, 10
CAP = 60
"""The connection cap of the shutdown test's server."""
SLACK_S = 6.0
"""How late a deadline may fire on a loaded machine (timers run on a busy event loop)."""

HEALTH = b"GET /api/v1/health HTTP/1.1\r\nHost: svc\r\n\r\n"
PARTIAL_HEADERS = b"GET /api/v1/health HTTP/1.1\r\nHost: svc\r\nX-Slow: "
PARTIAL_BODY = (b"POST /api/v1/queue/tasks HTTP/1.1\r\nHost: svc\r\n" + ADMIN_HEADER_LINE
                + b"Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n{\"tenantId\"")
SUBMIT = (b'{"tenantId":"acme","projectId":"demo","queue":"main","title":"late",'
          b'"payload":{"prompt":"print hello"}}')


class Held:
    """One raw client connection, a time no later than the start of its deadline on the
    server (the client's view lags behind under load), and when the server closed it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.since = time.monotonic()
        self.closed_at: float | None = None
        self.received = b""
        self.watch: asyncio.Task[None] | None = None

    def start_watch(self) -> None:
        """Note when the server closes the connection."""
        self.watch = asyncio.create_task(self._until_closed())

    async def _until_closed(self) -> None:
        try:
            while data := await self.reader.read(65536):
                self.received += data
        except OSError:
            pass
        self.closed_at = time.monotonic()

    @property
    def lifetime(self) -> float:
        """Seconds from ``since`` until the server closed it."""
        assert self.closed_at is not None
        return self.closed_at - self.since

    def close(self) -> None:
        """Close our end."""
        if self.watch is not None:
            self.watch.cancel()
        self.writer.close()


async def _open(port: int, count: int, first: bytes = b"") -> list[Held]:
    """``count`` connections, each having sent ``first``, opened a hundred at a time."""
    gate = asyncio.Semaphore(100)

    async def one() -> Held:
        async with gate:
            before = time.monotonic()  # the server's deadline starts later: no early close hides
            held = Held(*await asyncio.open_connection("127.0.0.1", port))
            held.since = before
            if first:
                held.writer.write(first)
                await held.writer.drain()
            return held

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def _one_response(held: Held) -> None:
    head = await held.reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    await held.reader.readexactly(length)


async def _healthy(base: str, count: int) -> None:
    """``count`` health requests, each on a fresh connection, all answer 200."""
    fresh = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=10, limits=fresh) as http:
        for _ in range(count):
            assert (await http.get(f"{base}/api/v1/health")).status_code == 200


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


async def test_slow_clients_are_held_while_serving_then_closed_on_deadline(
        database_url: str, tmp_path: Path) -> None:
    raise_fd_limit()
    env = {"SVC_HTTP_KEEPALIVE_S": str(KEEPALIVE_S), "SVC_HTTP_HEADER_TIMEOUT_S": str(HEADER_S),
           "SVC_HTTP_BODY_TIMEOUT_S": str(BODY_S), "SVC_HTTP_MAX_CONNECTIONS": "4000"}
    async with running_api(database_url, tmp_path, env) as base:
        port = _port(base)
        started = time.monotonic()
        silent = await _open(port, IDLE - KEPT_ALIVE)
        bodies = await _open(port, SLOW_BODIES, PARTIAL_BODY)
        loris = await _open(port, SLOWLORIS, PARTIAL_HEADERS)
        opened = time.monotonic()
        kept = await _open(port, KEPT_ALIVE, HEALTH)
        await asyncio.gather(*(_one_response(held) for held in kept))
        everyone = [*silent, *kept, *bodies, *loris]
        for held in everyone:
            held.start_watch()
        try:
            await _healthy(base, 20)
            served = time.monotonic()
            held_while_serving = sum(held.closed_at is None for held in everyone)
            print(f"\n{held_while_serving} connections held while 20 health requests were "
                  f"served (opened in {opened - started:.1f} s, kept alive after "
                  f"{len(kept)} requests, served by {served - started:.1f} s)")
            assert held_while_serving == len(everyone)

            await asyncio.wait_for(asyncio.gather(*(h.watch for h in everyone if h.watch)),
                                   max(HEADER_S, BODY_S) + SLACK_S + 5)
            for group, deadline in ((silent, HEADER_S), (kept, KEEPALIVE_S),
                                    (bodies, BODY_S), (loris, HEADER_S)):
                lifetimes = [held.lifetime for held in group]
                print(f"closed after {min(lifetimes):.1f}-{max(lifetimes):.1f} s "
                      f"(deadline {deadline} s): {len(group)}")
                assert min(lifetimes) >= deadline - 0.5
                assert max(lifetimes) <= deadline + SLACK_S
            timed_out = {held.received[:12] for held in [*bodies, *loris]}
            assert timed_out == {b"HTTP/1.1 408"}  # a begun request is told why
            assert {held.received for held in [*silent, *kept]} == {b""}
            await _healthy(base, 3)
        finally:
            for held in everyone:
                held.close()


async def test_cap_makes_room_and_sigterm_cuts_a_stuck_client(database_url: str,
                                                               tmp_path: Path) -> None:
    grace = 2
    env = {"SVC_HTTP_MAX_CONNECTIONS": str(CAP), "SVC_HTTP_HEADER_TIMEOUT_S": "60",
           "SVC_HTTP_BODY_TIMEOUT_S": "60", "SVC_SHUTDOWN_GRACE_S": str(grace)}
    async with running_api(database_url, tmp_path, env) as base:
        port = _port(base)
        pid = SERVER_PIDS[base]
        idle = await _open(port, 100)
        for held in idle:
            held.start_watch()
        submit_head = PARTIAL_BODY.replace(b"4000", b"%d" % len(SUBMIT))
        stuck: list[Held] = []
        finishing: Held | None = None
        try:
            await _healthy(base, 2)  # over the cap: the oldest idle connections made room
            finishing, *stuck = await _open(port, CAP, submit_head)
            await asyncio.sleep(0.5)
            assert all(held.closed_at is not None for held in idle)  # made room for the busy
            refused = await _open(port, 1)  # every connection is busy: this one is refused
            stuck.extend(refused)
            answer = await asyncio.wait_for(refused[0].reader.read(), 5)
            assert answer.startswith(b"HTTP/1.1 503"), answer

            os.kill(pid, signal.SIGTERM)
            signalled = time.monotonic()
            await asyncio.sleep(0.3)
            assert finishing is not None
            finishing.writer.write(SUBMIT[len(b'{"tenantId"'):])
            head = await asyncio.wait_for(finishing.reader.readuntil(b"\r\n\r\n"), grace + 5)
            assert head.startswith(b"HTTP/1.1 201"), head  # in flight at SIGTERM: finished
            while time.monotonic() - signalled < grace + 10:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                await asyncio.sleep(0.05)
            took = time.monotonic() - signalled
            print(f"\nSIGTERM with a stuck client (partial body): exited after {took:.1f} s "
                  f"(grace {grace} s)")
            assert done, "svc serve still running"
            assert took <= grace + 4  # grace, then the app's own shutdown
            assert os.waitstatus_to_exitcode(status) in (0, -signal.SIGTERM)  # uvicorn re-raises
            cut = {(await asyncio.wait_for(held.reader.read(), 5))[:12] for held in stuck}
            assert cut <= {b"HTTP/1.1 500", b"HTTP/1.1 503", b""}, cut  # cut and closed
        finally:
            for held in [*idle, *stuck, *([finishing] if finishing else [])]:
                held.close()


@asynccontextmanager
async def _serve_with_fds(database_url: str, workdir: Path, fds: int) -> AsyncIterator[str]:
    """``svc serve`` whose soft and hard limits on open files are both ``fds``."""
    port = free_port()
    write_profile_secret(workdir / "data")
    env = {"PATH": os.environ.get("PATH", ""), "SVC_DATABASE_URL": database_url,
           "SVC_PORT": str(port), "SVC_DATA_DIR": str(workdir / "data"), "SVC_WORKERS": "1"}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (fds, fds))

    base = f"http://127.0.0.1:{port}"
    with (workdir / "serve.log").open("w") as log:
        process = subprocess.Popen([svc_executable(), "serve"], env=env, stdout=log,
                                   stderr=log, preexec_fn=limit)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await _healthy(base, 1)
                    break
                except (httpx.HTTPError, AssertionError):
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError((workdir / "serve.log").read_text()) from None
                    await asyncio.sleep(0.1)
            yield base
        finally:
            process.terminate()
            process.wait(15)


async def test_idle_connections_beyond_the_fd_limit_do_not_block_requests(
        database_url: str, tmp_path: Path) -> None:
    """The issue's case: 1,100 idle connections against 1,024 descriptors."""
    async with _serve_with_fds(database_url, tmp_path, 1024) as base:
        idle = await _open(_port(base), 1100)
        for held in idle:
            held.start_watch()
        try:
            await _healthy(base, 5)
            await asyncio.sleep(0.3)
            still_open = sum(held.closed_at is None for held in idle)
            print(f"\n1,100 idle connections, 1,024 fds: {still_open} kept open, "
                  "the oldest closed to make room; health answered 200")
            assert still_open <= connection_cap(4096, 1024)
        finally:
            for held in idle:
                held.close()


def test_settings_and_cap() -> None:
    assert ServiceSettings.from_env({}).http() == HttpSettings()
    assert ServiceSettings.from_env({"SVC_SHUTDOWN_GRACE_S": "3"}).http().shutdown_grace_s == 3
    for bad in ("0", "-1", "soon"):
        try:
            ServiceSettings.from_env({"SVC_HTTP_BODY_TIMEOUT_S": bad}).http()
        except ValueError as error:
            assert "SVC_HTTP_BODY_TIMEOUT_S" in str(error)
        else:
            raise AssertionError(bad)
    assert connection_cap(4096, 1024) == 768  # the default 1,024 fds: a quarter stays free
    assert connection_cap(4096, 65536) == 4096
    assert connection_cap(100, 300) == 44
    assert raise_fd_limit() >= 1024
