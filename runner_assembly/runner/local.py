"""The runner inside a local runner job (a child process of the local driver).

    python -m runner_assembly.runner.local <job-dir> --secret-root <dir> [--bwrap <path>]

Everything it tells the manager goes through the runner protocol
(:mod:`runner_assembly.runner.manager_client`, base URL ``SVC_RUNNER_API_URL``, the job's
token in ``runner.token``): it first claims the job's start, sending its startup event (the
work-ready capability summary, :mod:`runner_assembly.runner.startup`), and exits at once when
another runner has it; then it heartbeats every ``SVC_RUNNER_HEARTBEAT_S``, runs the runner's
assembly steps (:mod:`runner_assembly.runner.assemble`), sends the bounded assembly event,
runs the backend command in the workspace with the prompt on standard input and an explicit
environment, sends the thread, the volume summary and its exit (with the backend's start and
end times). Output and runner events are written to scratch files of its own
(``stdout.log``, ``trace.jsonl``) that the shipper sends in numbered batches. The session
volume (a directory) is linked at ``${BACKEND_HOME}/<rollout_subdir>``. Secret values are
copied, never printed: every line the job sends is masked by value first
(:mod:`runner_assembly.runner.masking`).
The secret root comes as an argument, never in ``spec.json``; with ``--bwrap`` the backend
runs in the job's sandbox (:mod:`runner_assembly.runner.sandbox`).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from ledger.states import FailureKind, JobState, job_state_of_failure
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.names import CHANNEL_FILES, JOB_SECRET_DIR, TOKEN_FILE
from runner_assembly.runner.assemble import Assembler
from runner_assembly.runner.backend_run import run_relayed
from runner_assembly.runner.crash import crash_at
from runner_assembly.runner.jobfiles import write_private
from runner_assembly.runner.launch import check_backend_launch, spawn_failure
from runner_assembly.runner.layout import Layout, local_layout
from runner_assembly.runner.manager_client import ManagerClient, ManagerRefused
from runner_assembly.runner.masking import Masker
from runner_assembly.runner.projection import SecretSource
from runner_assembly.runner.sandbox import job_mounts, wrap
from runner_assembly.runner.session_volume import link_volume, summarize
from runner_assembly.runner.shipping import Heartbeats, Shipper
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
    """This moment in ISO 8601 UTC: how the exit report times the backend."""
    return datetime.now(UTC).isoformat()


def run(folder: Path, secret_root: Path, client: ManagerClient,
        bwrap: str | None = None) -> dict[str, object]:
    """Assemble the job in ``folder``, run its backend (under ``bwrap`` when given); return
    the exit report."""
    spec = json.loads((folder / "spec.json").read_text())
    plan = spec["plan"]
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
        client.assembly(MASKER.mask_json(assembler.bounded_event()))
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
        code, finished = run_relayed(command, layout.workspace, launch.env, folder, MASKER)
    except OSError as error:
        return _spawn_failed(folder, spawn_failure(error, spec["backend_command"],
                                                   layout.workspace))
    report = {**_outcome(layout, code), "startedAt": started, "finishedAt": finished}
    thread_id = _thread(layout, spec.get("thread_id"))
    trace(folder, "backend-exit", exitCode=code, threadId=thread_id, state=report["state"])
    if thread_id:
        client.thread(thread_id, "resume" if spec.get("thread_id") else "start")
    if spec.get("volume_dir"):
        client.storage(spec["session_id"], summarize(Path(spec["volume_dir"]), volume))
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runner_assembly.runner.local")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--secret-root", type=Path, required=True)
    parser.add_argument("--bwrap", default=None)
    return parser


PARSER = _parser()
"""The runner's command line, built at import: a runner forked from the forkserver has it."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the runner process (``argv``: its arguments, else the command line's)."""
    args = PARSER.parse_args(argv)
    folder: Path = args.folder
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(143))
    spec = json.loads((folder / "spec.json").read_text())
    token = (folder / TOKEN_FILE).read_text().strip()
    MASKER.add(token)
    client = ManagerClient(os.environ["SVC_RUNNER_API_URL"], spec["runner_job_id"], token)
    startup = startup_event(spec["plan"])
    faults = frozenset(spec.get("faults") or ())  # test-only crash points (SVC_FAULTS)
    crash_at(faults, "runner-crash-before-claim")
    try:
        if not client.claim(secrets.token_hex(8), startup):
            print("another runner claimed this job's start: exiting without starting it",
                  flush=True)
            return 0
        write_private(folder / "pid", str(os.getpid()))  # the driver follows the winner
        trace(folder, "runner-started", capability=startup)
        crash_at(faults, "runner-crash-after-claim")
        return _run_claimed(folder, args.secret_root, client, args.bwrap, faults)
    except ManagerRefused as refused:  # e.g. the job was ended under us (cancel, lease)
        print(str(refused), flush=True)
        return 1


def _run_claimed(folder: Path, secret_root: Path, client: ManagerClient,
                 bwrap: str | None, faults: frozenset[str] = frozenset()) -> int:
    """Run the claimed job with heartbeats and the line shipper; report its exit."""
    beats = Heartbeats(client, float(os.environ.get("SVC_RUNNER_HEARTBEAT_S") or 10))

    def sent(channel: str) -> None:
        if channel == "output":
            crash_at(faults, "runner-crash-mid-lines")

    shipper = Shipper(client, {channel: folder / name for channel, name in CHANNEL_FILES.items()},
                      sent)
    try:
        report = MASKER.mask_json(run(folder, secret_root, client, bwrap))
    finally:
        beats.stop()
    shipper.finish()
    crash_at(faults, "runner-crash-before-exit")
    client.exit({key: value for key, value in report.items()
                 if key in ("state", "exitCode", "failureKind", "failureMessage", "startedAt",
                            "finishedAt")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
