"""HTTP/1.1 on a socket, as the CLI and the runner speak it to the API.

``http.client`` costs a client command ~30 ms of start-up (it imports ``email`` and ``ssl``)
and a runner ~0.25 ms of CPU a report (it parses each answer's header fields with
``email``). Both send small requests to one server and read its answers, so this module does
just that: a request's head (a part with a line break or other control character in it is
refused), and an answer's status, header fields and body, framed by ``Content-Length``,
chunked, or by the end of the stream; 1xx answers are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol

MAX_HEADER_BYTES = 64 * 1024
"""The most an answer's status line and header fields may take together."""
MAX_BODY_BYTES = 64 * 1024 * 1024
"""The largest answer body read (the API's pages are far smaller)."""
MAX_INTERIM_ANSWERS = 10
"""The most 1xx answers skipped before the answer."""
_HEX = frozenset(b"0123456789abcdefABCDEF")


class ProtocolError(Exception):
    """The peer's answer is not HTTP/1.x, or ends before it is whole."""


class Answer(NamedTuple):
    """One answer: its status, header fields (names lower-cased) and body."""

    status: int
    headers: dict[str, str]
    body: bytes


class Reader(Protocol):
    """What is read from: a buffered binary stream (``socket.makefile("rb")``)."""

    def readline(self, size: int = -1, /) -> bytes: ...

    def read(self, size: int = -1, /) -> bytes: ...


def request_head(method: str, target: str, host: str, headers: Mapping[str, str],
                 length: int | None) -> bytes:
    """The head of a request (``length``: its body's, or None for no body). ValueError when
    a part would break the head (a space in the target, a line break or another control
    character, a character outside Latin-1)."""
    if any(_controls(part, allowed="") for part in (method, target, host, *headers)):
        raise ValueError("a request's method, target, host or field name holds a space or "
                         "control character")
    if any(_controls(value, allowed=" \t") for value in headers.values()):
        raise ValueError("a request's header field holds a control character")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _controls(text: str, allowed: str) -> bool:
    """Whether ``text`` holds a control character or space not in ``allowed``."""
    return any((ord(char) <= 0x20 or char == "\x7f") and char not in allowed for char in text)


def read_answer(reader: Reader, method: str) -> tuple[Answer, bool]:
    """Read one answer to ``method`` (skipping 1xx answers) and whether the server closes
    the connection after it (``Connection: close``, HTTP/1.0, or a body that ends with the
    stream). Raises ProtocolError, or OSError from the socket (a timeout included)."""
    for _ in range(MAX_INTERIM_ANSWERS + 1):
        version, status, fields = _read_head(reader)
        if not 100 <= status < 200:
            break
    else:
        raise ProtocolError("too many interim (1xx) answers")
    connection = fields.get("connection", "").lower()
    closes = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
    if method == "HEAD" or status in (204, 304):
        return Answer(status, fields, b""), closes
    if "chunked" in fields.get("transfer-encoding", "").lower():
        return Answer(status, fields, _read_chunked(reader)), closes
    length = fields.get("content-length")
    if length is None:
        body = reader.read(MAX_BODY_BYTES + 1)
        if len(body) > MAX_BODY_BYTES:
            raise ProtocolError("the answer's body is too large")
        return Answer(status, fields, body), True
    if not (length.isascii() and length.isdigit()):
        raise ProtocolError(f"not a Content-Length: {length[:40]!r}")
    if int(length) > MAX_BODY_BYTES:
        raise ProtocolError("the answer's body is too large")
    body = reader.read(int(length))
    if len(body) < int(length):
        raise ProtocolError("the answer ended before its Content-Length")
    return Answer(status, fields, body), closes


def _read_head(reader: Reader) -> tuple[str, int, dict[str, str]]:
    """The version, status code and (lower-cased) header fields of the next answer."""
    status_line = reader.readline(MAX_HEADER_BYTES)
    if not status_line:
        raise ProtocolError("the connection closed before an answer")
    parts = status_line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3 \
            or not (parts[1].isascii() and parts[1].isdigit()):
        raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    fields: dict[str, str] = {}
    used = len(status_line)
    while (line := reader.readline(MAX_HEADER_BYTES)) not in (b"\r\n", b"\n"):
        used += len(line)
        if not line.endswith(b"\n") or used > MAX_HEADER_BYTES:
            raise ProtocolError("the answer's header fields are cut short or too large")
        name, sep, value = line.decode("latin-1").partition(":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return parts[0], int(parts[1]), fields


def _read_chunked(reader: Reader) -> bytes:
    """The body of a chunked transfer coding (its trailer fields read and ignored)."""
    body: list[bytes] = []
    total = 0
    while True:
        size_line = reader.readline(MAX_HEADER_BYTES)
        if not size_line.endswith(b"\n"):
            raise ProtocolError("a chunk size line is cut short")
        digits = size_line.split(b";", 1)[0].strip()
        if not digits or not _HEX.issuperset(digits):
            raise ProtocolError("a chunk size is not hexadecimal")
        size = int(digits, 16)
        total += size
        if total > MAX_BODY_BYTES:
            raise ProtocolError("the answer's body is too large")
        if size == 0:
            while reader.readline(MAX_HEADER_BYTES) not in (b"\r\n", b"\n", b""):
                pass  # trailer fields
            return b"".join(body)
        chunk = reader.read(size)
        if len(chunk) < size or reader.readline(MAX_HEADER_BYTES) not in (b"\r\n", b"\n"):
            raise ProtocolError("a chunk is cut short")
        body.append(chunk)
