"""The egress relay inside a pod backend's sandbox (DESIGN 13), in front of the backend.

A pod's backend runs in a network namespace of its own that has only a loopback interface
(bwrap's ``--unshare-net``): it reaches nothing, neither the manager nor the network. Its
one way out is its runner's egress proxy (:mod:`runner_assembly.runner.egress`), a Unix
socket bound into the sandbox. This launcher listens on ``127.0.0.1:<port>`` in the
namespace, leaves a relay process behind that joins each connection to that socket, and
*becomes* the backend (``exec``) with ``HTTPS_PROXY``, ``HTTP_PROXY`` and ``ALL_PROXY``
(both cases) naming it and ``NO_PROXY`` empty. The relay is the sandbox's init's child,
not the backend's: it ends with the sandbox's pid namespace. The relay enforces nothing
(the backend could replace it): the proxy outside decides where a connection may go.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Sequence

from runner_assembly.runner.splice import splice

HOST = "127.0.0.1"
PORT = 3128
"""Where the relay listens inside the backend's namespace (its own loopback)."""
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
NO_PROXY_VARIABLES = ("NO_PROXY",)


def proxy_env(port: int) -> dict[str, str]:
    """The variables that send a backend's HTTP clients through the relay on ``port``."""
    url = f"http://{HOST}:{port}"
    env = {name: url for name in PROXY_VARIABLES}
    env.update({name: "" for name in NO_PROXY_VARIABLES})
    return {**env, **{name.lower(): value for name, value in env.items()}}


def launch(socket_path: str, port: int, command: Sequence[str]) -> int:
    """Listen on ``port``, leave the relay to ``socket_path`` behind, then become
    ``command`` with the proxy variables set (never returns unless the port is taken)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind((HOST, port))
        listener.listen(128)
    except OSError as error:
        print(f"svc: the sandbox's egress relay cannot listen on {HOST}:{port}: "
              f"{type(error).__name__}", file=sys.stderr, flush=True)
        return 125
    _detach(listener, socket_path)
    listener.close()
    os.execve(command[0], list(command), {**os.environ, **proxy_env(port)})


def _detach(listener: socket.socket, socket_path: str) -> None:
    """Fork twice: the relay's parent (the sandbox's init then) is not the backend."""
    child = os.fork()
    if child == 0:
        try:
            if os.fork() == 0:
                os.setsid()
                _quiet()
                _serve(listener, socket_path)
        finally:
            os._exit(0)
    os.waitpid(child, 0)


def _quiet() -> None:
    """The relay holds none of the backend's standard streams (their readers see them end
    with the backend)."""
    null = os.open(os.devnull, os.O_RDWR)
    for descriptor in (0, 1, 2):
        os.dup2(null, descriptor)
    os.close(null)


def _serve(listener: socket.socket, socket_path: str) -> None:
    """Join each connection on ``listener`` to a new connection to ``socket_path``."""
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_relay, args=(client, socket_path), daemon=True).start()


def _relay(client: socket.socket, socket_path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(socket_path)
    except OSError:
        upstream.close()
        client.close()
        return
    splice(client, upstream)


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``--socket PATH [--port N] -- COMMAND…`` (parsed by hand: it starts
    before every pod backend, so it imports little)."""
    args = sys.argv[1:] if argv is None else argv
    options: dict[str, str] = {}
    while args and args[0] in ("--socket", "--port") and len(args) > 1:
        options[args[0]] = args[1]
        args = args[2:]
    command = args[1:] if args[:1] == ["--"] else []
    if "--socket" not in options or not command:
        print("usage: egress_relay --socket PATH [--port N] -- COMMAND…", file=sys.stderr)
        return 2
    with contextlib.suppress(BrokenPipeError):
        return launch(options["--socket"], int(options.get("--port", PORT)), command)
    return 125


if __name__ == "__main__":
    sys.exit(main())
