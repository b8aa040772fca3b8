"""A client command starts light: no server, database driver or heavy HTTP stack is imported
(issue 16: `svc queue list` in ≤ 0.3 s), and its small HTTP client speaks HTTP/1.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from cli import http1
from tests.test_cli import submit

HEAVY = {"litestar", "asyncpg", "httpx", "httpcore", "uvicorn", "rich", "click", "ssl",
         "http", "kubernetes", "projections.store", "ledger.writer", "api.app"}
"""Modules (or packages) a client command must not load."""


def imported_modules(*args: str, api: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``svc args`` under ``-X importtime``; the result and every module it imported."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cli.main", *args, "--api", api],
        capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ.get("PATH", ""), "SVC_TOKEN": os.environ["SVC_TOKEN"]})
    modules = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
               if line.startswith("import time:") and "|" in line}
    return result, modules


def heavy_among(modules: set[str]) -> set[str]:
    """The modules of ``HEAVY`` (or inside one of its packages) in ``modules``."""
    return {m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)}


async def test_client_commands_import_nothing_heavy(served_api: str) -> None:
    task_id = submit(served_api)
    for args, expected in ((("queue", "list"), task_id), (("queue", "show", task_id), task_id),
                           (("queue", "stats"), "total: 1"), (("sessions", "ps"), "")):
        result, modules = imported_modules(*args, api=served_api)
        assert result.returncode == 0, result.stdout + result.stderr[-2000:]
        assert expected in result.stdout
        assert "cli.client" in modules and "cli.http1" in modules, "the measure saw the call"
        assert heavy_among(modules) == set(), args
        assert "cli.serve" not in modules and "cli.admin" not in modules, args


def test_the_unreachable_path_imports_nothing_heavy() -> None:
    result, modules = imported_modules("queue", "list", api="127.0.0.1:9")
    assert result.returncode == 3
    assert "cannot reach the API at http://127.0.0.1:9 (ConnectionRefusedError)" in result.stderr
    assert heavy_among(modules) == set()


def test_help_still_lists_every_command_group() -> None:
    result = subprocess.run([sys.executable, "-m", "cli.main", "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0
    for group in ("serve", "queue", "runs", "sessions", "db", "ledger", "manifest"):
        assert f" {group} " in result.stdout, group


class _Answers(BaseHTTPRequestHandler):
    """Answers by path: chunked, with Content-Length, after a 100 Continue, or garbage."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[tuple[str, str, bytes, dict[str, str]]]] = []

    def do_GET(self) -> None:
        self._answer(b"")

    def do_POST(self) -> None:
        self._answer(self.rfile.read(int(self.headers["content-length"])))

    def _answer(self, body: bytes) -> None:
        self.seen.append((self.command, self.path, body, dict(self.headers)))
        echo = json.dumps({"path": self.path, "body": body.decode()}).encode()
        if "/chunked" in self.path:
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for at in range(0, len(echo), 7):
                piece = echo[at:at + 7]
                self.wfile.write(f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        elif "/garbage" in self.path:
            self.wfile.write(b"SPDY/9 nonsense\r\n\r\n")
        else:
            if "/continue" in self.path:
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.send_response(418)
            self.send_header("content-length", str(len(echo)))
            self.end_headers()
            self.wfile.write(echo + b"trailing bytes past the length")

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def stand_in() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Answers.seen.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/prefix"
    finally:
        server.shutdown()
        server.server_close()


def test_http1_reads_chunked_and_sized_answers(stand_in: str) -> None:
    status, _, body = http1.request(stand_in.removesuffix("/prefix"), "GET", "/chunked?a=1")
    assert status == 200
    assert json.loads(body) == {"path": "/chunked?a=1", "body": ""}
    status, _, body = http1.request(stand_in, "POST", "/sized", body=b'{"x": "\xc3\xa9"}',
                                    headers={"Idempotency-Key": "k-1"})
    assert status == 418, "the status is the server's"
    assert json.loads(body) == {"path": "/prefix/sized", "body": '{"x": "é"}'}
    method, _, sent, headers = _Answers.seen[-1]
    assert (method, sent, headers["Idempotency-Key"]) == ("POST", '{"x": "é"}'.encode(), "k-1")
    assert headers["Connection"] == "close"
    status, _, body = http1.request(stand_in, "POST", "/continue", body=b"{}")
    assert status == 418 and json.loads(body)["path"] == "/prefix/continue"


def test_http1_refuses_what_is_not_http(stand_in: str) -> None:
    with pytest.raises(http1.ProtocolError):
        http1.request(stand_in, "GET", "/garbage")
    with pytest.raises(ValueError, match="not an http"):
        http1.request("ftp://127.0.0.1:21", "GET", "/")
