"""A pod backend's one way out: its runner's HTTP egress proxy (DESIGN 13).

A pod's backend runs in a network namespace with only a loopback interface, so it reaches
neither the manager nor anything else directly. Its runner, outside the namespace, listens
on a Unix socket bound into the sandbox (the sandbox's relay,
:mod:`runner_assembly.runner.egress_relay`, makes it the backend's ``HTTPS_PROXY``) and
serves HTTP proxy requests on it: ``CONNECT host:port`` (HTTPS, what model APIs speak) and
plain ``http://`` requests in absolute form (one request per connection). A destination
must be public: the repository fetches' rules (:mod:`runner_assembly.assembly.fetch_policy`:
no loopback, link-local or metadata address, no ``localhost`` or metadata name) and, for a
backend, no other address that is not global either (private, shared, reserved: the
cluster's pods and services, the manager's among them), unless ``SVC_FETCH_ALLOW_HOSTS``
names it; and never the service's own endpoints (the job file's ``protected``: its
database; ``SVC_RUNNER_API_URL``'s host and port), allow-listed or not. The proxy resolves a name
once and connects only to the addresses it checked (no second lookup to rebind). A refusal
answers ``403`` naming the host and the rule, never more.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner_assembly.assembly.fetch_policy import (
    DNS_TIMEOUT_S,
    METADATA_NAMES,
    Address,
    forbidden,
    host_allowed,
    literal,
    lookup,
    split_host,
)
from runner_assembly.contract.jobfile import FetchAllow
from runner_assembly.runner.splice import splice

MAX_HEAD = 16 * 1024
"""The longest request head the proxy reads."""
HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 15.0
MAX_CONNECTIONS = 256
"""Connections served at once; more are closed unanswered."""
Refusal = Callable[[str, int, str], None]
"""Told of each refused destination: host, port, reason."""


class Refused(Exception):
    """The destination is not one a backend may reach (the message names host and rule)."""


@dataclass(frozen=True)
class Request:
    """What a proxy request asks for: a tunnel (``head`` None) or one plain HTTP request
    (``head``: its head rewritten to origin form)."""

    host: str
    port: int
    head: bytes | None = None


@dataclass(frozen=True)
class EgressPolicy:
    """Where a pod's backend may connect: the fetch rules of DESIGN 13 with the operator's
    ``allow`` (``SVC_FETCH_ALLOW_HOSTS``), never the ``protected`` endpoints (the manager's
    host and port)."""

    allow: FetchAllow
    protected: tuple[tuple[str, int], ...] = ()

    def addresses(self, host: str, port: int) -> list[Address]:
        """The checked addresses to connect to for ``host:port``; :class:`Refused` when
        the backend may not go there (or it does not resolve)."""
        host = host.lower().rstrip(".")
        if not 0 < port < 65536 or not host or len(host) > 253:
            raise Refused("not a host and port")
        allowed = host_allowed(host, port, self.allow)
        if not allowed and (host == "localhost" or host.endswith(".localhost")
                            or host in METADATA_NAMES):
            raise Refused(not_public(host))
        address = literal(host)
        found = [address] if address is not None else lookup(host, port, DNS_TIMEOUT_S)
        if not found:
            raise Refused(f"{host} did not resolve")
        if self._protected(host, port, found):
            raise Refused(f"{host}:{port} is the service's own endpoint (never reachable from "
                          "a backend)")
        if not allowed and not all(public(each) for each in found):
            raise Refused(not_public(host))
        return found

    def _protected(self, host: str, port: int, found: list[Address]) -> bool:
        for name, protected_port in self.protected:
            if port != protected_port:
                continue
            if name == host:
                return True
            address = literal(name)
            theirs = [address] if address is not None else lookup(name, port, DNS_TIMEOUT_S)
            if set(theirs or []) & set(found):
                return True
        return False


def not_public(host: str) -> str:
    """Why ``host`` is refused when it is not public."""
    return (f"{host} is or resolves to an address that is not public (loopback, private, "
            "link-local or metadata; not in SVC_FETCH_ALLOW_HOSTS)")


def public(address: Address) -> bool:
    """A global address that is none of the fetch rules' forbidden ones (an IPv4 address
    inside IPv6 judged as itself)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not forbidden(address)


ENDPOINT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "postgres": 5432}
"""The default port of each URL scheme :func:`endpoint` reads."""


def endpoint(url: str | None) -> tuple[str, int] | None:
    """The TCP host and port of ``url`` (``SVC_RUNNER_API_URL``, ``SVC_DATABASE_URL``);
    None without one, for a Unix socket (no host, or a ``host=/path`` query) or a URL that
    does not parse."""
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    on_socket = urllib.parse.parse_qs(parts.query).get("host", [""])[0].startswith("/")
    if not host or on_socket or parts.scheme not in ENDPOINT_PORTS:
        return None
    return host.lower().rstrip("."), port or ENDPOINT_PORTS[parts.scheme]


def authority(host: str, port: int) -> str:
    """``host:port``, an IPv6 address in brackets (as ``SVC_FETCH_ALLOW_HOSTS`` reads it)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def policy_for(allow: FetchAllow, manager_url: str | None) -> EgressPolicy:
    """The egress rules of a job: its allow-list; its ``protected`` endpoints and the
    manager's (``manager_url``) never."""
    protected = [found for found in (_host_port(entry) for entry in allow.protected) if found]
    manager = endpoint(manager_url)
    return EgressPolicy(allow, tuple([*protected, *([manager] if manager else [])]))


def _host_port(entry: str) -> tuple[str, int] | None:
    try:
        host, port = split_host(entry)
    except ValueError:
        return None
    return (host, port) if port is not None else None


def parse(head: bytes) -> Request:
    """The request of a proxy request ``head`` (without its blank line); :class:`Refused`
    for anything but ``CONNECT host:port`` or an ``http://`` URL in absolute form."""
    line, _, fields = head.partition(b"\r\n")
    try:
        method, target, version = line.decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise Refused("not an HTTP proxy request") from None
    if method == "CONNECT":
        try:
            host, port = split_host(target)
        except ValueError:
            raise Refused("CONNECT needs host:port") from None
        if port is None:
            raise Refused("CONNECT needs host:port")
        return Request(host, port)
    parts = urllib.parse.urlsplit(target)
    try:
        host, port = parts.hostname or "", parts.port or 80
    except ValueError:
        raise Refused("not a host and port") from None
    if parts.scheme != "http" or not host:
        raise Refused("only CONNECT and http:// URLs go through this proxy")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kept = [field for field in fields.split(b"\r\n") if field and not field.lower().startswith(
        (b"proxy-", b"connection:"))]
    rewritten = b"\r\n".join([f"{method} {path} {version}".encode(), *kept,
                              b"Connection: close"])
    return Request(host, port, rewritten + b"\r\n\r\n")


class EgressProxy:
    """The proxy on a Unix socket at ``path``, applying ``policy``; serves in daemon
    threads from construction until :meth:`close`."""

    def __init__(self, path: Path, policy: EgressPolicy, refused: Refusal | None = None
                 ) -> None:
        self.path = path
        self.policy = policy
        self._refused = refused
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        path.chmod(0o600)
        self._listener.listen(64)
        threading.Thread(target=self._accept, name="svc-egress", daemon=True).start()

    def close(self) -> None:
        """Stop accepting (connections under way end with their sockets) and remove the
        socket file."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with contextlib.suppress(OSError):
            self.path.unlink()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                client.close()
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            self._handle(client)
        except OSError:
            client.close()
        finally:
            self._slots.release()

    def _handle(self, client: socket.socket) -> None:
        """One proxy request: checked, connected, then joined both ways."""
        client.settimeout(HEAD_TIMEOUT_S)
        head, rest = read_head(client)
        try:
            request = parse(head)
        except Refused as refused:
            return answer(client, 400, str(refused))
        try:
            addresses = self.policy.addresses(request.host, request.port)
        except Refused as refused:
            if self._refused is not None:
                self._refused(request.host[:253], request.port, str(refused))
            return answer(client, 403, str(refused))
        upstream = connect(addresses, request.port)
        if upstream is None:
            return answer(client, 502, f"{request.host}:{request.port} did not answer")
        client.settimeout(None)
        if request.head is None:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        splice(client, upstream, (request.head or b"") + rest)
        return None


def read_head(client: socket.socket) -> tuple[bytes, bytes]:
    """A request head (up to :data:`MAX_HEAD`) and what came after it; ``(b"", b"")`` when
    none arrived whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            return b"", b""
        chunk = client.recv(4096)
        if not chunk:
            return b"", b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def connect(addresses: list[Address], port: int) -> socket.socket | None:
    """A connection to the first of ``addresses`` that answers on ``port``."""
    for address in addresses:
        try:
            upstream = socket.create_connection((str(address), port), timeout=CONNECT_TIMEOUT_S)
        except OSError:
            continue
        upstream.settimeout(None)
        return upstream
    return None


def answer(client: socket.socket, status: int, reason: str) -> None:
    """A short plain-text answer, then the connection closed."""
    body = (reason + "\n").encode()
    words = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    with contextlib.suppress(OSError):
        client.sendall(f"HTTP/1.1 {status} {words}\r\nContent-Type: text/plain\r\n"
                       f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                       + body)
    client.close()

