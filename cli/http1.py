"""One HTTP/1.1 request over a plain socket: the CLI's whole transport.

``http.client`` costs the CLI ~30 ms of start-up (it imports ``email`` and ``ssl``); a client
command sends one request and reads one answer (``Connection: close``), so this module does
just that, with the wire of :mod:`runner_assembly.contract.http1`. ``ssl`` is imported only
for an ``https`` URL.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from runner_assembly.contract.http1 import Answer, ProtocolError, read_answer, request_head

__all__ = ["Answer", "ProtocolError", "request"]


def request(base: str, method: str, target: str, *, body: bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = 30.0) -> Answer:
    """Send ``method target`` to the server of ``base`` (``http://host:port/prefix``) and
    return its :class:`Answer`. Raises OSError (unreachable, timed out), ProtocolError or
    ValueError (an unusable URL)."""
    url = urlsplit(base)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"not an http(s) URL: {base!r}")
    port = url.port or (443 if url.scheme == "https" else 80)
    fields = {"Connection": "close", "Accept": "application/json", **(headers or {})}
    sized = body is not None or method in ("POST", "PUT", "PATCH")
    payload = request_head(method, url.path + target, url.netloc.rpartition("@")[2], fields,
                           len(body or b"") if sized else None) + (body or b"")
    with socket.create_connection((url.hostname, port), timeout=timeout) as raw:
        sock = raw
        if url.scheme == "https":
            import ssl

            sock = ssl.create_default_context().wrap_socket(raw, server_hostname=url.hostname)
        sock.sendall(payload)
        with sock.makefile("rb") as reader:
            return read_answer(reader, method)[0]
