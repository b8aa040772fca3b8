"""One HTTP/1.1 request over a plain socket: the CLI's whole transport.

``http.client`` costs the CLI ~30 ms of start-up (it imports ``email`` and ``ssl``); a client
command sends one request and reads one answer, so this module does just that:
``Connection: close``, the body up to the end of the stream, ``Content-Length`` or chunked.
``ssl`` is imported only for an ``https`` URL.
"""

from __future__ import annotations

import socket
from typing import NamedTuple
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 * 1024


class ProtocolError(Exception):
    """The peer's answer is not HTTP/1.x."""


class Answer(NamedTuple):
    """One answer: its status, header fields (names lower-cased) and body."""

    status: int
    headers: dict[str, str]
    body: bytes


def request(base: str, method: str, target: str, *, body: bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = 30.0) -> Answer:
    """Send ``method target`` to the server of ``base`` (``http://host:port/prefix``) and
    return its :class:`Answer`. Raises OSError (unreachable, timed out), ProtocolError or
    ValueError (an unusable URL)."""
    url = urlsplit(base)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"not an http(s) URL: {base!r}")
    port = url.port or (443 if url.scheme == "https" else 80)
    host_header = url.netloc.rpartition("@")[2]
    lines = [f"{method} {url.path}{target} HTTP/1.1", f"Host: {host_header}",
             "Connection: close", "Accept: application/json"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body or b'')}")
    payload = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
    with socket.create_connection((url.hostname, port), timeout=timeout) as raw:
        sock = raw
        if url.scheme == "https":
            import ssl

            sock = ssl.create_default_context().wrap_socket(raw, server_hostname=url.hostname)
        sock.sendall(payload)
        return _read_answer(sock, method)


def _read_answer(sock: socket.socket, method: str) -> Answer:
    """Read the status line, headers and body of one answer (skipping 1xx answers)."""
    data = b""
    while True:
        while b"\r\n\r\n" not in data:
            if len(data) > MAX_HEADER_BYTES:
                raise ProtocolError("the answer's headers are too large")
            chunk = sock.recv(65536)
            if not chunk:
                raise ProtocolError("the connection closed before an answer")
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        status, fields = _parse_head(head)
        if not 100 <= status < 200:
            break
    if method == "HEAD" or status in (204, 304):
        return Answer(status, fields, b"")
    rest = _read_to_end(sock, data)
    if "chunked" in fields.get("transfer-encoding", "").lower():
        return Answer(status, fields, _dechunk(rest))
    length = fields.get("content-length")
    if length is not None:
        if not length.isdigit() or len(rest) < int(length):
            raise ProtocolError("the answer ended before its Content-Length")
        return Answer(status, fields, rest[:int(length)])
    return Answer(status, fields, rest)


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """The status code and the (lower-cased) header fields."""
    status_line, *field_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    fields: dict[str, str] = {}
    for line in field_lines:
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return int(parts[1]), fields


def _read_to_end(sock: socket.socket, data: bytes) -> bytes:
    """Everything the peer sends until it closes (``Connection: close``)."""
    parts = [data]
    while chunk := sock.recv(65536):
        parts.append(chunk)
    return b"".join(parts)


def _dechunk(data: bytes) -> bytes:
    """The body of a chunked transfer coding (trailers ignored)."""
    body: list[bytes] = []
    at = 0
    while True:
        end = data.find(b"\r\n", at)
        if end < 0:
            raise ProtocolError("a chunk size line is cut short")
        size_text = data[at:end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ProtocolError("a chunk size is not hexadecimal") from None
        if size == 0:
            return b"".join(body)
        start = end + 2
        if len(data) < start + size:
            raise ProtocolError("a chunk is cut short")
        body.append(data[start:start + size])
        at = start + size + 2
