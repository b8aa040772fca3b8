"""HTTP/1.1 as the CLI and the runner speak it (runner_assembly.contract.http1): answers
framed by length, chunks or the stream's end, on a kept connection answer after answer; a
request head that a caller's text could split is refused."""

from __future__ import annotations

import io
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from runner_assembly.contract.http1 import ProtocolError, read_answer, request_head
from runner_assembly.runner.manager_client import ManagerClient, ManagerRefused

SIZED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


def test_answers_on_a_kept_connection_are_read_one_by_one_by_their_length() -> None:
    reader = io.BytesIO(SIZED + b"HTTP/1.1 201 Created\r\ncontent-length: 11\r\n"
                        b"Retry-After: 3\r\n\r\n{\"a\": \"b\"}\n" + SIZED)
    first, closes = read_answer(reader, "POST")
    assert (first.status, first.body, closes) == (200, b"{}", False)
    second, closes = read_answer(reader, "POST")
    assert (second.status, second.body, closes) == (201, b'{"a": "b"}\n', False)
    assert second.headers["retry-after"] == "3"
    assert read_answer(reader, "POST")[0].body == b"{}"


def test_chunks_a_continue_and_trailers() -> None:
    reader = io.BytesIO(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n"
                        b"3;ext=1\r\nabc\r\n0a\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n"
                        + SIZED)
    answer, closes = read_answer(reader, "POST")
    assert (answer.status, answer.body, closes) == (200, b"abc0123456789", False)
    assert read_answer(reader, "POST")[0].body == b"{}"  # the trailer was read up to its end


@pytest.mark.parametrize(("head", "body"), [
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n", b"{}"),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n", b"{}"),
    (b"HTTP/1.1 200 OK\r\n\r\n", b"to the end of the stream"),
])
def test_an_answer_the_server_closes_after_says_so(head: bytes, body: bytes) -> None:
    answer, closes = read_answer(io.BytesIO(head + body), "POST")
    assert (answer.body, closes) == (body, True)


@pytest.mark.parametrize("wire", [
    b"",  # closed before an answer
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",  # not HTTP
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",  # cut short
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json",  # head cut short
    b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"a" * 70_000 + b"\r\n\r\n",
    "HTTP/1.1 ²00 OK\r\nContent-Length: 0\r\n\r\n".encode("latin-1"),  # not ASCII digits
    "HTTP/1.1 200 OK\r\nContent-Length: ²\r\n\r\n".encode("latin-1"),
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",  # past the body cap
    b"HTTP/1.1 100 Continue\r\n\r\n" * 11 + SIZED,  # interim answers without end
])
def test_an_answer_that_is_not_whole_http_is_an_error(wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        read_answer(io.BytesIO(wire), "POST")


@pytest.mark.parametrize("part", ["target", "space", "name", "value", "nul"])
def test_a_line_break_or_control_in_a_request_head_is_refused(part: str) -> None:
    fields = {"Authorization": "Bearer t"}
    target = "/api/v1/x"
    if part == "target":
        target += " HTTP/1.1\r\nX-Injected: 1\r\n"
    elif part == "space":
        target += " x"
    elif part == "name":
        fields["X-A\nB"] = "1"
    elif part == "value":
        fields["Authorization"] = "Bearer t\r\nX-Injected: 1"
    else:
        fields["Authorization"] = "Bearer t\x00"
    with pytest.raises(ValueError):
        request_head("POST", target, "localhost", fields, 2)
    assert request_head("POST", "/api/v1/x", "localhost", {"Authorization": "Bearer t"}, 2) \
        == b"POST /api/v1/x HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer t\r\n" \
           b"Content-Length: 2\r\n\r\n"


class RawManager:
    """A manager answering with exact bytes, a byte at a time: each answer is ``answers[i]``
    in turn; ``close_after`` answers close the connection after they are written."""

    def __init__(self, answers: list[bytes], close_after: set[int]) -> None:
        self.answers = answers
        self.close_after = close_after
        self.heads: list[bytes] = []
        self.connections = 0
        self.listening = socket.create_server(("127.0.0.1", 0))

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listening.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.one, args=(conn,), daemon=True).start()

    def one(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            while True:
                head = b""
                while (line := reader.readline()) not in (b"\r\n", b""):
                    head += line
                if not head:
                    return
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                reader.read(length)
                index = len(self.heads)
                self.heads.append(head)
                for byte in self.answers[index % len(self.answers)]:
                    conn.sendall(bytes([byte]))
                if index in self.close_after:
                    return


@contextmanager
def raw_manager(answers: list[bytes], close_after: set[int] = frozenset()  # type: ignore[assignment]
                ) -> Iterator[RawManager]:
    server = RawManager(answers, set(close_after))
    threading.Thread(target=server.serve, daemon=True).start()
    try:
        yield server
    finally:
        server.listening.close()


def test_the_runner_reads_answers_written_a_byte_at_a_time_chunked_or_closing() -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"f\r\n{\"start\": true}\r\n0\r\n\r\n")
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    # the manager keeps the connection open after "Connection: close": only the client's
    # reading of that field makes it open another
    with raw_manager([SIZED, chunked, closing, SIZED]) as server:
        port = server.listening.getsockname()[1]
        client = ManagerClient(f"http://127.0.0.1:{port}/base", "job_1", "tok", 5.0)
        client.heartbeat()
        assert client.claim("me") is True  # the chunked answer's body, decoded
        client.heartbeat()  # answered "Connection: close": the next report opens another
        client.heartbeat()
        assert server.connections == 2
        assert len(server.heads) == 4
        first = server.heads[0].decode("latin-1")
        assert first.startswith("POST /base/api/v1/runner/jobs/job_1/heartbeat HTTP/1.1\r\n")
        assert f"Host: 127.0.0.1:{port}\r\n" in first
        assert "Authorization: Bearer tok\r\n" in first


@pytest.mark.parametrize(("job", "token"), [("job_1", "tok\r\nX-Injected: 1"),
                                            ("job 1", "tok"), ("job_1\n", "tok")])
def test_a_token_or_job_that_could_split_the_request_is_refused_before_anything_is_sent(
    job: str, token: str
) -> None:
    with raw_manager([SIZED]) as server:
        port = server.listening.getsockname()[1]
        with pytest.raises(ValueError):
            ManagerClient(f"http://127.0.0.1:{port}", job, token, 5.0)
        assert server.heads == []


def test_an_answer_that_is_not_http_is_retried_until_the_deadline() -> None:
    with raw_manager([b"SSH-2.0-OpenSSH_9.6\r\n\r\n"], close_after=set(range(100))) as server:
        port = server.listening.getsockname()[1]
        client = ManagerClient(f"http://127.0.0.1:{port}", "job_1", "tok", 0.5)
        with pytest.raises(ManagerRefused) as refused:
            client.heartbeat()
        assert refused.value.code == "manager-unreachable"
        assert len(server.heads) >= 2  # tried again, each time on a new connection
