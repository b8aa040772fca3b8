"""The runner listener (issue 29, the fleet's reports apart from callers' requests): the
runner's client tries the manager's Unix socket first and the URL when nothing listens
there; ``svc serve`` with two workers serves the socket from a worker of its own, owned by
the server's user alone, and local runners report through it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import socketserver
import stat
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.runner_listener import MAX_PATH_BYTES, bind, socket_path
from runner_assembly.contract.messages import ExitBody
from runner_assembly.runner import manager_client
from runner_assembly.runner.manager_client import ManagerClient
from tests.conftest import SERVER_PIDS, free_port, running_api
from tests.support import refresh_until_settled, task_body
from tests.test_cli_usage import _workers_of
from tests.test_manager_client import Handler, address, manager, serving


class UnixManager(socketserver.ThreadingUnixStreamServer):
    """The stand-in manager of ``test_manager_client`` on a Unix socket."""

    daemon_threads = True

    def __init__(self, path: Path) -> None:
        super().__init__(str(path), Handler)
        self.connections = 0
        self.requests: list[tuple[str, str, dict[str, object]]] = []
        self.arrivals: list[float] = []
        self.close_after_answer = False
        self.status = 200
        self.busy = 0


def unix_manager(path: Path) -> contextlib.AbstractContextManager[UnixManager]:
    return serving(UnixManager(path))


def test_reports_go_to_the_listener_on_one_kept_connection(tmp_path: Path) -> None:
    path = tmp_path / "runner.sock"
    with manager() as tcp, unix_manager(path) as unix:
        client = ManagerClient(address(tcp) + "/base", "job_1", "tok", 5.0, listener=str(path))
        assert client.claim("c1") is True
        client.heartbeat()
        client.exit(ExitBody(state="completed"))
    assert tcp.requests == [], "nothing through the URL while the listener answers"
    assert [request for request, _, _ in unix.requests] == [
        "/base/api/v1/runner/jobs/job_1/claim", "/base/api/v1/runner/jobs/job_1/heartbeat",
        "/base/api/v1/runner/jobs/job_1/exit"]
    assert {auth for _, auth, _ in unix.requests} == {"Bearer tok"}
    assert unix.connections == 1


@pytest.mark.parametrize("left", ["nothing", "a dead socket"])
def test_without_a_listener_the_reports_go_to_the_url(tmp_path: Path, left: str) -> None:
    path = tmp_path / "runner.sock"
    if left == "a dead socket":  # a server that ended: its socket file, nobody listening
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
            dead.bind(str(path))
    with manager() as tcp:
        client = ManagerClient(address(tcp), "job_1", "tok", 5.0, listener=str(path))
        client.heartbeat()
        client.lines("output", 1, ["a"])
    assert [request for request, _, _ in tcp.requests] == [
        "/api/v1/runner/jobs/job_1/heartbeat", "/api/v1/runner/jobs/job_1/lines"]
    assert tcp.connections == 1


def test_the_listener_takes_over_from_the_url_once_it_answers(tmp_path: Path) -> None:
    """A runner that started while no listener answered (a restart) keeps its connection to
    the URL; a new connection (the kept one idle or closed) finds the listener."""
    path = tmp_path / "runner.sock"
    with manager(close_after_answer=True) as tcp:
        client = ManagerClient(address(tcp), "job_1", "tok", 0.0, listener=str(path))
        client.heartbeat()
        with unix_manager(path) as unix:
            client.heartbeat()
    assert len(tcp.requests) == 1
    assert len(unix.requests) == 1


def test_a_listener_that_does_not_answer_is_left_for_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listener that takes connections but answers nothing (a stuck worker: its backlog
    still accepts) costs one timed-out try; the retry and the reports after it go to the
    URL until the rest is over, then the listener is tried again."""
    monkeypatch.setattr(manager_client, "TIMEOUT_S", 0.5)
    path = tmp_path / "runner.sock"
    with manager() as tcp, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stuck:
        stuck.bind(str(path))
        stuck.listen(8)  # never accepted
        client = ManagerClient(address(tcp), "job_1", "tok", 10.0, listener=str(path))
        begun = time.monotonic()
        client.heartbeat()
        client.lines("output", 1, ["a"])
        assert time.monotonic() - begun < 5
        assert [request for request, _, _ in tcp.requests] == [
            "/api/v1/runner/jobs/job_1/heartbeat", "/api/v1/runner/jobs/job_1/lines"]
        monkeypatch.setattr(manager_client, "LISTENER_REST_S", 0.0)
        client._drop()
        with pytest.raises(manager_client.ManagerRefused):  # the listener again: stuck
            ManagerClient(address(tcp), "job_1", "tok", 0.0, listener=str(path)).heartbeat()


def test_the_socket_is_the_owners_alone_and_a_dead_one_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "runner.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))
    listener = bind(path)
    assert listener is not None
    with listener:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(path))
        assert bind(path) is None, "a live listener is left to its server"
        assert listener.fileno() >= 0


def test_no_listener_on_a_path_that_is_not_a_socket_or_too_long(tmp_path: Path) -> None:
    path = tmp_path / "runner.sock"
    path.write_text("mine")
    assert bind(path) is None
    assert path.read_text() == "mine", "left as it was"
    deep = tmp_path / ("d" * MAX_PATH_BYTES)
    assert socket_path(deep) is None
    assert socket_path(tmp_path) == tmp_path / "runner.sock"


def connected_at(path: Path) -> int:
    """Connected Unix sockets named ``path`` (a listener's accepted connections), from
    ``/proc/net/unix``."""
    rows = Path("/proc/net/unix").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[5:6] == ["03"] and row.split()[7:] == [str(path)])


async def test_two_workers_serve_local_runners_on_a_listener_of_their_own(
    database_url: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {"SVC_WORKERS": "2", "SVC_RUNNER_HEARTBEAT_S": "0.5"}
    async with running_api(database_url, tmp_path, env, port) as base:
        path = tmp_path / "data" / "runner.sock"
        banner = (tmp_path / f"serve-{port}.log").read_text()
        assert f"runner protocol: a worker of its own on {path}" in banner
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        deadline = time.monotonic() + 30
        while len(_workers_of(SERVER_PIDS[base])) < 3:  # two API workers and the listener's
            assert time.monotonic() < deadline, _workers_of(SERVER_PIDS[base])
            await asyncio.sleep(0.1)
        unix = httpx.AsyncHTTPTransport(uds=str(path))
        async with httpx.AsyncClient(transport=unix, base_url="http://svc") as through:
            assert (await through.get("/api/v1/health")).status_code == 200
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            sleeping = await _dispatched(http, "sleep: 30")
            job = tmp_path / "data" / "jobs" / sleeping["latestAttempt"]["runnerJobId"]
            while not (job / "pid").exists() or connected_at(path) == 0:
                assert time.monotonic() < deadline + 30, "no runner connected to the listener"
                await asyncio.sleep(0.1)
            runner = int((job / "pid").read_text())
            environ = Path(f"/proc/{runner}/environ").read_bytes().split(b"\0")
            assert f"SVC_RUNNER_API_SOCKET={path}".encode() in environ
            assert f"SVC_RUNNER_API_URL=http://127.0.0.1:{port}".encode() in environ
            await http.post(f"/api/v1/queue/tasks/{sleeping['taskId']}/cancel",
                            json={"reason": "done"})
            hello = await _dispatched(http, "say hello")
            settled = await refresh_until_settled(http, hello["taskId"])
            assert settled["state"] == "completed", settled


async def _dispatched(http: httpx.AsyncClient, prompt: str) -> dict[str, Any]:
    created = await http.post("/api/v1/queue/tasks", json=task_body(payload={"prompt": prompt}))
    assert created.status_code == 201, created.text
    task = created.json()["taskId"]
    answer = await http.post(f"/api/v1/queue/tasks/{task}/dispatch")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def listening_inode(path: Path) -> str:
    """The inode of the listening socket bound at ``path``, from ``/proc/net/unix``."""
    for row in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = row.split()
        if fields[7:] == [str(path)] and fields[5] == "01":
            return fields[6]
    raise AssertionError(f"nothing listens at {path}")


def holders(pids: list[int], inode: str) -> list[int]:
    """Which of ``pids`` hold the socket ``inode`` open."""
    held = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) == f"socket:[{inode}]"
                   for fd in Path(f"/proc/{pid}/fd").iterdir()):
                held.append(pid)
    return held


async def test_a_killed_listener_worker_is_replaced_and_its_runners_finish(
    database_url: str, tmp_path: Path
) -> None:
    """``kill -9`` of the listener's worker while a job runs: the supervisor starts another
    on the same socket, and the job's reports still reach the manager: it completes."""
    port = free_port()
    env = {"SVC_WORKERS": "2", "SVC_RUNNER_HEARTBEAT_S": "0.5"}
    async with running_api(database_url, tmp_path, env, port) as base:
        path = tmp_path / "data" / "runner.sock"
        supervisor = SERVER_PIDS[base]
        inode = listening_inode(path)
        deadline = time.monotonic() + 30
        while not (listener := holders(_workers_of(supervisor), inode)):
            assert time.monotonic() < deadline, "no worker serves the listener"
            await asyncio.sleep(0.1)
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            task = await _dispatched(http, "sleep: 4")
            while connected_at(path) == 0:
                assert time.monotonic() < deadline, "the runner never reached the listener"
                await asyncio.sleep(0.05)
            os.kill(listener[0], signal.SIGKILL)
            while not (replaced := holders(_workers_of(supervisor), inode)) \
                    or replaced == listener:
                assert time.monotonic() < deadline + 30, "the listener was not replaced"
                await asyncio.sleep(0.1)
            settled = await refresh_until_settled(http, task["taskId"])
            assert settled["state"] == "completed", settled
            assert settled["latestAttempt"]["failureKind"] is None
