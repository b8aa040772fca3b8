"""Where a repository may be fetched from (DESIGN 13): the runner fetches as root, outside
the sandbox, so a repository URL must not make it read the host's files or reach the
host's own services.

- ``file://`` URLs (the only way to name a host path) are refused unless they lie below a
  root of ``SVC_FETCH_ALLOW_FILE_ROOTS``, and never below the data directory or the
  workspace root (another job's checkout, the secret store), symlinks resolved.
- A host that is, or resolves to, a loopback, link-local, unspecified, multicast or cloud
  metadata address (or is named ``localhost`` or a metadata name) is refused unless
  ``SVC_FETCH_ALLOW_HOSTS`` names it (``host`` or ``host:port``).

The manager checks at intake (:func:`lexical`: no DNS) and at dispatch (:func:`resolved`,
with a timeout); the runner checks both again right before ``git`` runs, since DNS can
change. Messages name the host or the rule, never the URL.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ledger.states import FailureKind
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.contract.jobfile import FetchAllow

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
UNRESOLVED = "did not resolve"
DNS_TIMEOUT_S = 2.0
"""How long a dispatch or a runner waits for one host's addresses."""
DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}
METADATA_NAMES = frozenset({"metadata.google.internal", "metadata.goog", "metadata",
                            "instance-data", "instance-data.ec2.internal"})
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "169.254.169.123", "100.100.100.200",
    "168.63.129.16", "fd00:ec2::254", "fd00:ec2::23"))
"""Cloud instance metadata and agent endpoints (AWS, ECS, Alibaba, Azure), besides the
link-local range."""
SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@(?P<host>[A-Za-z0-9.-]+):[^/\s][^\s]*$")
_RESOLVER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="svc-dns")


@dataclass(frozen=True)
class Target:
    """What a repository URL points at: a host and port, or (``host`` None) a file path."""

    host: str | None
    port: int | None
    path: str


def target(url: str) -> Target | None:
    """The target of ``url`` (None: not a URL this service fetches)."""
    scp = SCP_LIKE.match(url)
    if scp:
        return Target(host=_plain(scp.group("host")), port=22, path="")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if parts.scheme == "file":
        return Target(host=None, port=None, path="" if parts.netloc else parts.path)
    if not host or parts.scheme not in DEFAULT_PORTS:
        return None
    return Target(host=_plain(host), port=port or DEFAULT_PORTS[parts.scheme], path=parts.path)


def _plain(host: str) -> str:
    return host.lower().rstrip(".")


def forbidden(address: Address) -> bool:
    """A loopback, link-local, unspecified, multicast or metadata address (IPv4 inside
    IPv6 unwrapped)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        elif int(address) >> 32 == 0 and int(address) > 1:
            address = ipaddress.IPv4Address(int(address))
    return (address.is_loopback or address.is_link_local or address.is_unspecified
            or address.is_multicast or address in METADATA_ADDRESSES)


def literal(host: str) -> Address | None:
    """``host`` as an address when it is written as one, in any form the C library reads
    (``127.1``, ``0x7f000001``, ``2130706433``), without asking DNS."""
    try:
        infos = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError, ValueError):
        return None
    return ipaddress.ip_address(str(infos[0][4][0]).split("%", 1)[0])


def host_allowed(host: str, port: int | None, allow: FetchAllow) -> bool:
    """Whether ``SVC_FETCH_ALLOW_HOSTS`` names ``host`` (with any port, or ``port``)."""
    for entry in allow.hosts:
        name, entry_port = split_host(entry)
        if _same_host(name, host) and entry_port in (None, port):
            return True
    return False


def split_host(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port`` as (host, port); ``ValueError``
    when it is none of these."""
    text = entry.strip()
    match = re.fullmatch(r"\[(?P<v6>[0-9A-Fa-f:.]+)\](:(?P<p6>[0-9]{1,5}))?"
                         r"|(?P<host>[A-Za-z0-9._-]+)(:(?P<port>[0-9]{1,5}))?", text)
    if match is None:
        raise ValueError(f"{entry!r} is not host[:port]")
    port = match.group("p6") or match.group("port")
    return _plain(match.group("v6") or match.group("host")), int(port) if port else None


def _same_host(a: str, b: str) -> bool:
    first, second = literal(a), literal(b)
    return first == second if first is not None and second is not None else a == b


def lexical(url: str, allow: FetchAllow) -> str | None:
    """Why ``url`` is refused as written (no DNS), or None."""
    found = target(url)
    if found is None:
        return None  # not a fetchable URL: the model's own checks refuse it
    if found.host is None:
        return _file_refusal(found.path, allow)
    if host_allowed(found.host, found.port, allow):
        return None
    address = literal(found.host)
    if address is not None and forbidden(address):
        return (f"repository host {found.host} is a loopback, link-local or metadata address"
                " (not in SVC_FETCH_ALLOW_HOSTS)")
    if found.host == "localhost" or found.host.endswith(".localhost") \
            or found.host in METADATA_NAMES:
        return (f"repository host {found.host} is the local machine or a metadata service "
                "(not in SVC_FETCH_ALLOW_HOSTS)")
    return None


def _file_refusal(path: str, allow: FetchAllow) -> str | None:
    """Why a ``file://`` path is refused: outside every allowed root, or inside a denied
    one, written as it is or percent-decoded, symlinks resolved."""
    for candidate in {path, unquote(path)}:
        if not candidate.startswith("/") or "\x00" in candidate:
            return "a file URL must name an absolute path on this machine, without a host"
        real = os.path.realpath(candidate)
        if not any(_below(real, root) for root in allow.file_roots):
            return "file URLs are refused outside SVC_FETCH_ALLOW_FILE_ROOTS"
        if any(_below(real, root) for root in allow.denied_roots):
            return ("file URLs may not name the service's data directory or workspace root "
                    "(another job's files)")
    return None


def _below(path: str, root: str) -> bool:
    real = os.path.realpath(root)
    return path == real or path.startswith(real.rstrip("/") + "/")


def resolved(url: str, allow: FetchAllow, *, strict: bool,
             timeout: float = DNS_TIMEOUT_S) -> str | None:
    """Why ``url``'s host is refused by what it resolves to, or None. ``strict`` (the
    runner, right before it fetches): a host that does not resolve in time is refused too;
    otherwise (the manager) the fetch fails later on its own."""
    found = target(url)
    if found is None or found.host is None or literal(found.host) is not None \
            or host_allowed(found.host, found.port, allow):
        return None
    addresses = lookup(found.host, found.port, timeout)
    if addresses is None:
        return f"repository host {found.host} {UNRESOLVED}" if strict else None
    if any(forbidden(a) for a in addresses):
        return (f"repository host {found.host} resolves to a loopback, link-local or "
                "metadata address (not in SVC_FETCH_ALLOW_HOSTS)")
    return None


def check_written(url: str, allow: FetchAllow) -> None:
    """:class:`AssemblyFailure` (``tenant-policy-denied``) for a fetch the operator does
    not allow as written: a file path, or a host that is a refused address (no lookup)."""
    refusal = lexical(url, allow)
    if refusal is not None:
        raise AssemblyFailure(FailureKind.TENANT_POLICY_DENIED, refusal)


def check_fetch(url: str, allow: FetchAllow, *, strict: bool) -> None:
    """:class:`AssemblyFailure` for a fetch the operator does not allow
    (``tenant-policy-denied``: a file path, or a host that is or resolves to a refused
    address) and, ``strict``, for a host that does not resolve (``bundle-unavailable``)."""
    refusal = lexical(url, allow) or resolved(url, allow, strict=strict)
    if refusal is not None:
        kind = (FailureKind.BUNDLE_UNAVAILABLE if refusal.endswith(UNRESOLVED)
                else FailureKind.TENANT_POLICY_DENIED)
        raise AssemblyFailure(kind, refusal)


def lookup(host: str, port: int | None, timeout: float) -> list[Address] | None:
    """The addresses of ``host`` (None: no answer within ``timeout``)."""
    future = _RESOLVER.submit(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
    try:
        infos = future.result(timeout=timeout)
    except (FutureTimeout, OSError, UnicodeError, ValueError):
        return None
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
