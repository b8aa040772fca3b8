"""The runner inside a local runner job (a child process of the local driver).

    python -m runner_assembly.runner.local <job-dir>

Runs the runner's assembly steps (:mod:`runner_assembly.runner.assemble`), writes the bounded
assembly event to ``assembly.json``, runs the backend command in the workspace with the
prompt on standard input and an explicit environment, and reports the terminal status in
``status.json``. The session volume (a directory) is linked at
``${BACKEND_HOME}/<rollout_subdir>``; after the backend the runner writes the volume summary
to ``storage.json``. Runner events go to ``trace.jsonl``. Secret values are copied, never
printed: every line the job writes out is masked by value first
(:mod:`runner_assembly.runner.masking`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger.task import BLOCKED, BLOCKER_KINDS, CANCELLED, COMPLETED, FAILED
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.names import (
    ASSEMBLY_FILE,
    CHANNEL_FILES,
    JOB_SECRET_DIR,
    STORAGE_FILE,
)
from runner_assembly.runner.assemble import Assembler
from runner_assembly.runner.jobfiles import write_json_atomically
from runner_assembly.runner.layout import Layout, local_layout
from runner_assembly.runner.masking import Masker, Relays
from runner_assembly.runner.projection import SecretSource
from runner_assembly.runner.session_volume import link_volume, summarize

BLOCKER_FILE = ".svc-blocker"
"""A backend names a SPEC 7 blocker kind in this file (e.g. a missing thread rollout)."""
THREAD_FILE = ".svc-thread"
"""A backend that started a new thread writes its threadId here."""
MASKER = Masker()
"""Every secret value this job projected; each line leaving the job is masked with it."""


def trace(folder: Path, kind: str, **fields: Any) -> None:
    """Append one runner event to the job's trace channel (names and counts, no values)."""
    entry = {"at": datetime.now(UTC).isoformat(), "kind": kind, **fields}
    with (folder / CHANNEL_FILES["trace"]).open("a") as handle:
        handle.write(MASKER.mask_text(json.dumps(entry, sort_keys=True)) + "\n")


def run(folder: Path) -> dict[str, Any]:
    """Assemble the job in ``folder``, run its backend; return the status report."""
    spec = json.loads((folder / "spec.json").read_text())
    plan = spec["plan"]
    volume = plan["sessionVolume"] or {}
    layout = local_layout(folder, plan["workspaceKey"], volume.get("rolloutSubdir", "sessions"))
    if spec.get("volume_dir"):
        link_volume(layout, Path(spec["volume_dir"]))
    assembler = Assembler(spec, layout, SecretSource(Path(spec["secret_root"]), MASKER),
                          folder / JOB_SECRET_DIR)
    try:
        launch = assembler.run()
    except AssemblyFailure as failure:
        trace(folder, "assembly-failed", failureKind=failure.kind,
              steps=assembler.event["steps"])
        return {"state": BLOCKED if failure.kind in BLOCKER_KINDS else FAILED,
                "failureKind": failure.kind, "failureMessage": failure.message}
    finally:
        write_json_atomically(folder / ASSEMBLY_FILE, assembler.bounded_event())
    trace(folder, "assembled", steps=assembler.event["steps"])
    (folder / "prompt.txt").write_text(launch.stdin)
    thread = plan.get("thread") or {}
    trace(folder, "backend-start", thread=thread.get("mode", "start"),
          threadId=thread.get("threadId"))
    try:
        with (folder / "prompt.txt").open("rb") as stdin, \
                (folder / CHANNEL_FILES["output"]).open("wb") as stdout, \
                (folder / "stderr.log").open("wb") as stderr, \
                subprocess.Popen(spec["backend_command"], cwd=layout.workspace, stdin=stdin,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=launch.env) as backend:
            assert backend.stdout is not None and backend.stderr is not None
            relays = Relays([(backend.stdout, stdout), (backend.stderr, stderr)], MASKER)
            code = backend.wait()
            relays.join()
    except OSError as error:
        return {"state": FAILED, "failureKind": "infra-failed",
                "failureMessage": f"backend command could not start: {error.strerror}"}
    report = _outcome(layout, code)
    report["threadId"] = _thread(layout, spec.get("thread_id"))
    trace(folder, "backend-exit", exitCode=code, threadId=report["threadId"],
          state=report["state"])
    if spec.get("volume_dir"):
        write_json_atomically(folder / STORAGE_FILE, summarize(Path(spec["volume_dir"]), volume))
    return report


def _outcome(layout: Layout, code: int) -> dict[str, Any]:
    blocker = layout.backend_home / BLOCKER_FILE
    if blocker.is_file():
        return {"state": BLOCKED, "exitCode": code,
                "failureKind": blocker.read_text().strip()[:64] or "infra-failed",
                "failureMessage": "the backend reported a blocker"}
    if code == 0:
        return {"state": COMPLETED, "exitCode": 0}
    return {"state": FAILED, "exitCode": code, "failureMessage": f"backend exited with {code}"}


def _thread(layout: Layout, resumed: str | None) -> str | None:
    """The thread the backend ran: the resumed one, or the one it reports having started."""
    if resumed:
        return resumed
    started = layout.backend_home / THREAD_FILE
    return started.read_text().strip()[:128] or None if started.is_file() else None


def main() -> int:
    """Entry point of the child process."""
    folder = Path(sys.argv[1])

    def on_term(signum: int, frame: object) -> None:
        write_json_atomically(folder / "status.json", {"state": CANCELLED})
        os._exit(143)

    signal.signal(signal.SIGTERM, on_term)
    report = MASKER.mask_json(run(folder))
    if not (folder / "status.json").exists():
        write_json_atomically(folder / "status.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
