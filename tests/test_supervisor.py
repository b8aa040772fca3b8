"""``svc serve`` and its workers end together (issue 29 item 5): a ``kill -9`` of the
supervisor leaves no worker and frees the port within 2 s; ``SIGTERM`` ends it in well under
the 10 s a supervisor such as Kubernetes allows, whatever a client holds open (a partial
request header, a partial body, an idle keep-alive connection), and every write it answered
is in the ledger."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.conftest import SERVER_PIDS, free_port, running_api
from tests.support import ADMIN_HEADER_LINE, task_body
from tests.test_cli_usage import _alive, _workers_of

pytestmark = pytest.mark.serial  # wall-clock bounds on two-worker servers: not beside others

TASKS = "/api/v1/queue/tasks"
WORKERS = {"SVC_WORKERS": "2", "SVC_SHUTDOWN_GRACE_S": "10"}  # the default grace
EXIT_LIMIT_S = 8.0

HOLDS = {
    "partial-header": b"POST /api/v1/queue/tasks HTTP/1.1\r\nHost: svc\r\n" + ADMIN_HEADER_LINE
                      + b"content-type: applic",
    "partial-body": b"POST /api/v1/queue/tasks HTTP/1.1\r\nHost: svc\r\n" + ADMIN_HEADER_LINE
                    + b"content-type: application/json\r\ncontent-length: 400\r\n\r\n"
                    b"{\"tenantId\": \"ac",
    "idle-keep-alive": b"GET /api/v1/health HTTP/1.1\r\nHost: svc\r\n\r\n",
}


def port_free(port: int) -> bool:
    """Whether a new server could listen on ``port`` (no process holds it listening)."""
    try:
        with socket.create_server(("127.0.0.1", port)):
            return True
    except OSError:
        return False


def reap(pid: int) -> int | None:
    """The exit status of child ``pid`` once it has ended (None while it runs)."""
    done, status = os.waitpid(pid, os.WNOHANG)
    return None if done == 0 else os.waitstatus_to_exitcode(status)


def hold(port: int, kind: str) -> socket.socket:
    """A raw connection left as ``kind`` says: mid-header, mid-body, or idle after one
    answered request (kept alive)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(HOLDS[kind])
    if kind == "idle-keep-alive":
        assert sock.recv(65536).startswith(b"HTTP/1.1 200"), "answered, the connection kept"
    return sock


async def test_a_killed_supervisor_takes_its_workers_and_the_port_with_it(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    async with running_api(database_url, tmp_path, WORKERS, port) as base:
        pid = SERVER_PIDS[base]
        started = time.monotonic()
        while len(workers := _workers_of(pid)) < 3:  # two API workers, the runner listener's
            assert time.monotonic() - started < 30, workers
            await asyncio.sleep(0.05)
        assert len(workers) == 3
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        while any(_alive(worker) for worker in workers) or not port_free(port):
            assert time.monotonic() - killed < 2.0, (
                [w for w in workers if _alive(w)], port_free(port))
            await asyncio.sleep(0.05)
        reap(pid)


async def _submit_until_refused(base: str, acknowledged: list[str],
                                stopping: asyncio.Event) -> None:
    """Submit tasks one after another until the server stops answering after ``stopping``;
    the id of every acknowledged submit goes to ``acknowledged``."""
    async with httpx.AsyncClient(base_url=base, timeout=20) as http:
        while True:
            try:
                answer = await http.post(TASKS, json=task_body(title=f"t{len(acknowledged)}"))
            except httpx.HTTPError:
                if stopping.is_set():
                    return
                raise
            if answer.status_code == 201:
                acknowledged.append(answer.json()["taskId"])
            elif stopping.is_set():
                return
            else:
                raise AssertionError(answer.text)


@pytest.mark.parametrize(("kind", "workers"), [
    *((kind, "2") for kind in HOLDS), ("partial-body", "1")])
async def test_sigterm_ends_the_server_quickly_whatever_a_client_holds_losing_no_write(
    database_url: str, tmp_path: Path, kind: str, workers: str
) -> None:
    port = free_port()
    env = {**WORKERS, "SVC_WORKERS": workers}
    async with running_api(database_url, tmp_path, env, port) as base:
        pid = SERVER_PIDS[base]
        spawned = _workers_of(pid)
        acknowledged: list[str] = []
        stopping = asyncio.Event()
        writes = asyncio.create_task(_submit_until_refused(base, acknowledged, stopping))
        with contextlib.ExitStack() as stack:
            held = [stack.enter_context(hold(port, kind)) for _ in range(4)]  # both workers
            while len(acknowledged) < 5:
                assert not writes.done(), writes
                await asyncio.sleep(0.05)
            stopping.set()
            os.kill(pid, signal.SIGTERM)
            sent = time.monotonic()
            while (status := reap(pid)) is None:
                assert time.monotonic() - sent < 30, "svc serve did not exit"
                await asyncio.sleep(0.05)
            took = time.monotonic() - sent
            answers = [sock.recv(65536) for sock in held]
        await asyncio.wait_for(writes, 30)
        if kind == "idle-keep-alive":
            assert answers == [b""] * len(held), "closed, nothing more said"
        else:  # nothing of the request was acted on: it may be sent again
            assert all(answer.startswith(b"HTTP/1.1 503 ") for answer in answers), answers
        print(f"\nSIGTERM with a client holding a {kind}: exited {status} in {took:.2f} s, "
              f"{len(acknowledged)} writes acknowledged")
        assert status == 0
        assert took < EXIT_LIMIT_S, f"{took:.2f} s"
        assert not any(_alive(worker) for worker in spawned)
        assert port_free(port)
    conn = await asyncpg.connect(database_url)
    try:
        stored = await conn.fetch("SELECT task_id FROM task_summary WHERE task_id = ANY($1)",
                                  acknowledged)
    finally:
        await conn.close()
    assert {row["task_id"] for row in stored} == set(acknowledged), "no answered write lost"
