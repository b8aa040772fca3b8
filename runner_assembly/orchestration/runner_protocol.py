"""The manager's side of the runner protocol (DESIGN 9): tokens, reports, the lease.

A runner job's bearer token is random, issued when its job is (re)created, handed to the
driver for the per-job secret and recorded in the ledger as a sha256 only. Everything a
runner reports goes through the ledger (the runner-job stream; the storage summary on the
session stream; lines into the session line store by numbered batch), except its heartbeats:
liveness is not history, so a heartbeat renews the job's lease row in place
(:mod:`ledger.leases`). The job's status for refresh comes from these reports; the driver only
says whether the job is still there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import asyncpg

from ledger import leases, session_lines
from ledger.errors import InvalidRequest, InvalidTransition, Unauthorized
from ledger.events import JobExit, TokenUsage
from ledger.grouped import Grouped
from ledger.runner_job import (
    ClaimJob,
    EndJob,
    Heartbeat,
    IssueJobToken,
    ReportAssembly,
    ReportExit,
    ReportThread,
    RunnerJobState,
    authorize,
    decide,
)
from ledger.states import FailureKind, JobState
from ledger.store import is_outage
from ledger.streams import RUNNER_JOB_STREAM
from ledger.writer import Writer
from runner_assembly.drivers.protocol import JobStatus, RunnerDriver
from runner_assembly.orchestration.session_turns import folded

ACTOR = "runner"
MANAGER = "dispatcher"


def _not_outage(error: Exception) -> bool:
    """A failed group's reports are written one by one, unless the database is down."""
    return not is_outage(error)


def token_hash(token: str) -> str:
    """The only form in which a runner token is stored."""
    return hashlib.sha256(token.encode()).hexdigest()


def job_of_token(token: str) -> str:
    """The runner job a token names (refused when it names none)."""
    runner_job_id, dot, rest = token.partition(".")
    if not dot or not runner_job_id or not rest:
        raise Unauthorized("runner token refused")
    return runner_job_id


def now_text() -> str:
    """The server's clock as stored in runner-job events."""
    return datetime.now(UTC).isoformat()


def new_token(runner_job_id: str, *, session_id: str, run_id: str, task_id: str = "",
              attempt_id: str = "") -> tuple[str, IssueJobToken]:
    """A new random token for the job and the command recording its hash (to be executed
    before anyone can hold the token).

    The token names its job (``<runnerJobId>.<random>``) so a request carrying it says which
    job it speaks for; the hash covers the whole token."""
    token = f"{runner_job_id}.{secrets.token_urlsafe(32)}"
    return token, IssueJobToken(runner_job_id, session_id=session_id, run_id=run_id,
                                token_sha256=token_hash(token), at=now_text(),
                                task_id=task_id, attempt_id=attempt_id)


class RunnerProtocol:
    """Receives what runners report; answers a job's status from those reports."""

    def __init__(self, pool: asyncpg.Pool, writer: Writer, driver: RunnerDriver,
                 lease_s: float, start_s: float = 0.0,
                 output_max_bytes: int | None = None) -> None:
        """``start_s``: how much longer a job may stay silent while the driver shows one of
        its containers being started (``SVC_RUNNER_START_S``); ``output_max_bytes``: what a
        job's channel may store (``SVC_OUTPUT_MAX_BYTES``; None: no bound)."""
        self.pool = pool
        self.output_max_bytes = output_max_bytes
        self.writer = writer
        self.driver = driver
        self.lease = timedelta(seconds=lease_s)
        self.start = timedelta(seconds=start_s)
        self.line_groups: Grouped[session_lines.HeldBatch, asyncpg.Record] = Grouped(
            lambda batches: session_lines.append_held_group(pool, batches, output_max_bytes),
            lambda batch: session_lines.append_held(pool, batch, output_max_bytes),
            key=lambda batch: batch.runner_job_id, weight=lambda batch: batch.bytes,
            retry_alone=_not_outage)
        """Line batches under held tokens, committed in groups (:mod:`ledger.grouped`)."""
        self.beat_groups: Grouped[leases.Beat, bool] = Grouped(
            lambda beats: leases.renew_held_group(pool, beats),
            lambda beat: leases.renew_held(pool, *beat), key=lambda beat: beat.runner_job_id,
            retry_alone=_not_outage)
        """Heartbeats under held tokens, committed in groups."""

    async def job(self, runner_job_id: str) -> RunnerJobState | None:
        """The runner job's state, folded from its ledger stream."""
        state: RunnerJobState | None = await folded(self.pool, RUNNER_JOB_STREAM,
                                                    runner_job_id)
        return state

    async def issue(self, runner_job_id: str, *, session_id: str, run_id: str,
                    task_id: str = "", attempt_id: str = "") -> str:
        """A new random token for the job, its hash recorded before anyone can hold it."""
        token, command = new_token(runner_job_id, session_id=session_id, run_id=run_id,
                                   task_id=task_id, attempt_id=attempt_id)
        await self.writer.execute(command, MANAGER)
        return token

    async def claim(self, runner_job_id: str, token: str, claimant: str,
                    startup: dict[str, object] | None = None) -> bool:
        """Claim the job's start: True for the first claimant (and its resent claim)."""
        outcome = await self.writer.execute(
            ClaimJob(runner_job_id, token_hash(token), claimant, now_text(), startup), ACTOR)
        state: RunnerJobState = outcome.state
        return state.claimant == claimant

    async def heartbeat(self, runner_job_id: str, token: str) -> None:
        """Renew the job's lease: decided on the job's stream like any report (its live
        token, once claimed), then kept in the job's lease row instead of the ledger; the
        next beat with the same token renews the row in one statement."""
        command = Heartbeat(runner_job_id, token_hash(token), now_text())
        at = datetime.fromisoformat(command.at)
        if await self.beat_groups.write(leases.Beat(runner_job_id, command.token_sha256, at)):
            return  # the token that renewed last, its job neither exited nor ended since
        job = await self.job(runner_job_id)
        decide(job, command)  # refuses what the ledger would
        await leases.renew(self.pool, runner_job_id, at, command.token_sha256,
                           job.session_id if job is not None else None)

    async def last_seen(self, job: RunnerJobState) -> datetime | None:
        """When the job last showed life: its lease row or its newest ledger event."""
        renewed = await leases.last_seen(self.pool, job.runner_job_id)
        recorded = datetime.fromisoformat(job.last_seen) if job.last_seen else None
        if renewed is None or recorded is None:
            return renewed or recorded
        return max(renewed, recorded)

    async def assembly(self, runner_job_id: str, token: str,
                       assembly: dict[str, object]) -> None:
        """Record the bounded assembly event."""
        await self.writer.execute(ReportAssembly(runner_job_id, token_hash(token), assembly),
                                  ACTOR)

    async def thread(self, runner_job_id: str, token: str, thread_id: str, mode: str) -> None:
        """Record the thread the backend started or resumed."""
        await self.writer.execute(ReportThread(runner_job_id, token_hash(token), thread_id,
                                               mode), ACTOR)

    async def exit(self, runner_job_id: str, token: str, report: JobExit) -> RunnerJobState:
        """Record the runner's exit; the job's state after it. Its lease row lets go of the
        token, so a later beat takes the full decision (which refuses it)."""
        outcome = await self.writer.execute(ReportExit(runner_job_id, token_hash(token), report),
                                            ACTOR)
        await leases.let_go(self.pool, runner_job_id)
        state: RunnerJobState = outcome.state
        return state

    async def lines(self, runner_job_id: str, token: str, channel: str, seq: int,
                    lines: Sequence[str | session_lines.Piece], stream: str = "stdout") -> bool:
        """Append one numbered batch of lines (of the backend's ``stream``) to the job's
        session; False for a resent one. ``invalid-request`` (once the token is checked) for
        a trace batch of ``stderr`` or a part numbered past its count.

        A token the job's lease row holds is taken without folding the job's stream (as a
        heartbeat's is), and the batch renews the lease (it proves the runner alive): token,
        lease and batch in one statement, committed with the other jobs' batches that arrive
        with it (:mod:`ledger.grouped`)."""
        problem = _batch_problem(channel, stream, lines)
        if problem is not None:
            if await leases.held_session(self.pool, runner_job_id, token_hash(token)) is None:
                await self.authorized(runner_job_id, token, claimed=True)
            raise InvalidRequest(problem)
        pieces = session_lines.prepared(lines)
        holder = session_lines.Holder(token_hash(token), datetime.now(UTC))
        row = await self.line_groups.write(session_lines.HeldBatch(
            holder, runner_job_id, channel, seq, pieces, stream))
        accepted = await session_lines.settle(self.pool, row, runner_job_id, channel, seq,
                                              pieces, self.output_max_bytes, stream)
        if accepted is None:  # not held: the job's stream decides (a connection apart)
            session_id = (await self.authorized(runner_job_id, token, claimed=True)).session_id
            # renewed as a beat taking the full decision renews it: the row holds the token
            # from now on, so a runner that leaves out beats while it ships keeps its lease
            await leases.renew(self.pool, runner_job_id, holder.at, holder.token_sha256,
                               session_id)
            async with self.pool.acquire() as conn:
                accepted = await session_lines.append_once(conn, session_id, runner_job_id,
                                                           channel, seq, pieces,
                                                           self.output_max_bytes, stream)
        return accepted is True

    async def authorized(self, runner_job_id: str, token: str, *,
                         claimed: bool = False) -> RunnerJobState:
        """The job's state if ``token`` is one of its live tokens (and it was claimed)."""
        job = authorize(await self.job(runner_job_id), token_hash(token))
        if claimed and job.claimant is None:
            raise InvalidTransition("claim the job's start first", runnerJobId=runner_job_id)
        return job

    async def session_job(self, session_id: str, token: str) -> RunnerJobState:
        """The job ``token`` belongs to, if it is live and runs a turn of ``session_id``."""
        job = await self.authorized(job_of_token(token), token)
        if job.session_id != session_id:
            raise Unauthorized("runner token refused: its job runs another session")
        return job

    async def end(self, runner_job_id: str, reason: str) -> None:
        """Close the job: its tokens are refused from now on (and its lease row goes)."""
        await self.writer.execute(EndJob(runner_job_id, reason), MANAGER)
        await leases.release(self.pool, runner_job_id)

    async def status(self, runner_job_id: str, *, stop_lost: bool = True,
                     now: datetime | None = None) -> JobStatus:
        """The job's status from its runner's reports; the driver only as a fallback.

        Without an exit report: a job whose lease expired is ``runner-lost`` (with
        ``stop_lost`` its driver job is stopped), unless the driver saw the job alive within
        the lease (a container being started: a pod pulling its image before or after its
        ``assemble`` container, when nothing of the runner runs to beat; or a container
        started since) and the silence is shorter than the lease plus ``start_s``; one the
        driver says has ended is what the driver saw of it.
        """
        job = await self.job(runner_job_id)
        if job is None:  # created before the runner protocol: only the driver knows
            return await self.driver.status(runner_job_id)
        if job.exit is not None:
            return _reported(job)
        lost = _lost(job, "the runner's lease expired: no heartbeat for "
                          f"{int(self.lease.total_seconds())} s")
        if job.ended == FailureKind.RUNNER_LOST:
            return lost
        if job.ended == FailureKind.SECRET_UNAVAILABLE:  # stopped by a concurrent refresh
            return _blocked_on_secret(job)
        moment = now or datetime.now(UTC)
        seen = await self.last_seen(job)
        silent = moment - seen if seen is not None else None
        if silent is not None and silent > self.lease:
            if silent <= self.lease + self.start:
                alive = (await self.driver.status(runner_job_id)).alive_at
                if alive is not None and moment - alive <= self.lease:
                    return _running(job)
            if stop_lost:  # ended first: a runner woken by the stop cannot renew its lease
                await self.end(runner_job_id, FailureKind.RUNNER_LOST)
                await self.driver.cancel(runner_job_id)
            return lost
        there = await self.driver.status(runner_job_id)
        if not there.terminal:
            return _running(job)
        job = await self.job(runner_job_id) or job  # it may have reported meanwhile
        if job.exit is not None:
            return _reported(job)
        # The fallback when a runner dies before it reports: what the driver saw (pod status
        # and termination message; a local process gone: runner-lost).
        if stop_lost and there.failure_kind == FailureKind.SECRET_UNAVAILABLE:
            # Ended first, then stopped (kubelet would retry it forever): a refresh running
            # beside this one reads the outcome from the ledger, not from a Job now gone.
            await self.end(runner_job_id, FailureKind.SECRET_UNAVAILABLE)
            await self.driver.cancel(runner_job_id)
        return dataclasses.replace(there, assembly=there.assembly or job.assembly,
                                   thread_id=there.thread_id or job.thread_id,
                                   startup=there.startup or job.startup)


def _batch_problem(channel: str, stream: str,
                   lines: Sequence[str | session_lines.Piece]) -> str | None:
    """Why a batch of lines is an ``invalid-request`` (None: it is not)."""
    if channel == "trace" and stream != "stdout":
        return "a trace batch has no stream of its own"
    if any(not isinstance(line, str) and (line.part or 0) > (line.parts or 0)
           for line in lines):
        return "a line part's number is past its count of parts"
    return None


def _running(job: RunnerJobState) -> JobStatus:
    return JobStatus(JobState.RUNNING, assembly=job.assembly, thread_id=job.thread_id,
                     startup=job.startup)


def _reported(job: RunnerJobState) -> JobStatus:
    assert job.exit is not None
    try:
        state = JobState(job.exit.state)
    except ValueError:
        state = JobState.FAILED
    if state == JobState.RUNNING:
        state = JobState.FAILED
    return JobStatus(state, job.exit.exit_code, job.exit.failure_kind,
                     job.exit.failure_message, job.assembly, job.thread_id,
                     startup=job.startup, started_at=_moment(job.exit.started_at),
                     finished_at=_moment(job.exit.finished_at),
                     usage=job.exit.usage if isinstance(job.exit.usage, TokenUsage) else None)


def _moment(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _blocked_on_secret(job: RunnerJobState) -> JobStatus:
    return JobStatus(JobState.BLOCKED, failure_kind=FailureKind.SECRET_UNAVAILABLE,
                     failure_message="a secret the runner job mounts is unavailable",
                     assembly=job.assembly, thread_id=job.thread_id, startup=job.startup)


def _lost(job: RunnerJobState, message: str) -> JobStatus:
    return JobStatus(JobState.FAILED, failure_kind=FailureKind.RUNNER_LOST,
                     failure_message=message, assembly=job.assembly, thread_id=job.thread_id,
                     startup=job.startup)
