"""The one life of a runner job, wherever it runs (docs/runner-protocol.md).

Claim the job's start with the startup event (a runner that loses exits without starting
anything), heartbeat, run the assembly steps and send the bounded assembly event, start the
backend with the prompt on its standard input, relay its output masked by value into the
runner's scratch files that the shipper sends in numbered batches, report the thread and
the session volume summary, then the exit. :mod:`runner_assembly.runner.local` and
:mod:`runner_assembly.runner.pod` keep only what differs: where the job's files live and how
the backend is wrapped. Secret values are copied, never printed: every line and report
leaving the job is masked by value first (:data:`MASKER`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import msgspec

from ledger.states import FailureKind, job_state_of_failure
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.names import CHANNEL_FILES, STDERR_FILE
from runner_assembly.contract import jobfile
from runner_assembly.contract.jobfile import JobFile
from runner_assembly.contract.messages import ExitBody, ExitState, Usage
from runner_assembly.runner import backends, beneath
from runner_assembly.runner.assemble import Assembler, Launch
from runner_assembly.runner.backend_run import Relayed, failure_with_errors, run_relayed
from runner_assembly.runner.crash import crash_at
from runner_assembly.runner.launch import check_backend_launch, spawn_failure
from runner_assembly.runner.layout import Layout
from runner_assembly.runner.manager_client import RETRY_FOR_S, ManagerClient
from runner_assembly.runner.masking import Masker
from runner_assembly.runner.session_volume import summarize
from runner_assembly.runner.shipping import Heartbeats, Shipper, Source
from runner_assembly.runner.startup import startup_event

BLOCKER_FILE = ".svc-blocker"
"""A backend names a SPEC 7 blocker kind in this file (e.g. a missing thread rollout)."""
THREAD_FILE = ".svc-thread"
"""A backend writes the thread it ran (started or resumed) here (docs/backends.md)."""
MASKER = Masker()
"""Every secret value this job projected; each line leaving the job is masked with it."""
Wrapper = Callable[[list[str]], tuple[list[str], str]]
"""How a place wraps the backend command: the command it runs and the sandbox's name; may
raise :class:`AssemblyFailure` (no sandbox, no backend)."""


def now() -> datetime:
    """This moment, in UTC: how the exit report times the backend."""
    return datetime.now(UTC)


def read_job(path: Path) -> JobFile:
    """The job file at ``path`` (:class:`~runner_assembly.contract.jobfile.JobFileRefused`
    for a version this runner does not know)."""
    return jobfile.decode(path.read_bytes())


def connect(job: JobFile, token: str) -> ManagerClient:
    """The runner protocol client of ``job`` (base URL ``SVC_RUNNER_API_URL``, through the
    runner listener's socket ``SVC_RUNNER_API_SOCKET`` when the local driver names one); the
    token is masked in everything the job sends."""
    MASKER.add(token)
    return ManagerClient(os.environ["SVC_RUNNER_API_URL"], job.runner_job_id, token,
                         min(RETRY_FOR_S, job.manager_silence_s),
                         listener=os.environ.get("SVC_RUNNER_API_SOCKET") or None)


def failed(kind: str, message: str, started_at: datetime | None = None,
           finished_at: datetime | None = None) -> ExitBody:
    """The exit report of a job that ended with the failure ``kind``."""
    return ExitBody(state=cast(ExitState, str(job_state_of_failure(kind))), failure_kind=kind,
                    failure_message=message, started_at=started_at, finished_at=finished_at)


class Lifecycle:
    """One runner job: its file, its client, its scratch directory and its layout."""

    def __init__(self, job: JobFile, client: ManagerClient, scratch: Path, layout: Layout,
                 volume_root: Path | None) -> None:
        """``scratch``: the runner's own files (channel files, prompt), never the backend's;
        ``volume_root``: the session volume to summarise after the backend (None: none)."""
        self.job = job
        self.client = client
        self.scratch = scratch
        self.layout = layout
        self.volume_root = volume_root
        self.faults = frozenset(job.faults)  # test-only crash points (SVC_FAULTS)
        self.written = threading.Event()
        """Rung when a line reaches a scratch channel file: the shipper's doorbell."""

    def trace(self, kind: str, **fields: object) -> None:
        """Append one runner event to the trace channel (names and counts, no values)."""
        entry = {"at": now().isoformat(), "kind": kind, **fields}
        with (self.scratch / CHANNEL_FILES["trace"]).open("a") as handle:
            handle.write(MASKER.mask_text(json.dumps(entry, sort_keys=True)) + "\n")
        self.written.set()

    def claim(self) -> bool:
        """Claim the job's start with this runner's startup event; False (and a line on
        standard output) when another runner has it: start nothing then."""
        crash_at(self.faults, "runner-crash-before-claim")
        startup = startup_event(self.job.plan)
        if not self.client.claim(os.urandom(8).hex(), startup):
            print("another runner claimed this job's start: exiting without starting it",
                  flush=True)
            return False
        self.trace("runner-started", capability=startup)
        return True

    def heartbeats(self) -> Heartbeats:
        """Lease renewals every ``SVC_RUNNER_HEARTBEAT_S`` (default 10 s), from now on."""
        return Heartbeats(self.client, float(os.environ.get("SVC_RUNNER_HEARTBEAT_S") or 10),
                          self.job.manager_silence_s, _stop_this_runner)

    def shipper(self, sent: Callable[[str], None] | None = None) -> Shipper:
        """The line shipper over the scratch channel files, from now on."""
        files = {Source(channel): self.scratch / name for channel, name in CHANNEL_FILES.items()}
        files[Source("output", "stderr")] = self.scratch / STDERR_FILE
        return Shipper(self.client, files, sent, self.written)

    def assemble(self, assembler: Assembler) -> Launch | ExitBody:
        """Run the assembly steps and send the bounded event: how the backend starts (its
        prompt written to the scratch), or the exit report of a failed assembly."""
        started = now()
        try:
            launch = assembler.run()
        except AssemblyFailure as failure:
            self.trace("assembly-failed", failureKind=failure.kind,
                       steps=assembler.event["steps"])
            return failed(failure.kind, failure.message, started, now())
        finally:
            self.client.assembly(MASKER.mask_json(assembler.bounded_event()))
        self.trace("assembled", steps=assembler.event["steps"])
        (self.scratch / "prompt.txt").write_text(launch.stdin)
        return launch

    def run_backend(self, env: dict[str, str], wrap: Wrapper,
                    started: Callable[[subprocess.Popen[bytes]], object] | None = None,
                    ) -> ExitBody:
        """Start the backend (``wrap``-ped) in the workspace with ``env``, relay its output;
        report its thread and the volume summary; its exit report."""
        job, workspace = self.job, self.layout.workspace
        command = backends.argv(job)
        refused = backends.resume_refused(job, self.layout.session_dir)
        if refused is not None:
            self.trace("backend-resume-refused", threadId=job.thread_id, reason=refused)
            return failed(FailureKind.SESSION_STORE_EVICTED,
                          f"{refused}: the thread cannot be resumed (no replacement thread "
                          "is started)")
        try:
            check_backend_launch(command, workspace)
            wrapped, sandbox = wrap(command)
        except AssemblyFailure as failure:
            return self._spawn_failed(failure)
        thread = job.plan.thread
        self.trace("backend-start", thread=thread.mode, threadId=thread.thread_id,
                   sandbox=sandbox, backendKind=job.backend_kind)
        begun = now()
        try:
            relayed = run_relayed(
                wrapped, workspace, backends.backend_env(job, env, self.layout.backend_home),
                self.scratch, MASKER, self.job.output_max_bytes, started, self.written.set)
        except OSError as error:
            return self._spawn_failed(spawn_failure(error, command, workspace))
        self._trace_dropped(relayed)
        reported = self._reported()
        report = msgspec.structs.replace(
            self._outcome(relayed.code, reported), started_at=begun,
            finished_at=relayed.finished,
            usage=Usage(**reported.usage) if reported.usage is not None else None)
        self._report_after(relayed.code, report, reported)
        return report

    def _trace_dropped(self, relayed: Relayed) -> None:
        """One trace event when the backend printed past the turn's bound: how many lines
        and bytes of its output (and bytes of its errors) were dropped."""
        output, errors = relayed.output, relayed.errors
        if not (output.cut or errors.cut):
            return
        self.trace("output-bounded", maxBytes=output.max_bytes,
                   droppedLines=output.dropped_lines, droppedBytes=output.dropped_bytes,
                   stderrDroppedBytes=errors.dropped_bytes)

    def _spawn_failed(self, failure: AssemblyFailure) -> ExitBody:
        """The backend could not start: traced, and reported with its failure kind."""
        self.trace("backend-spawn-failed", failureKind=failure.kind, details=failure.details)
        return failed(failure.kind, failure.message)

    def report_file(self, name: str, limit: int) -> str | None:
        """The stripped content of the backend's report ``name`` in its home (None when
        there is none): read without following a link (DESIGN 13); a link or a file of
        another kind is traced, naming the file only, and ignored."""
        root, relative = self.layout.anchored(self.layout.backend_home / name)
        try:
            content = beneath.read_report(root, relative, limit)
        except beneath.Refused as refused:
            self.trace("backend-report-refused", file=name, reason=str(refused))
            return None
        return content.strip() if content is not None else None

    def _reported(self) -> backends.Reported:
        """What the backend reported: on its output (docs/backends.md), else (``command``
        and ``reference``) in its report files."""
        on_output = backends.reported(self.job.backend_kind,
                                      self.scratch / CHANNEL_FILES["output"])
        if self.job.backend_kind == backends.CODEX:
            return on_output
        return backends.Reported(
            thread_id=on_output.thread_id or self.report_file(THREAD_FILE, 128) or None,
            blocker=on_output.blocker if on_output.blocker is not None
            else self.report_file(BLOCKER_FILE, 64), usage=on_output.usage)

    def _outcome(self, code: int, reported: backends.Reported) -> ExitBody:
        """The backend's outcome: a blocker it reported, a resume it did not confirm
        (``session-store-evicted``: never a replacement thread), else its exit code."""
        if reported.blocker is not None:
            return ExitBody(state="blocked", exit_code=code,
                            failure_kind=reported.blocker or FailureKind.INFRA_FAILED,
                            failure_message="the backend reported a blocker")
        resumed = self.job.thread_id
        if resumed and reported.thread_id != resumed:
            seen = f"thread {reported.thread_id}" if reported.thread_id else "no thread"
            return msgspec.structs.replace(failed(
                FailureKind.SESSION_STORE_EVICTED,
                f"the backend did not confirm resuming thread {resumed} (it reported {seen}): "
                "no replacement thread is recorded"), exit_code=code)
        if code == 0:
            return ExitBody(state="completed", exit_code=0)
        return ExitBody(state="failed", exit_code=code, failure_message=failure_with_errors(
            f"backend exited with {code}", self.scratch))

    def _report_after(self, code: int, report: ExitBody, reported: backends.Reported) -> None:
        """Trace the backend's exit and usage; send the thread it confirmed (the resumed one
        only when it confirmed it) and the session volume's summary."""
        thread_id = reported.thread_id
        if self.job.thread_id and thread_id != self.job.thread_id:
            thread_id = None
        self.trace("backend-exit", exitCode=code, threadId=thread_id, state=report.state)
        if reported.usage is not None:
            self.trace("backend-usage", usage=reported.usage)
        if thread_id:
            self.client.thread(thread_id, "resume" if self.job.thread_id else "start")
        volume = self.job.plan.session_volume
        if self.volume_root is not None and volume is not None:
            self.client.storage(self.job.session_id, summarize(self.volume_root,
                                                               volume.pvc_name))

    def finish(self, report: ExitBody, shipper: Shipper,
               before_ship: Callable[[ExitBody], None] | None = None) -> ExitBody:
        """Mask the report, ship the rest of the lines, then send the exit; the report as
        sent. ``before_ship`` sees the masked report first."""
        report = masked(report)
        if before_ship is not None:
            before_ship(report)
        shipper.finish()
        crash_at(self.faults, "runner-crash-before-exit")
        self.client.exit(report)
        return report


def _stop_this_runner(why: str) -> None:
    """End this runner as a stop does (``SIGTERM``: its backend ends, its secret files go),
    saying why in its log."""
    print(f"the runner stops its job: {why}", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)


def masked(report: ExitBody) -> ExitBody:
    """The exit report with every secret value this job holds masked out."""
    return msgspec.structs.replace(
        report, failure_kind=MASKER.mask_text(report.failure_kind)
        if report.failure_kind is not None else None,
        failure_message=MASKER.mask_text(report.failure_message)
        if report.failure_message is not None else None)
