"""Queue commands behind the API: each carried out, or previewed by its own function."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import asyncpg

from ledger.errors import NotFound
from ledger.states import AttemptStatus, FailureKind, JobState
from ledger.task import CancelTask, RecordJudge, SubmitTask, TaskCommand
from ledger.writer import Outcome, Writer
from projections import queries
from projections.rows import ReservedRun
from runner_assembly.orchestration.attempt_jobs import AttemptJobs
from runner_assembly.orchestration.dispatch import Dispatcher
from runner_assembly.orchestration.facts import TaskReader
from runner_assembly.orchestration.planning import JobPlanner
from runner_assembly.orchestration.preview import Preview

ACTOR = "api"


@dataclass(eq=False)
class QueueService:
    """Submit, cancel, read, judge and runner-job creation of tasks; each with its
    preview."""

    pool: asyncpg.Pool
    writer: Writer
    reader: TaskReader
    planner: JobPlanner
    dispatcher: Dispatcher
    jobs: AttemptJobs

    async def submit(self, command: SubmitTask) -> Outcome:
        """Store a submitted task, or find the one its idempotency key stored (an outcome
        without events)."""
        return await self.writer.execute(command, ACTOR)

    async def preview_submit(self, command: SubmitTask) -> Preview:
        """What submitting would store, or the task its idempotency key replays."""
        outcome = await self.writer.plan(command)
        replayed = outcome.before is not None
        return Preview.of("submit", command.task_id if replayed else None, outcome,
                          payloadHash=command.payload_hash, queue=command.queue,
                          lane=command.lane, idempotentReplay=replayed)

    async def mutate(self, command: TaskCommand) -> None:
        """Carry out a task command (a cancel also stops a running job, and ends the job of a
        reserved attempt)."""
        outcome = await self.writer.execute(command, ACTOR)
        latest = outcome.before.latest if isinstance(command, CancelTask) else None
        if latest is None or not outcome.events:
            return
        if latest.state == AttemptStatus.RUNNING:
            attempt = await queries.get_attempt(self.pool, command.task_id, latest.attempt_id)
            if attempt is not None:
                await self.jobs.cancel_job(attempt.run_id, attempt.runner_job_id)
        elif latest.state == AttemptStatus.RESERVED and latest.ids is not None:
            # a create that failed may have left a runner: ended first (its claim is
            # refused), then stopped if it runs; only then is its session turn, held since,
            # given up
            job = latest.ids.runner_job_id
            await self.jobs.protocol.end(job, JobState.CANCELLED)
            await self.jobs.driver.cancel(job)
            with contextlib.suppress(NotFound):  # the session was never opened
                await self.jobs.turns.abandon_turn(
                    latest.ids.session_id, job, FailureKind.RUNNER_CANCELLED,
                    "the task was cancelled before its runner job was created")

    async def preview_mutate(self, name: str, command: TaskCommand) -> Preview:
        """What a task command would append."""
        return Preview.of(name, command.task_id, await self.writer.plan(command))

    async def judge(self, command: RecordJudge) -> bool:
        """Record a judge's verdict (True; False when the same verdict was recorded before).
        A verdict never retries anything (SPEC 4.3 rule 6.10)."""
        return bool((await self.writer.execute(command, ACTOR)).events)

    async def preview_judge(self, command: RecordJudge) -> Preview:
        """What recording the verdict would append."""
        return Preview.of("judge", command.task_id, await self.writer.plan(command),
                          judgeId=command.verdict.judge_id,
                          attemptId=command.verdict.attempt_id)

    async def create_runner_job(self, run_id: str, env: dict[str, str]) -> None:
        """Create (or adopt) the runner job of a reserved run."""
        reserved = await self._reserved_run(run_id)
        facts = await self.reader.facts(reserved.task_id)
        self.planner.check_env(facts, env)
        if reserved.state == AttemptStatus.RESERVED:
            await self.jobs.materialize(facts.task_id, reserved.attempt_id, facts, env)

    async def preview_runner_job(self, run_id: str, env: dict[str, str]) -> Preview:
        """The plan of the runner job a reserved run would get."""
        reserved = await self._reserved_run(run_id)
        facts = await self.reader.facts(reserved.task_id)
        self.planner.check_env(facts, env)
        job = await self.dispatcher.preview_job(facts, [], reserved.attempt_id, env)
        return Preview("runner-job", reserved.task_id, None, None, [], {
            "runId": run_id, "attemptState": reserved.state, **job})

    async def _reserved_run(self, run_id: str) -> ReservedRun:
        reserved = await queries.get_reserved_run(self.pool, run_id)
        if reserved is None:
            raise NotFound(f"run {run_id} not found", runId=run_id)
        return reserved
