"""The local runner's sandbox: the backend runs under bubblewrap and sees only its own job.

Inside the sandbox the backend finds read-only system directories (``/usr``, ``/bin``,
``/lib*``, a few files of ``/etc``), the Python it may need (the interpreter's prefixes and
the project's packages, read-only), its home with the backend home and projected secrets,
its workspaces and its session volume (read-write), volume tool credentials (read-only), a
private ``/tmp``, ``/dev`` and ``/proc`` (its own pid namespace). Everything else of the
machine -- the secret store, the data directory, other jobs, the server's processes -- is
absent. Paths keep their host names, so the plan's environment stays valid unchanged.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from runner_assembly.contract.jobfile import JobFile
from runner_assembly.runner.backends import argv, install_roots
from runner_assembly.runner.layout import Layout

BWRAP = "bwrap"
OFF = "off"
MODES = (BWRAP, OFF)
"""``SVC_LOCAL_SANDBOX`` and ``SVC_POD_SANDBOX``: ``bwrap`` (the default) or ``off``
(backends run unsandboxed)."""


def mode_error(setting: str, value: str) -> str | None:
    """Why ``value`` is no sandbox mode for ``setting``, or None when it is one."""
    return None if value in MODES else f"{setting} is {' or '.join(MODES)}, not {value!r}"

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_ENTRIES = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group",
               "nsswitch.conf", "host.conf", "hosts", "resolv.conf", "gai.conf", "services",
               "protocols", "ssl", "ca-certificates", "localtime", "mime.types", "os-release")
"""The part of ``/etc`` a program needs to run, resolve names and check TLS certificates."""
PROJECT_PACKAGES = ("api", "cli", "ledger", "manifests", "projections", "runner_assembly")
PROBE_TIMEOUT_S = 10
ENV = "/usr/bin/env"


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
    return readable


def wrap(bwrap: str, command: Sequence[str], mounts: Mounts, cwd: Path) -> list[str]:
    """``command`` as run under ``bwrap`` with ``mounts``, starting in ``cwd``."""
    args = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL",
            *_system_args(), "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
    args += _binds("--ro-bind", mounts.read_only)
    args += _binds("--bind", mounts.read_write)
    args += _binds("--ro-bind", mounts.read_only_over)
    for path in mounts.hidden:
        args += ["--tmpfs", str(path)]
    # bwrap sets PWD; ``env -u`` takes it away again: the environment is exactly the plan's.
    return [*args, "--chdir", str(cwd), "--", ENV, "-u", "PWD", *command]


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
