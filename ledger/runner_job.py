"""The runner-job stream: what a runner reports through the runner protocol (DESIGN 9).

Its tokens (as hashes), the claim of its start (the first claim wins), the bounded assembly
event, the thread, the exit, and the manager's end of the job. Every runner command carries
its token's sha256; ``decide`` refuses one this job never issued, and every token once the job
has ended or its exit is recorded. A heartbeat is decided here too, but what it decides is kept
in the job's lease row, not appended (:mod:`ledger.leases`); ``evolve`` still folds the
``job-heartbeat`` entries of ledgers written before.
"""

from __future__ import annotations

import msgspec

from ledger import events as ev
from ledger.addressed import Addressed
from ledger.errors import InvalidTransition, Unauthorized

STREAM_TYPE = "runner-job"


class _OnJob(msgspec.Struct, Addressed, frozen=True):
    runner_job_id: str


class IssueJobToken(ev.JobToken, Addressed, frozen=True):
    """Record a new token's hash for the job (before the driver delivers the token)."""


class _FromRunner(_OnJob, frozen=True):
    token_sha256: str


class ClaimJob(_FromRunner, frozen=True):
    """A runner asks to start the job's backend; only the first claimant may."""

    claimant: str
    at: str
    startup: dict[str, object] | None = None


class Heartbeat(_FromRunner, frozen=True):
    """The claimed runner renews its lease (decided, then kept in the lease row)."""

    at: str


class ReportAssembly(_FromRunner, frozen=True):
    """The runner's bounded assembly event (recorded once)."""

    assembly: dict[str, object]


class ReportThread(_FromRunner, frozen=True):
    """The thread the backend started or resumed."""

    thread_id: str
    mode: str


class ReportExit(_FromRunner, frozen=True):
    """The runner's exit (recorded once)."""

    exit: ev.JobExit


class EndJob(_OnJob, frozen=True):
    """The manager closes the job: its tokens are refused from now on."""

    reason: str


RunnerJobCommand = (IssueJobToken | ClaimJob | Heartbeat | ReportAssembly | ReportThread
                    | ReportExit | EndJob)


class RunnerJobState(msgspec.Struct, frozen=True):
    """What ``decide`` (and the manager) know of a runner job."""

    runner_job_id: str
    session_id: str
    run_id: str
    task_id: str = ""
    attempt_id: str = ""
    token_hashes: frozenset[str] = frozenset()
    issued_at: str = ""
    claimant: str | None = None
    startup: dict[str, object] | None = None
    last_seen: str = ""
    """When the job last showed life in the ledger: its newest token, claim or (in a ledger
    written before leases) heartbeat (ISO 8601). The lease row may be newer."""
    assembly: dict[str, object] | None = None
    thread_id: str | None = None
    thread_mode: str | None = None
    exit: ev.JobExit | None = None
    ended: str | None = None


def authorize(state: RunnerJobState | None, token_sha256: str) -> RunnerJobState:
    """The job's state if the token is one of its own and the job still runs."""
    if state is None or token_sha256 not in state.token_hashes:
        raise Unauthorized("runner token refused")
    if state.ended is not None or state.exit is not None:
        raise Unauthorized("runner token refused: the job has ended")
    return state


def _exit_recorded(state: RunnerJobState | None, command: ReportExit) -> bool:
    """Whether this exit report, from one of the job's tokens, is the one recorded."""
    return state is not None and command.token_sha256 in state.token_hashes \
        and state.exit == command.exit


def decide(state: RunnerJobState | None,
           command: RunnerJobCommand) -> list[ev.RunnerJobEvent]:
    """Events for a runner-job command; repeated reports are no-ops."""
    if isinstance(command, IssueJobToken):
        if state is not None and state.ended is not None:
            raise InvalidTransition("the runner job has ended", runnerJobId=command.runner_job_id)
        if state is not None and command.token_sha256 in state.token_hashes:
            return []
        return [ev.JobTokenIssued(**msgspec.structs.asdict(command))]
    if isinstance(command, EndJob):
        if state is None or state.ended is not None:
            return []
        return [ev.JobEnded(command.reason)]
    if isinstance(command, ReportExit) and _exit_recorded(state, command):
        return []  # the same report sent again (its answer was lost): already recorded
    job = authorize(state, command.token_sha256)
    if isinstance(command, ClaimJob):
        return [] if job.claimant is not None else [
            ev.JobClaimed(command.claimant, command.at, command.startup)]
    if job.claimant is None:
        raise InvalidTransition("claim the job's start first", runnerJobId=job.runner_job_id)
    if isinstance(command, Heartbeat):
        return [ev.JobHeartbeat(command.at)]
    if isinstance(command, ReportAssembly):
        return [] if job.assembly is not None else [ev.JobAssemblyReported(command.assembly)]
    if isinstance(command, ReportThread):
        if job.thread_id == command.thread_id:
            return []
        return [ev.JobThreadReported(command.thread_id, command.mode)]
    return [ev.JobExited(**msgspec.structs.asdict(command.exit))]


def evolve(state: RunnerJobState | None, event: ev.RunnerJobEvent) -> RunnerJobState:
    """Fold one runner-job event."""
    if isinstance(event, ev.JobTokenIssued):
        if state is None:
            return RunnerJobState(
                runner_job_id=event.runner_job_id, session_id=event.session_id,
                run_id=event.run_id, task_id=event.task_id, attempt_id=event.attempt_id,
                token_hashes=frozenset({event.token_sha256}), issued_at=event.at,
                last_seen=event.at)
        return msgspec.structs.replace(state, token_hashes=state.token_hashes
                                       | {event.token_sha256}, last_seen=event.at)
    assert state is not None, "event before job-token-issued"
    match event:
        case ev.JobClaimed():
            return msgspec.structs.replace(state, claimant=event.claimant, last_seen=event.at,
                                           startup=event.startup)
        case ev.JobHeartbeat():
            return msgspec.structs.replace(state, last_seen=event.at)
        case ev.JobAssemblyReported():
            return msgspec.structs.replace(state, assembly=event.assembly)
        case ev.JobThreadReported():
            return msgspec.structs.replace(state, thread_id=event.thread_id,
                                           thread_mode=event.mode)
        case ev.JobExited():
            return msgspec.structs.replace(state, exit=ev.JobExit(
                **msgspec.structs.asdict(event)))
        case _:
            return msgspec.structs.replace(state, ended=event.reason)
