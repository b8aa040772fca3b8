"""The backend kinds of docs/backends.md, as the runner runs them (DESIGN 14).

``command`` and ``reference`` run the job's command as it is; ``codex`` runs OpenAI's Codex
CLI with the arguments the service supplies (``exec --json``, ``exec resume <threadId>`` for a
resume, Codex's own sandbox off: the service's sandbox is the boundary) and ``CODEX_HOME`` at
the backend home. After the backend, what it reported comes from its masked output: a
``{"svc": "thread", "id": …}`` or ``{"svc": "blocker", "kind": …}`` line for the first two
kinds, Codex's ``thread.started`` event for ``codex``; the token usage of the last
``{"svc": "usage", …}`` line, or of Codex's last ``turn.completed`` event.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from runner_assembly.assembly.failures import MINIMAL_PATH
from runner_assembly.contract.jobfile import JobFile
from runner_assembly.contract.messages import MAX_TOKENS

CODEX = "codex"
CODEX_ARGS = ("exec", "--json", "--skip-git-repo-check",
              "--dangerously-bypass-approvals-and-sandbox")
"""Codex's non-interactive run with JSON events, in any directory, without its own sandbox
(which cannot run inside bubblewrap); the prompt comes on standard input (``-``)."""
MAX_REPORT_LINE = 64 * 1024
"""Longer output lines are never reports (and are not parsed)."""
MAX_THREAD_ID = 128
FAILURE_KIND = re.compile(r"[a-z0-9-]+")
"""The form of a reported blocker kind; any other report is an unnamed blocker
(``infra-failed``)."""
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""The system directories every sandbox shows read-only (an install in them is visible)."""
USAGE_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens",
                "reasoning_output_tokens")


@dataclass(frozen=True)
class Reported:
    """What the backend reported on its output: the thread it ran, a blocker, its usage."""

    thread_id: str | None = None
    blocker: str | None = None
    usage: dict[str, int] | None = None


def argv(job: JobFile) -> list[str]:
    """The command line of the job's backend: a ``codex`` program with the service's
    arguments (run by ``node`` when it is Codex's JavaScript launcher), else the command."""
    if job.backend_kind != CODEX:
        return list(job.backend_command)
    program = _on_path(job.backend_command[0])
    resume = ["resume", job.thread_id] if job.thread_id else []
    return [*_launcher(program), *CODEX_ARGS, *resume, "-"]


def _on_path(program: str) -> str:
    """A program named alone, as the runner's own ``PATH`` finds it (absolute), else as it
    is: with the kubernetes driver the manager leaves ``codex`` to the runner, whose
    ``PATH`` is its image's (as a local server's is where it runs)."""
    if "/" in program:
        return program
    found = shutil.which(program)
    return str(Path(found).absolute()) if found else program


def backend_env(job: JobFile, env: dict[str, str], backend_home: Path) -> dict[str, str]:
    """The backend's environment: ``env``, with ``CODEX_HOME`` at the backend home for
    ``codex``."""
    if job.backend_kind != CODEX:
        return env
    return {**env, "CODEX_HOME": str(backend_home)}


def _launcher(program: str) -> list[str]:
    """``program``, or ``node`` and the script behind it when it is a Node.js script (an npm
    ``.bin`` link): run so, it needs no ``node`` on the backend's ``PATH``."""
    path = Path(program)
    if not path.is_absolute() or not path.is_file():
        return [program]
    script = path.resolve()
    with script.open("rb") as handle:
        first = handle.readline(256)
    if not (first.startswith(b"#!") and b"node" in first):
        return [program]
    node = shutil.which("node") or shutil.which("node", path=MINIMAL_PATH)
    return [str(Path(node).absolute()), str(script)] if node else [program]


def install_roots(command: Sequence[str]) -> list[Path]:
    """What the sandbox shows read-only for the files ``command`` names by absolute path: the
    file itself and, behind a link, the install root of what it resolves to
    (:func:`install_root`); for a script, also its interpreter's (``#!`` line)."""
    roots: list[Path] = []
    for argument in command:
        path = Path(argument)
        if not (path.is_absolute() and path.is_file()):
            continue
        for target in (path, *_interpreter(path.resolve())):
            root = install_root(target)
            roots += [root] if target.is_relative_to(root) else [target, root]
    kept: list[Path] = []
    for root in sorted(set(roots)):  # a parent sorts before its children
        if not any(root.is_relative_to(other) for other in kept):
            kept.append(root)
    return kept


def install_root(path: Path) -> Path:
    """The install that the file ``path`` resolves to belongs to: the outermost
    ``node_modules`` of an npm install (a package's native binary lies beside it); the
    prefix of a program in its ``bin`` directory when that prefix is an install (a Python
    virtual environment's ``pyvenv.cfg``, or a ``lib`` directory beside ``bin``: ``/opt/x``,
    ``~/.local``); else the resolved file alone."""
    resolved = path.resolve()
    packages = [parent for parent in resolved.parents if parent.name == "node_modules"]
    if packages:
        return packages[-1]
    prefix = resolved.parent.parent
    if resolved.parent.name in ("bin", "sbin") and prefix != prefix.parent and (
            (prefix / "pyvenv.cfg").is_file() or (prefix / "lib").is_dir()) \
            and prefix != Path.home().resolve():
        return prefix
    return resolved


def _interpreter(script: Path) -> list[Path]:
    """The absolute interpreter a script's ``#!`` line names, unless the system has it (none
    for a binary)."""
    try:
        with script.open("rb") as handle:
            first = handle.readline(256)
    except OSError:
        return []
    words = first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
    if not words or not Path(words[0]).is_absolute() or not Path(words[0]).is_file():
        return []
    interpreter = Path(words[0])
    system = any(interpreter.resolve().is_relative_to(root) for root in SYSTEM_DIRS)
    return [] if system else [interpreter]


def resume_refused(job: JobFile, session_dir: Path) -> str | None:
    """Why a Codex resume cannot be tried, or None: Codex's thread ids are UUIDs (it takes
    another text as a thread name and may start a new thread under it), and the thread's
    rollout must lie in the session volume (looked up by name, no link followed)."""
    if job.backend_kind != CODEX or not job.thread_id:
        return None
    if UUID.fullmatch(job.thread_id) is None:
        return f"{job.thread_id} is not a Codex thread id (a UUID)"
    suffix = f"-{job.thread_id}.jsonl"
    for _folder, _dirs, files in os.walk(session_dir):
        if any(name.endswith(suffix) for name in files):
            return None
    return f"no rollout of thread {job.thread_id} in the session volume"


def reported(kind: str, output: Path) -> Reported:
    """What the backend of ``kind`` reported on its ``output`` (the masked output file)."""
    events = _json_lines(output)
    return _codex_report(events) if kind == CODEX else _svc_report(events)


def _svc_report(events: Iterable[dict[str, object]]) -> Reported:
    """The first ``{"svc": "thread"}`` and ``{"svc": "blocker"}`` lines, the last
    ``{"svc": "usage"}`` line's counts."""
    thread = blocker = None
    usage: dict[str, int] | None = None
    for event in events:
        if event.get("svc") == "usage":
            usage = _usage(event) or usage
        elif event.get("svc") == "thread" and thread is None:
            thread = _short(event.get("id"))
        elif event.get("svc") == "blocker" and blocker is None:
            kind = _short(event.get("kind"), 64)
            blocker = kind if kind is not None and FAILURE_KIND.fullmatch(kind) else ""
    return Reported(thread_id=thread, blocker=blocker, usage=usage)


def _codex_report(events: Iterable[dict[str, object]]) -> Reported:
    """Codex's first ``thread.started`` thread and its last ``turn.completed`` usage."""
    thread = None
    usage: dict[str, int] | None = None
    for event in events:
        if event.get("type") == "thread.started" and thread is None:
            thread = _short(event.get("thread_id"))
        elif event.get("type") == "turn.completed":
            usage = _usage(event.get("usage")) or usage
    return Reported(thread_id=thread, usage=usage)


def _usage(counts: object) -> dict[str, int] | None:
    """The token counts of a usage object (Codex's ``turn.completed`` usage, or a
    ``{"svc": "usage"}`` line): whole numbers from 0 to
    :data:`MAX_TOKENS` only (another value, or another key, is left out); None when it has
    none."""
    if not isinstance(counts, dict):
        return None
    kept = {name: value for name in USAGE_FIELDS
            if type(value := counts.get(name)) is int and 0 <= value <= MAX_TOKENS}
    return kept or None


def _short(value: object, limit: int = MAX_THREAD_ID) -> str | None:
    """A non-empty string of at most ``limit`` characters, else None."""
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def _json_lines(output: Path) -> Iterator[dict[str, object]]:
    """The JSON objects among the lines of ``output`` (read line by line)."""
    try:
        handle = output.open("rb")
    except FileNotFoundError:
        return
    with handle:
        while line := handle.readline(MAX_REPORT_LINE + 1):
            if len(line) > MAX_REPORT_LINE:  # skip the rest of a longer line
                while line and not line.endswith(b"\n"):
                    line = handle.readline(MAX_REPORT_LINE + 1)
                continue
            if not line.startswith(b"{"):
                continue
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                yield value
