"""The runner's HTTP client to the manager: one kept connection per thread, reopened when
the manager has closed it, refusals and retries as before."""

from __future__ import annotations

import json
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar

import pytest

from runner_assembly.contract.messages import ExitBody
from runner_assembly.runner import manager_client
from runner_assembly.runner.manager_client import ManagerClient, ManagerRefused

Served = TypeVar("Served", bound=socketserver.BaseServer)


class Manager(ThreadingHTTPServer):
    """A stand-in manager on a real socket: counts connections and requests."""

    daemon_threads = True

    def __init__(self, close_after_answer: bool = False, status: int = 200,
                 busy: int = 0) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.connections = 0
        self.requests: list[tuple[str, str, dict[str, object]]] = []
        self.arrivals: list[float] = []
        self.close_after_answer = close_after_answer
        self.status = status
        self.busy = busy
        """How many requests are first answered 503 with ``Retry-After: 1``."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless a side closes
    server: Manager

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, self.headers["Authorization"], body))
        self.server.arrivals.append(time.monotonic())
        status = self.server.status
        if self.server.busy > 0:
            self.server.busy -= 1
            status = 503
        answer = json.dumps({"start": True} if status < 400
                            else {"error": {"code": "job-ended"}}).encode()
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
        if self.server.close_after_answer:  # like a keep-alive timeout: closed, unannounced
            self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving(server: Served) -> Iterator[Served]:
    """``server`` serving on a thread of its own until the block ends."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def manager(**options: object) -> Iterator[Manager]:
    with serving(Manager(**options)) as server:  # type: ignore[arg-type]
        yield server


def address(server: Manager) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}"


def client_of(server: Manager, retry_for_s: float = 5.0) -> ManagerClient:
    return ManagerClient(address(server) + "/base", "job_1", "tok", retry_for_s)


def test_reports_of_one_thread_share_one_connection() -> None:
    with manager() as server:
        client = client_of(server)
        assert client.claim("c1") is True
        client.heartbeat()
        client.lines("output", 1, ["a"])
        client.exit(ExitBody(state="completed"))
    assert server.connections == 1
    assert [path for path, _, _ in server.requests] == [
        "/base/api/v1/runner/jobs/job_1/claim", "/base/api/v1/runner/jobs/job_1/heartbeat",
        "/base/api/v1/runner/jobs/job_1/lines", "/base/api/v1/runner/jobs/job_1/exit"]
    assert {auth for _, auth, _ in server.requests} == {"Bearer tok"}
    assert server.requests[2][2] == {"channel": "output", "seq": 1, "lines": ["a"]}


def test_each_thread_keeps_its_own_connection() -> None:
    with manager() as server:
        client = client_of(server)
        client.heartbeat()

        def beats() -> None:
            for _ in range(3):
                client.heartbeat()

        worker = threading.Thread(target=beats)
        worker.start()
        worker.join()
        client.heartbeat()
    assert len(server.requests) == 5
    assert server.connections == 2


def test_a_connection_the_manager_closed_is_opened_again_without_a_pause() -> None:
    with manager(close_after_answer=True) as server:
        client = client_of(server, retry_for_s=0.0)  # no retry round: only the reconnection
        for seq in range(1, 4):
            client.lines("output", seq, [f"line {seq}"])
    assert [body["seq"] for _, _, body in server.requests] == [1, 2, 3], "each sent once"
    assert server.connections == 3


def test_a_connection_idle_past_the_reuse_time_is_replaced_before_it_is_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager_client, "REUSE_IDLE_S", 0.05)
    with manager() as server:
        client = client_of(server)
        client.heartbeat()
        client.heartbeat()  # at once: the same connection
        time.sleep(0.2)
        client.heartbeat()  # idle too long: a new one, no failed request first
    assert len(server.requests) == 3
    assert server.connections == 2


def test_a_refusal_is_raised_with_its_code_and_not_retried() -> None:
    with manager(status=409) as server:
        client = client_of(server)
        with pytest.raises(ManagerRefused) as refused:
            client.heartbeat()
    assert (refused.value.status, refused.value.code) == (409, "job-ended")
    assert len(server.requests) == 1


def test_an_unreachable_manager_is_reported_once_the_retry_time_is_over() -> None:
    with manager() as server:
        base = address(server)
    client = ManagerClient(base, "job_1", "tok", retry_for_s=0.3)
    with pytest.raises(ManagerRefused) as refused:
        client.heartbeat()
    assert refused.value.code == "manager-unreachable"


@pytest.mark.parametrize("base", ["htps://127.0.0.1:9", "ftp://127.0.0.1", "127.0.0.1:9",
                                  "http:///no-host", "http://127.0.0.1:9/?q=1"])
def test_an_address_that_is_not_plain_http_or_https_is_refused_before_anything_is_sent(
        base: str) -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        ManagerClient(base, "job_1", "tok")


def test_a_busy_manager_is_asked_again_after_the_time_it_named() -> None:
    with manager(busy=1) as server:
        client = client_of(server)
        client.heartbeat()
    first, second = server.arrivals
    assert len(server.requests) == 2
    assert second - first >= 0.95, "Retry-After: 1 is honoured"


def test_pauses_are_jittered_honour_the_asked_time_and_stop_at_the_deadline() -> None:
    pauses = [manager_client.next_pause(2.0, 0.0, 60.0) for _ in range(200)]
    assert all(1.0 <= pause <= 2.0 for pause in pauses)
    assert len(set(pauses)) > 100, "runners that lost the manager together spread out"
    assert manager_client.next_pause(0.1, 3.0, 60.0) == 3.0
    assert manager_client.next_pause(2.0, 30.0, 0.5) == 0.5
    assert [manager_client.retry_after(v) for v in (None, "", "2", "x", "-3", "9999")] == [
        0.0, 0.0, 2.0, 0.0, 0.0, 60.0]
