"""The backend's network as the service and the runner know it: pasta's path, the host
loopback ports forwarded (``SVC_BACKEND_LOOPBACK_PORTS``) and which ports may never be.
The launcher that connects the namespace is :mod:`runner_assembly.runner.netns`."""

from __future__ import annotations

import shutil
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from runner_assembly.runner.netns import PACKAGE

PASTA = "pasta"


class NetworkUnavailable(Exception):
    """pasta is missing or cannot connect a sandbox's network namespace on this machine."""


@dataclass(frozen=True)
class Network:
    """How the backend's namespace is connected: pasta's path and the forwarded host
    loopback ports."""

    pasta: str
    loopback_ports: tuple[int, ...] = ()

    def args(self) -> list[str]:
        """This network as the runner's and the launcher's arguments."""
        ports = ",".join(str(port) for port in self.loopback_ports)
        return ["--pasta", self.pasta, *(["--loopback-ports", ports] if ports else [])]


def find_pasta() -> str:
    """The absolute path of ``pasta``; :class:`NetworkUnavailable` naming the package and
    the setting when it is missing."""
    found = shutil.which(PASTA)
    if found is None:
        raise NetworkUnavailable(
            f"pasta (Debian's {PACKAGE}) is missing: the sandboxed backend's own network needs "
            f"it; install it (`make setup` does, as root) or set SVC_LOCAL_SANDBOX=off to run "
            f"local backends unsandboxed")
    return found


def refused_ports(ports: Sequence[int], protected: dict[str, int | None]) -> str | None:
    """Why ``SVC_BACKEND_LOOPBACK_PORTS`` may not forward ``ports``: one of them is the port
    of a service in ``protected`` (``{what: port}``); None when none is."""
    for what, port in protected.items():
        if port is not None and port in ports:
            return (f"SVC_BACKEND_LOOPBACK_PORTS may not forward port {port}: it is the port of "
                    f"{what} (backends never reach the service's API or database)")
    return None


def url_port(url: str | None, default: int | None = None) -> int | None:
    """The TCP port a URL names (``default`` when it names a host but no port); None
    without a URL, for a Unix socket (no host, or a ``host=/path`` query) or when it does
    not parse."""
    if not url:
        return None
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    query = urllib.parse.parse_qs(parts.query)
    if not parts.hostname or parts.hostname.startswith("/") \
            or any(host.startswith("/") for host in query.get("host", [])):
        return None
    return port if port is not None else default
