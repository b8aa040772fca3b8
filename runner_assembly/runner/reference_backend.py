"""The reference backend: a small, honest stand-in for a coding agent, for tests and the
quick start. Not an agent: it reads the prompt on standard input and writes output.

Threads are real, and reported by the contract of docs/backends.md (the ``reference`` kind):
a turn without ``SVC_THREAD_ID`` starts a new thread, writes its rollout ``<threadId>.jsonl``
under the rollout directory (``SVC_SESSION_PVC_MOUNT_PATH``, else
``${BACKEND_HOME}/${SVC_BACKEND_ROLLOUT_SUBDIR}``) and reports the id in
``${BACKEND_HOME}/.svc-thread``. A turn with ``SVC_THREAD_ID`` resumes that thread from its
rollout and confirms it there; a missing rollout is the ``session-store-evicted`` blocker
(``${BACKEND_HOME}/.svc-blocker``), never a new thread.

Prompt lines it obeys (anything else is echoed):

    exit: N          exit with status N
    sleep: S         sleep S seconds first
    blocker: KIND    report an assembly blocker (e.g. required-skill-unavailable)
    lines: N         print N numbered lines (for output paging)
    pace: S          wait S seconds after each numbered line
    read: P1 P2      try to read each path (file or folder; a glob: each match) and
                     print whether it could, never what it read (what a sandbox hides)
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

DIRECTIVES = ("exit", "sleep", "blocker", "lines", "pace", "read")


def rollout_dir(home: Path) -> Path:
    """Where thread rollouts live: the session volume when mounted."""
    mounted = os.environ.get("SVC_SESSION_PVC_MOUNT_PATH")
    if mounted:
        return Path(mounted)
    return home / os.environ.get("SVC_BACKEND_ROLLOUT_SUBDIR", "sessions")


def open_thread(home: Path, prompt: str) -> str | None:
    """Start or resume the turn's thread and append the turn; None when a resume fails."""
    rollouts = rollout_dir(home)
    resume = os.environ.get("SVC_THREAD_ID")
    turn = {"promptSha256": hashlib.sha256(prompt.encode()).hexdigest(),
            "promptBytes": len(prompt.encode()), "at": time.time()}
    if resume:
        rollout = rollouts / f"{resume}.jsonl"
        if not rollout.is_file():
            print(f"thread resume failed: no rollout for {resume}")
            (home / ".svc-blocker").write_text("session-store-evicted")
            return None
        turns = len(rollout.read_text().splitlines())
        print(f"thread resumed: {resume} (turn {turns + 1})")
        thread = resume
        (home / ".svc-thread").write_text(thread)  # confirms the resume (docs/backends.md)
    else:
        thread = f"thr_{os.urandom(8).hex()}"  # what secrets.token_hex does, without its imports
        rollouts.mkdir(parents=True, exist_ok=True)
        rollout = rollouts / f"{thread}.jsonl"
        print(f"thread started: {thread}")
        (home / ".svc-thread").write_text(thread)
    with rollout.open("a") as handle:
        handle.write(json.dumps(turn) + "\n")
    return thread


def try_read(path: Path) -> str:
    """Whether ``path`` can be read (a folder: listed), as a line naming no content."""
    try:
        if path.is_dir():
            os.listdir(path)
        else:
            path.read_bytes()
    except OSError as error:
        return f"read failed ({type(error).__name__}): {path}"
    return f"read succeeded: {path}"


def main() -> int:
    """Read the prompt, open the thread, act on the directives, print what it did."""
    prompt = sys.stdin.read()
    directives = {}
    for line in prompt.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in DIRECTIVES:
            directives[key.strip()] = value.strip()
    home = Path(os.environ.get("BACKEND_HOME", "."))
    print(f"reference backend: profile={os.environ.get('SVC_BACKEND_PROFILE', '-')} "
          f"prompt={len(prompt.encode())} bytes home-files={len(list(home.iterdir()))}")
    if open_thread(home, prompt) is None:
        return 4
    for line in prompt.splitlines():
        print(f"> {line}")
    sys.stdout.flush()
    pace = float(directives.get("pace", "0"))
    for number in range(int(directives.get("lines", "0"))):
        print(f"line {number + 1}", flush=bool(pace))
        time.sleep(pace)
    for pattern in directives.get("read", "").split():
        import glob  # only this directive globs: not imported at every start

        for path in glob.glob(pattern) or [pattern]:
            print(try_read(Path(path)))
    sys.stdout.flush()
    if "sleep" in directives:
        time.sleep(float(directives["sleep"]))
    if "blocker" in directives:
        (home / ".svc-blocker").write_text(directives["blocker"])
        return 3
    return int(directives.get("exit", "0"))


if __name__ == "__main__":
    sys.exit(main())
