"""The local runner's sandbox: the backend runs under bubblewrap and sees only its own job.

Inside the sandbox the backend finds read-only system directories (``/usr``, ``/bin``,
``/lib*``, a few files of ``/etc``), the Python it may need (the interpreter's prefixes and
the project's packages, read-only), its home with the backend home and projected secrets,
its workspaces and its session volume (read-write), volume tool credentials (read-only), a
private ``/tmp``, ``/dev`` and ``/proc`` (its own pid namespace). Everything else of the
machine -- the secret store, the data directory, other jobs, the server's processes -- is
absent. Paths keep their host names, so the plan's environment stays valid unchanged. A
local backend runs as :data:`BACKEND_UID` in its own user namespace (the runner's user
outside) and in its own network namespace connected by pasta
(:mod:`runner_assembly.runner.netns`): the network, but no loopback service of the host. A
pod's backend keeps the pod's user (non-root) and runs in a network namespace with only a
loopback, its way out its runner's egress proxy (:mod:`runner_assembly.runner.egress`).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import runner_assembly
from ledger.states import FailureKind
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.contract.jobfile import JobFile
from runner_assembly.runner.backends import SYSTEM_DIRS, argv, install_roots
from runner_assembly.runner.launch import isolated_python
from runner_assembly.runner.layout import Layout
from runner_assembly.runner.network import Network, NetworkUnavailable, find_pasta

BWRAP = "bwrap"
OFF = "off"
MODES = (BWRAP, OFF)
"""``SVC_LOCAL_SANDBOX`` and ``SVC_POD_SANDBOX``: ``bwrap`` (the default) or ``off``
(backends run unsandboxed)."""


def mode_error(setting: str, value: str) -> str | None:
    """Why ``value`` is no sandbox mode for ``setting``, or None when it is one."""
    return None if value in MODES else f"{setting} is {' or '.join(MODES)}, not {value!r}"

ETC_ENTRIES = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group",
               "nsswitch.conf", "host.conf", "hosts", "resolv.conf", "gai.conf", "services",
               "protocols", "ssl", "ca-certificates", "localtime", "mime.types", "os-release")
"""The part of ``/etc`` a program needs to run, resolve names and check TLS certificates."""
PROJECT_PACKAGES = ("api", "cli", "ledger", "manifests", "projections", "runner_assembly")
PROBE_TIMEOUT_S = 10
ENV = "/usr/bin/env"
BACKEND_UID = 1000
BACKEND_GID = 1000
"""Who the backend is inside its user namespace: not root (the runner's user outside)."""
LAUNCHER_ROOT = str(Path(runner_assembly.__file__).resolve().parents[1])
"""Where the network launcher's package lives (it imports nothing else)."""
_NETWORKS: dict[tuple[str, str], bool] = {}
"""``(bwrap, pasta)`` pairs this process has seen connect a sandbox."""


class SandboxUnavailable(Exception):
    """bwrap is missing or cannot create a sandbox on this machine."""


@dataclass(frozen=True)
class Mounts:
    """What the sandbox shows besides the system: host paths, kept at their own names."""

    read_write: tuple[Path, ...]
    read_only: tuple[Path, ...] = ()
    read_only_over: tuple[Path, ...] = ()
    """Read-only views laid over parts of a read-write path (volume tool credentials)."""
    hidden: tuple[Path, ...] = ()
    """Paths inside a read-write path the backend must not see: an empty tmpfs over each."""


def find_bwrap() -> str:
    """The absolute path of a working ``bwrap``; :class:`SandboxUnavailable` otherwise."""
    found = shutil.which(BWRAP)
    if found is None:
        raise SandboxUnavailable(
            "bwrap (Debian's bubblewrap) is missing: install it (`make setup` does, as root) "
            "or set SVC_LOCAL_SANDBOX=off to run local backends unsandboxed")
    probe = [found, *_system_args(), "--unshare-pid", "--proc", "/proc", "--dev", "/dev",
             "--die-with-parent", "--", "/bin/true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SandboxUnavailable(f"{found} cannot run: {type(error).__name__}") from None
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise SandboxUnavailable(f"{found} cannot create a sandbox here: {reason} "
                                 "(set SVC_LOCAL_SANDBOX=off to run backends unsandboxed)")
    return found


def find_network(bwrap: str, loopback_ports: tuple[int, ...]) -> Network:
    """The backend's network: pasta, checked once per process by connecting a sandbox;
    :class:`SandboxUnavailable` naming pasta's package and the setting otherwise."""
    try:
        pasta = find_pasta()
    except NetworkUnavailable as error:
        raise SandboxUnavailable(str(error)) from None
    network = Network(pasta, loopback_ports)
    if _NETWORKS.get((bwrap, pasta)):
        return network
    probe = [bwrap, *_system_args(), "--unshare-user", "--unshare-pid", "--proc", "/proc",
             "--dev", "/dev", "--die-with-parent", "--", "/bin/true"]
    try:
        done = subprocess.run(launcher(Network(pasta), probe), capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S * 3, stdin=subprocess.DEVNULL,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SandboxUnavailable(f"{pasta} cannot run: {type(error).__name__}") from None
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if "syslog" not in line]
        raise SandboxUnavailable(
            f"{pasta} (Debian's passt) cannot connect a sandbox's network here: "
            f"{(said or [f'exit {done.returncode}'])[-1]} (set SVC_LOCAL_SANDBOX=off to run "
            "local backends unsandboxed)")
    _NETWORKS[bwrap, pasta] = True
    return network


def launcher(network: Network, bwrap_command: Sequence[str]) -> list[str]:
    """``bwrap_command`` as run in a network namespace of its own connected by pasta:
    :mod:`runner_assembly.runner.netns`'s launcher in front of it."""
    return [*isolated_python([LAUNCHER_ROOT], "netns"), *network.args(), "--",
            *bwrap_command]


def python_paths() -> list[Path]:
    """What a Python backend needs: the interpreter's prefixes and the project's packages."""
    paths = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                          sys.base_exec_prefix)}
    paths.add(Path(sys.executable).resolve().parent)
    venv = Path(sys.executable).absolute().parent.parent  # sys.prefix without ``site`` (-S)
    if (venv / "pyvenv.cfg").is_file():
        paths.add(venv.resolve())
    for name in PROJECT_PACKAGES:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            paths.add(Path(location).resolve())
    kept: list[Path] = []
    for path in sorted(paths):  # a parent sorts before its children
        if not _within(path, [Path("/usr"), *kept]):
            kept.append(path)
    return kept


def job_mounts(job: JobFile, layout: Layout, volume_dir: Path | None) -> Mounts:
    """The mounts of one local job: what the backend of ``job`` may see."""
    writable = [layout.home, layout.workspace_root]
    if volume_dir is not None:
        writable.append(volume_dir)
    tools = [layout.home_path(str(use.mount_path)) for use in job.plan.secrets
             if use.role == "tool" and use.projection == "volume"]
    return Mounts(read_write=tuple(writable), read_only=tuple(readable_paths(job)),
                  read_only_over=tuple(tools))


def pod_mounts(job: JobFile, layout: Layout, scratch: Path) -> Mounts:
    """The mounts of a pod's backend: its home (with the session volume mounted in it) and
    workspaces, the volume tool credentials at their mount paths; the runner's ``scratch``
    hidden, and the per-job Secret's mount (the runner token) absent."""
    tools = [Path(str(use.mount_path)) for use in job.plan.secrets
             if use.role == "tool" and use.projection == "volume"]
    return Mounts(read_write=(layout.home, layout.workspace_root),
                  read_only=tuple(readable_paths(job)), read_only_over=tuple(tools),
                  hidden=(scratch,))


def readable_paths(job: JobFile) -> list[Path]:
    """What any backend reads: Python, the files its command names (with their install
    roots: :func:`~runner_assembly.runner.backends.install_roots`), the resource bin."""
    readable = python_paths()
    readable += [path for path in install_roots(argv(job))
                 if not _within(path.resolve(), [Path("/usr"), *readable])]
    bin_path = job.resource_bin_path
    if bin_path:
        readable.append(Path(bin_path))
    return readable + [Path(path) for path in job.sandbox_read_only]


def check_visible(command: Sequence[str], mounts: Mounts, path: str) -> None:
    """``infra-failed`` before the backend starts when its program is not visible inside the
    sandbox with ``mounts``: not found (by its absolute name, else on the backend's ``path``)
    or found only outside every path the sandbox shows. A workspace-relative program is
    :func:`~runner_assembly.runner.launch.check_backend_launch`'s."""
    program = command[0] if command else ""
    if "/" in program and not program.startswith("/"):
        return
    roots = [Path(name) for name in SYSTEM_DIRS]
    roots += [*mounts.read_only, *mounts.read_write, *mounts.read_only_over]
    candidates = [Path(program)] if program.startswith("/") else [
        Path(folder) / program for folder in path.split(":") if folder.startswith("/")]
    found = [candidate for candidate in candidates if candidate.is_file()]
    if any(_shown(candidate, roots) for candidate in found):
        return
    reason = (f"{found[0]} lies outside every path the sandbox shows" if found
              else "it is not found" if program.startswith("/")
              else "it is not found on the backend's PATH")
    raise AssemblyFailure(
        FailureKind.INFRA_FAILED,
        f"the backend program {program} is not visible inside the sandbox: {reason}; name it "
        "by the absolute path of its install, or add its directory to SVC_SANDBOX_READ_ONLY",
        details={"program": program, "setting": "SVC_SANDBOX_READ_ONLY"})


def _shown(path: Path, roots: Sequence[Path]) -> bool:
    """Whether the sandbox shows ``path`` (by its name, or its directory's real name) and
    what it resolves to."""
    shown = [*roots, *(root.resolve() for root in roots)]
    named = _within(path, shown) or _within(path.parent.resolve() / path.name, shown)
    return named and _within(path.resolve(), shown)


def wrap(bwrap: str, command: Sequence[str], mounts: Mounts, cwd: Path, *,
         network: Network | None = None, own_user: bool = False,
         egress: Path | None = None) -> list[str]:
    """``command`` as run under ``bwrap`` with ``mounts``, starting in ``cwd``; with
    ``own_user``, as :data:`BACKEND_UID` in a user namespace of its own; with ``network``,
    in the network namespace the launcher connects with pasta; with ``egress`` (a pod), in
    a network namespace with only a loopback, its one way out the runner's egress proxy on
    that Unix socket (:func:`egress_command`); with neither, in the runner's network."""
    user = ["--unshare-user", "--uid", str(BACKEND_UID), "--gid", str(BACKEND_GID)]
    args = [bwrap, "--die-with-parent", "--new-session", *(user if own_user else []),
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            *(["--unshare-net"] if egress else []),
            "--cap-drop", "ALL", *_system_args(), "--tmpfs", "/tmp", "--proc", "/proc",
            "--dev", "/dev"]
    args += _binds("--ro-bind", mounts.read_only)
    args += _binds("--bind", mounts.read_write)
    args += _binds("--ro-bind", mounts.read_only_over)
    for path in mounts.hidden:
        args += ["--tmpfs", str(path)]
    relay = egress_command(egress) if egress else []
    if egress:  # after the hidden paths: the socket may lie in the runner's scratch
        args += ["--bind", str(egress), str(egress)]
    # bwrap sets PWD; ``env -u`` takes it away again: the environment is exactly the plan's
    # (and, behind the egress relay, the proxy variables).
    wrapped = [*args, "--chdir", str(cwd), "--", *relay, ENV, "-u", "PWD", *command]
    return launcher(network, wrapped) if network else wrapped


def egress_command(socket_path: Path) -> list[str]:
    """The sandbox's egress relay (:mod:`runner_assembly.runner.egress_relay`) in front of
    a backend command: ``HTTPS_PROXY`` and its kin lead to ``socket_path``."""
    return [*isolated_python([LAUNCHER_ROOT], "egress_relay"), "--socket", str(socket_path),
            "--"]


def _within(path: Path, roots: Iterable[Path]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def _binds(option: str, paths: Iterable[Path]) -> list[str]:
    args: list[str] = []
    for path in paths:
        if path.exists():
            args += [option, str(path), str(path)]
    return args


def _system_args() -> list[str]:
    """Read-only system directories (merged-/usr links kept as links) and minimal ``/etc``."""
    args: list[str] = []
    for name in SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", str(path.readlink()), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    for entry in ETC_ENTRIES:
        path = Path("/etc") / entry
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    return args
