"""Failures outside a route's own error handling (issue 29's fleet run): an error raised by
a middleware (the API-key lookup) and a client that leaves before its request is read.
Both are answered, counted and logged for what they are: a 503 ``infra-failed`` with its
request id and one warning line; a 499 access line, no server error."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from litestar import Litestar
from litestar.di import Provide

from api.app import create_app
from api.auth_principal import new_key
from api.observability import JsonFormatter
from runner_assembly.settings import RunnerSettings
from tests.conftest import free_port, listening
from tests.support import ADMIN_HEADER_LINE, TASKS, anonymous


def _app(app_url: str, settings: RunnerSettings, port: int) -> Litestar:
    return create_app(app_url, settings=dataclasses.replace(
        settings, runner_api_url=f"http://127.0.0.1:{port}"))


class JsonLines(logging.Handler):
    """Every log line as the service writes it (its request id read when it is written)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))

    def access(self, request_id: str) -> list[int]:
        """The statuses of the request's access lines."""
        return [line["status"] for line in self.lines
                if line["logger"] == "svc.access" and line["requestId"] == request_id]


@pytest.fixture
def logged() -> Iterator[JsonLines]:
    """The log lines written while the test runs, at INFO and above."""
    handler = JsonLines()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def test_an_api_key_lookup_the_database_cannot_answer_is_a_logged_503(
        app_url: str, runner_settings: RunnerSettings,
        logged: JsonLines) -> None:
    port = free_port()
    app = _app(app_url, runner_settings, port)
    async with listening(app, port):
        provide = app.dependencies["pool"]
        assert isinstance(provide, Provide)
        pool: asyncpg.Pool = provide.dependency()
        await pool.close()  # the key lookup's pool: every acquire fails now
        with anonymous():
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                answer = await http.get(TASKS, headers={
                    "authorization": f"Bearer {new_key()}", "x-request-id": "lookup-1"})
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "infra-failed"
    assert answer.headers["retry-after"] == "2"
    assert answer.headers["x-request-id"] == "lookup-1"
    warnings = [line for line in logged.lines if line["logger"] == "svc.api"]
    assert len(warnings) == 1
    assert warnings[0]["level"] == "WARNING" and warnings[0]["requestId"] == "lookup-1"
    assert "database unreachable" in warnings[0]["msg"]
    assert logged.access("lookup-1") == [503]


async def test_an_unauthenticated_answer_is_counted_as_401_with_its_request_id(
        client: httpx.AsyncClient, logged: JsonLines) -> None:
    with anonymous():
        answer = await client.get(TASKS, headers={"x-request-id": "anon-1"})
    assert answer.status_code == 401
    assert answer.headers["x-request-id"] == "anon-1"
    assert logged.access("anon-1") == [401]


async def test_a_client_that_leaves_before_its_body_is_read_is_no_server_error(
        client: httpx.AsyncClient, logged: JsonLines) -> None:
    port = client.base_url.port
    assert port is not None
    head = (b"POST " + TASKS.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + ADMIN_HEADER_LINE
            + b"x-request-id: gone-1\r\ncontent-type: application/json\r\n"
            b"content-length: 400\r\n\r\n{\"tenantId\": ")
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head)  # headers and part of the body, then the client leaves
    deadline = time.monotonic() + 30
    while not logged.access("gone-1"):
        assert time.monotonic() < deadline, "no access line for the request"
        await asyncio.sleep(0.05)
    assert logged.access("gone-1") == [499]
    assert not [line for line in logged.lines if line["level"] in ("ERROR", "CRITICAL")]
