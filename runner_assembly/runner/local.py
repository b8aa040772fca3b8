"""The runner inside a local runner job (a child process of the local driver).

    python -m runner_assembly.runner.local <job-dir> --secret-root <dir> [--bwrap <path>]

Runs the runner's assembly steps (:mod:`runner_assembly.runner.assemble`), writes the bounded
assembly event to ``assembly.json``, runs the backend command in the workspace with the
prompt on standard input and an explicit environment, and reports the terminal status in
``status.json``. Before anything else it writes its startup event (the work-ready
capability summary, :mod:`runner_assembly.runner.startup`) to ``startup.json``. The session
volume (a directory) is linked at ``${BACKEND_HOME}/<rollout_subdir>``; after the backend
the runner writes the volume summary to ``storage.json``. Runner events go to
``trace.jsonl``. Secret values are copied, never printed: every line the job writes out is
masked by value first (:mod:`runner_assembly.runner.masking`).
The secret root comes as an argument, never in ``spec.json``; with ``--bwrap`` the backend
runs in the job's sandbox (:mod:`runner_assembly.runner.sandbox`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from ledger.states import FailureKind, JobState, job_state_of_failure
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.names import (
    ASSEMBLY_FILE,
    CHANNEL_FILES,
    JOB_SECRET_DIR,
    STARTUP_FILE,
    STORAGE_FILE,
)
from runner_assembly.runner.assemble import Assembler
from runner_assembly.runner.jobfiles import write_json_atomically
from runner_assembly.runner.launch import check_backend_launch, spawn_failure
from runner_assembly.runner.layout import Layout, local_layout
from runner_assembly.runner.masking import Masker, Relays
from runner_assembly.runner.projection import SecretSource
from runner_assembly.runner.sandbox import job_mounts, wrap
from runner_assembly.runner.session_volume import link_volume, summarize
from runner_assembly.runner.startup import startup_event

BLOCKER_FILE = ".svc-blocker"
"""A backend names a SPEC 7 blocker kind in this file (e.g. a missing thread rollout)."""
THREAD_FILE = ".svc-thread"
"""A backend that started a new thread writes its threadId here."""
MASKER = Masker()
"""Every secret value this job projected; each line leaving the job is masked with it."""


def trace(folder: Path, kind: str, **fields: object) -> None:
    """Append one runner event to the job's trace channel (names and counts, no values)."""
    entry = {"at": datetime.now(UTC).isoformat(), "kind": kind, **fields}
    with (folder / CHANNEL_FILES["trace"]).open("a") as handle:
        handle.write(MASKER.mask_text(json.dumps(entry, sort_keys=True)) + "\n")


def now() -> str:
    """This moment in ISO 8601 UTC: how the status report times the backend."""
    return datetime.now(UTC).isoformat()


def run(folder: Path, secret_root: Path, bwrap: str | None = None) -> dict[str, object]:
    """Assemble the job in ``folder``, run its backend (under ``bwrap`` when given); return
    the status report."""
    spec = json.loads((folder / "spec.json").read_text())
    plan = spec["plan"]
    startup = startup_event(plan)
    write_json_atomically(folder / STARTUP_FILE, startup)
    trace(folder, "runner-started", capability=startup)
    volume = plan["sessionVolume"] or {}
    layout = local_layout(folder, plan["workspaceKey"], volume.get("rolloutSubdir", "sessions"),
                          spec.get("workspace_root"))
    if spec.get("volume_dir"):
        link_volume(layout, Path(spec["volume_dir"]))
    assembler = Assembler(spec, layout, SecretSource(secret_root, MASKER),
                          folder / JOB_SECRET_DIR)
    runner_started = now()
    try:
        launch = assembler.run()
    except AssemblyFailure as failure:
        trace(folder, "assembly-failed", failureKind=failure.kind,
              steps=assembler.event["steps"])
        return {"state": job_state_of_failure(failure.kind),
                "failureKind": failure.kind, "failureMessage": failure.message,
                "startedAt": runner_started, "finishedAt": now()}
    finally:
        write_json_atomically(folder / ASSEMBLY_FILE, assembler.bounded_event())
    trace(folder, "assembled", steps=assembler.event["steps"])
    (folder / "prompt.txt").write_text(launch.stdin)
    try:
        check_backend_launch(spec["backend_command"], layout.workspace)
    except AssemblyFailure as failure:
        return _spawn_failed(folder, failure)
    thread = plan.get("thread") or {}
    trace(folder, "backend-start", thread=thread.get("mode", "start"),
          threadId=thread.get("threadId"), sandbox="bwrap" if bwrap else "off")
    command = spec["backend_command"] if bwrap is None else wrap(
        bwrap, spec["backend_command"],
        job_mounts(spec, layout, Path(spec["volume_dir"]) if spec.get("volume_dir") else None),
        layout.workspace)
    started = now()
    try:
        with (folder / "prompt.txt").open("rb") as stdin, \
                (folder / CHANNEL_FILES["output"]).open("wb") as stdout, \
                (folder / "stderr.log").open("wb") as stderr, \
                subprocess.Popen(command, cwd=layout.workspace, stdin=stdin,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=launch.env) as backend:
            assert backend.stdout is not None and backend.stderr is not None
            relays = Relays([(backend.stdout, stdout), (backend.stderr, stderr)], MASKER)
            code = backend.wait()
            finished = now()
            relays.join()
    except OSError as error:
        return _spawn_failed(folder, spawn_failure(error, spec["backend_command"],
                                                   layout.workspace))
    report = {**_outcome(layout, code), "startedAt": started, "finishedAt": finished}
    report["threadId"] = _thread(layout, spec.get("thread_id"))
    trace(folder, "backend-exit", exitCode=code, threadId=report["threadId"],
          state=report["state"])
    if spec.get("volume_dir"):
        write_json_atomically(folder / STORAGE_FILE, summarize(Path(spec["volume_dir"]), volume))
    return report


def _spawn_failed(folder: Path, failure: AssemblyFailure) -> dict[str, object]:
    """The backend could not start: traced, and reported with its failure kind."""
    trace(folder, "backend-spawn-failed", failureKind=failure.kind, details=failure.details)
    return {"state": job_state_of_failure(failure.kind), "failureKind": failure.kind,
            "failureMessage": failure.message}


def _outcome(layout: Layout, code: int) -> dict[str, object]:
    blocker = layout.backend_home / BLOCKER_FILE
    if blocker.is_file():
        return {"state": JobState.BLOCKED, "exitCode": code,
                "failureKind": blocker.read_text().strip()[:64] or FailureKind.INFRA_FAILED,
                "failureMessage": "the backend reported a blocker"}
    if code == 0:
        return {"state": JobState.COMPLETED, "exitCode": 0}
    return {"state": JobState.FAILED, "exitCode": code,
            "failureMessage": f"backend exited with {code}"}


def _thread(layout: Layout, resumed: str | None) -> str | None:
    """The thread the backend ran: the resumed one, or the one it reports having started."""
    if resumed:
        return resumed
    started = layout.backend_home / THREAD_FILE
    return started.read_text().strip()[:128] or None if started.is_file() else None


def main() -> int:
    """Entry point of the child process."""
    parser = argparse.ArgumentParser(prog="runner_assembly.runner.local")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--secret-root", type=Path, required=True)
    parser.add_argument("--bwrap", default=None)
    args = parser.parse_args()
    folder: Path = args.folder

    def on_term(signum: int, frame: object) -> None:
        write_json_atomically(folder / "status.json", {"state": JobState.CANCELLED})
        os._exit(143)

    signal.signal(signal.SIGTERM, on_term)
    report = MASKER.mask_json(run(folder, args.secret_root, args.bwrap))
    if not (folder / "status.json").exists():
        write_json_atomically(folder / "status.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
