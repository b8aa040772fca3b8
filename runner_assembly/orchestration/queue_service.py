"""Queue commands behind the API: each carried out, or previewed by its own function."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import asyncpg
import msgspec

from ledger.errors import NotFound
from ledger.intake import payload_hash
from ledger.states import AttemptStatus, FailureKind, JobState
from ledger.task import CancelTask, RecordJudge, SubmitTask, TaskCommand
from ledger.writer import Outcome, Writer
from projections import queries
from projections.rows import ReservedRun
from runner_assembly.assembly.capability import work_ready_summary
from runner_assembly.orchestration.attempt_jobs import AttemptJobs
from runner_assembly.orchestration.dispatch import AttemptPreview, Dispatcher
from runner_assembly.orchestration.facts import TaskReader
from runner_assembly.orchestration.planning import JobPlanner
from runner_assembly.orchestration.refresh import Refresher

ACTOR = "api"


@dataclass(frozen=True)
class Preview:
    """What a dry run would do: the operation, the states around it, its events, extras."""

    operation: str
    task_id: str | None
    before: object
    after: object
    events: Sequence[msgspec.Struct]
    extra: dict[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, operation: str, task_id: str | None, outcome: Outcome,
           **extra: object) -> Preview:
        """The preview of a planned command's outcome."""
        return cls(operation, task_id, outcome.before, outcome.state, outcome.events, extra)


@dataclass(eq=False)
class QueueService:
    """Submit, cancel, read, judge, dispatch, refresh, retry and runner-job creation of
    tasks; each with its preview."""

    pool: asyncpg.Pool
    writer: Writer
    reader: TaskReader
    planner: JobPlanner
    dispatcher: Dispatcher
    jobs: AttemptJobs
    refresher: Refresher

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

    async def dispatch(self, task_id: str, attempt_id: str | None,
                       env: dict[str, str]) -> None:
        """Reserve and materialise an attempt."""
        await self.dispatcher.dispatch(task_id, attempt_id, env)

    async def preview_dispatch(self, task_id: str, attempt_id: str | None,
                               env: dict[str, str]) -> Preview:
        """The reservation dispatching would make and the job it would get."""
        preview = await self.dispatcher.preview_dispatch(task_id, attempt_id, env)
        return Preview.of("dispatch", task_id, preview.outcome,
                          workReady=work_ready_summary(), **preview.job)

    async def refresh(self, task_id: str) -> bool:
        """Write the core run's terminal state back; whether there was one to write."""
        return await self.refresher.refresh(task_id) is not None

    async def preview_refresh(self, task_id: str, current: object) -> Preview:
        """What refreshing would record; ``current`` is the task as it stands, shown when
        there is nothing to do."""
        outcome = await self.refresher.preview_refresh(task_id)
        if outcome is None:
            return Preview("refresh", task_id, current, current, [])
        return Preview.of("refresh", task_id, outcome)

    async def retry(self, task_id: str, key: str, reason: str) -> tuple[str, bool]:
        """Reserve (or find) the attempt of ``key`` and materialise it: its id and whether
        the key had already reserved it (a replay)."""
        return await self.dispatcher.retry(task_id, key, reason)

    async def preview_retry(self, task_id: str, key: str, reason: str) -> Preview:
        """The attempt retrying would reserve (or replay) and the job it would get."""
        preview: AttemptPreview = await self.dispatcher.preview_retry(task_id, key, reason)
        found = await queries.get_task(self.pool, task_id)
        if found is None:
            raise NotFound(f"task {task_id} not found", taskId=task_id)
        row, contract = found
        replayed = next((a for a in preview.outcome.before.attempts
                         if a.idempotency_key == key), None)
        return Preview.of(
            "retry", task_id, preview.outcome,
            payloadHashVerified=payload_hash(contract) == row.payload_hash,
            replayOf=replayed.attempt_id if replayed else None,
            missingSecretKeys=self.planner.missing_secret_keys(preview.facts), **preview.job)

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
