"""The backend's own network (DESIGN 13): a network namespace joined to the world by pasta.

The backend runs in a network namespace of its own that pasta (Debian's ``passt``) connects
to the host's network in user mode: the backend's outbound TCP and UDP leave through the
host's sockets (its model API answers), but ``127.0.0.1`` is the namespace's own loopback,
the host's own addresses are the namespace's (a connection to them stays inside), and the
gateway address is not mapped to the host (``--no-map-gw``). So no loopback service of the
host -- the API, the database -- is reachable, except the ports the operator forwards on
purpose (``SVC_BACKEND_LOOPBACK_PORTS``: ``--tcp-ns``, the namespace's
``127.0.0.1:<port>`` to the host's); abstract Unix sockets are per network namespace too.

The backend command is this module's launcher in front of the bwrap command. The launcher
forks a holder that creates the namespace (in a user namespace of its own unless it runs
as root), attaches pasta to it in the foreground, waits until pasta is ready (it writes its
pid file, a pipe here, once the namespace is configured), joins the namespace and then
*becomes* bwrap (``exec``: same process, signals and exit code as before). pasta, its
child, dies with it (``PR_SET_PDEATHSIG``). Nothing of the backend runs before the network
is ready: when pasta cannot connect the namespace, the launcher exits with
:data:`NO_NETWORK` and says why on stderr, and the backend never starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import select
import signal
import subprocess
import sys
from collections.abc import Sequence

PACKAGE = "passt"
"""pasta's Debian package."""
READY_TIMEOUT_S = 30.0
NO_NETWORK = 125
"""The launcher's exit code when the sandbox's network could not be connected."""
PR_SET_PDEATHSIG = 1
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CAPABILITY_VERSION_3 = 0x20080522


def pasta_command(pasta: str, ports: Sequence[int], holder_pid: int, ready_fd: int
                  ) -> list[str]:
    """pasta in the foreground on the network namespace of ``holder_pid``: addresses and
    routes copied from the host, no port forwarded into the namespace, only ``ports``
    forwarded from its loopback to the host's, the gateway not mapped to the host; its pid
    written to ``ready_fd`` once the namespace is configured."""
    forwarded = ",".join(str(port) for port in ports) or "none"
    namespaces = [f"--netns=/proc/{holder_pid}/ns/net"]
    if os.geteuid() == 0:  # root stays root (else pasta drops to nobody and cannot join)
        namespaces.insert(0, "--runas=0:0")
    else:  # the holder's user namespace owns its network namespace
        namespaces.insert(0, f"--userns=/proc/{holder_pid}/ns/user")
    return [pasta, "--foreground", "--quiet", f"--pid=/proc/self/fd/{ready_fd}",
            "--config-net", "--no-map-gw", "--tcp-ports=none", "--udp-ports=none",
            f"--tcp-ns={forwarded}", "--udp-ns=none", *namespaces]


def launch(pasta: str, ports: Sequence[int], bwrap_command: Sequence[str]) -> int:
    """Enter a new network namespace connected by pasta, then become ``bwrap_command``
    (and never return); :data:`NO_NETWORK` when the namespace could not be connected."""
    holder = _Holder()
    try:
        entered = holder.ready() and _connect(pasta, ports, holder.pid) and holder.enter()
    finally:
        holder.release()
    if entered:
        os.execv(bwrap_command[0], list(bwrap_command))
    print(f"svc: the sandbox's network could not be connected by {pasta} (Debian's "
          f"{PACKAGE}); the backend did not start", file=sys.stderr, flush=True)
    return NO_NETWORK


class _Holder:
    """A child process holding a new network namespace (in a new user namespace mapping
    only its own user, unless it is root) until released; the launcher joins it."""

    def __init__(self) -> None:
        ready_read, ready_write = os.pipe()
        self._hold_read, self._hold_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the holder: whatever happens, it never returns into the launcher
            try:
                os.close(ready_read)
                os.close(self._hold_write)
                os.write(ready_write, b"ok" if _unshare_network() else b"no")
                os.read(self._hold_read, 1)  # until the launcher releases it (or dies)
            finally:
                os._exit(0)
        os.close(ready_write)
        os.close(self._hold_read)
        with os.fdopen(ready_read, "rb") as ready:
            readable, _, _ = select.select([ready], [], [], READY_TIMEOUT_S)
            self._unshared = bool(readable) and ready.read(2) == b"ok"

    def ready(self) -> bool:
        """Whether the holder has its namespace."""
        return self._unshared

    def enter(self) -> bool:
        """Join the holder's user (unless root) and network namespaces."""
        kinds = [("net", CLONE_NEWNET)]
        if os.geteuid() != 0:
            kinds.insert(0, ("user", CLONE_NEWUSER))
        for name, kind in kinds:
            descriptor = os.open(f"/proc/{self.pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc().setns(descriptor, kind) != 0:
                    return False
            finally:
                os.close(descriptor)
        return True

    def release(self) -> None:
        """Let the holder exit and reap it."""
        with contextlib.suppress(OSError):
            os.close(self._hold_write)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _unshare_network() -> bool:
    """In the holder: a new network namespace (root), or a new user namespace mapping this
    user to itself with a new network namespace (anyone else)."""
    uid, gid = os.geteuid(), os.getegid()
    if uid == 0:  # then with no capability: pasta drops its own, and may only open the
        # namespace of a process whose capabilities are a subset of its own
        return _libc().unshare(CLONE_NEWNET) == 0 and _drop_capabilities()
    if _libc().unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return False
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    except OSError:
        return False
    return True


def _drop_capabilities() -> bool:
    """``capset``: no capability left in this process (the holder)."""
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    return bool(_libc().capset(header, data) == 0)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _connect(pasta: str, ports: Sequence[int], holder_pid: int) -> bool:
    """pasta attached to the holder's namespace and ready (it stays: it ends with this
    process, or with bwrap once this process became bwrap); False when it is not."""
    ready_read, ready_write = os.pipe()
    try:
        process = subprocess.Popen(pasta_command(pasta, ports, holder_pid, ready_write),
                                   pass_fds=(ready_write,), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL,
                                   preexec_fn=functools.partial(_die_with_parent, os.getpid()))
    except OSError:
        os.close(ready_read)
        return False
    finally:
        os.close(ready_write)
    with os.fdopen(ready_read, "rb") as ready:
        readable, _, _ = select.select([ready], [], [], READY_TIMEOUT_S)
        if readable and ready.read1(64).strip():
            return True
    process.kill()
    process.wait()
    return False


def _die_with_parent(parent: int) -> None:
    """In pasta's child before exec: pasta ends with its parent (the launcher, then bwrap),
    also when the parent ended before the signal was asked for."""
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the launcher: ``--pasta PATH [--loopback-ports P,Q] -- BWRAP…`` (parsed
    by hand: the launcher starts before every backend, so it imports little)."""
    args = sys.argv[1:] if argv is None else argv
    options: dict[str, str] = {}
    while args and args[0] in ("--pasta", "--loopback-ports") and len(args) > 1:
        options[args[0]] = args[1]
        args = args[2:]
    command = args[1:] if args[:1] == ["--"] else []
    if "--pasta" not in options or not command:
        print("usage: netns --pasta PATH [--loopback-ports P,Q] -- BWRAP…", file=sys.stderr)
        return 2
    ports = tuple(int(port) for port in options.get("--loopback-ports", "").split(",") if port)
    with contextlib.suppress(BrokenPipeError):
        return launch(options["--pasta"], ports, command)
    return NO_NETWORK


if __name__ == "__main__":
    sys.exit(main())

