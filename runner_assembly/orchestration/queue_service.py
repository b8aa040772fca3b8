"""Queue commands behind the API: carry them out, or preview them for a dry run."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from ledger.errors import NotFound
from ledger.intake import payload_hash
from ledger.states import AttemptStatus, FailureKind, JobState
from ledger.task import CancelTask, RecordJudge, SubmitTask, TaskCommand
from ledger.writer import Outcome, Writer
from projections import queries
from runner_assembly.assembly.capability import work_ready_summary
from runner_assembly.orchestration.dispatch import Dispatcher

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


class QueueService:
    """Submit, cancel, read, dispatch, refresh, retry and runner-job creation of tasks."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.pool = dispatcher.pool
        self.writer: Writer = dispatcher.writer

    async def submit(self, command: SubmitTask, dry_run: bool) -> Preview | Outcome:
        """Store a submitted task, or find the one its idempotency key stored (an outcome
        without events); with ``dry_run`` only its preview."""
        if dry_run:
            outcome = await self.writer.plan(command)
            replayed = outcome.before is not None
            return Preview("submit", command.task_id if replayed else None, outcome.before,
                           outcome.state, outcome.events, {
                               "payloadHash": command.payload_hash, "queue": command.queue,
                               "lane": command.lane, "idempotentReplay": replayed})
        return await self.writer.execute(command, ACTOR)

    async def mutate(self, name: str, command: TaskCommand, dry_run: bool) -> Preview | None:
        """Carry out a task command (a cancel also stops a running job, and ends the job of a
        reserved attempt), or preview it."""
        if dry_run:
            outcome = await self.writer.plan(command)
            return Preview(name, command.task_id, outcome.before, outcome.state, outcome.events)
        outcome = await self.writer.execute(command, ACTOR)
        latest = outcome.before.latest if isinstance(command, CancelTask) else None
        if latest is not None and latest.state == AttemptStatus.RUNNING and outcome.events:
            attempt = await queries.get_attempt(self.pool, command.task_id, latest.attempt_id)
            if attempt is not None:
                await self.dispatcher.cancel_job(attempt.run_id, attempt.runner_job_id)
        elif latest is not None and latest.state == AttemptStatus.RESERVED and outcome.events \
                and latest.ids is not None:  # a create that failed may have left a runner:
            # ended first (its claim is refused), then stopped if it runs; only then is
            # its session turn, held since, given up
            job = latest.ids.runner_job_id
            await self.dispatcher.protocol.end(job, JobState.CANCELLED)
            await self.dispatcher.driver.cancel(job)
            with contextlib.suppress(NotFound):  # the session was never opened
                await self.dispatcher.sessions.abandon_turn(
                    latest.ids.session_id, job, FailureKind.RUNNER_CANCELLED,
                    "the task was cancelled before its runner job was created")
        return None

    async def judge(self, command: RecordJudge, dry_run: bool) -> Preview | bool:
        """Record a judge's verdict (True; False when the same verdict was recorded before),
        or preview it. A verdict never retries anything (SPEC 4.3 rule 6.10)."""
        if dry_run:
            outcome = await self.writer.plan(command)
            return Preview("judge", command.task_id, outcome.before, outcome.state,
                           outcome.events, {"judgeId": command.verdict.judge_id,
                                            "attemptId": command.verdict.attempt_id})
        return bool((await self.writer.execute(command, ACTOR)).events)

    async def dispatch(self, task_id: str, attempt_id: str | None, env: dict[str, str],
                       dry_run: bool) -> Preview | None:
        """Reserve and materialise an attempt, or preview the job it would get."""
        dispatcher = self.dispatcher
        outcome, _ = await dispatcher.dispatch(task_id, attempt_id, dry_run, env)
        if not dry_run:
            return None
        latest = outcome.state.latest
        job = await dispatcher.plan_for(
            await dispatcher.facts(task_id), outcome.events,
            attempt_id or (latest.attempt_id if latest else None), env)
        return Preview("dispatch", task_id, outcome.before, outcome.state, outcome.events,
                       {"workReady": work_ready_summary(), **job})

    async def refresh(self, task_id: str, dry_run: bool, current: object) -> Preview | bool:
        """Write the core run's terminal state back (whether it did), or preview it;
        ``current`` is the task as it stands, shown when there is nothing to do."""
        outcome = await self.dispatcher.refresh(task_id, dry_run)
        if not dry_run:
            return outcome is not None
        if outcome is None:
            return Preview("refresh", task_id, current, current, [])
        return Preview("refresh", task_id, outcome.before, outcome.state, outcome.events)

    async def retry(self, task_id: str, key: str, reason: str,
                    dry_run: bool) -> Preview | tuple[str, bool]:
        """Reserve (or find) the attempt of ``key`` and materialise it: its id and whether
        the key had already reserved it (a replay); or a preview."""
        dispatcher = self.dispatcher
        outcome, attempt_id = await dispatcher.retry(task_id, key, reason, dry_run)
        if not dry_run:
            assert attempt_id is not None
            return attempt_id, not outcome.events
        found = await queries.get_task(self.pool, task_id)
        assert found is not None
        row, contract = found
        facts = await dispatcher.facts(task_id)
        replayed = next((a for a in outcome.before.attempts if a.idempotency_key == key), None)
        job = await dispatcher.plan_for(facts, outcome.events,
                                        replayed.attempt_id if replayed else None, {})
        return Preview("retry", task_id, outcome.before, outcome.state, outcome.events, {
            "payloadHashVerified": payload_hash(contract) == row.payload_hash,
            "replayOf": replayed.attempt_id if replayed else None,
            "missingSecretKeys": dispatcher.check_dependencies(facts),
            **job})

    async def create_runner_job(self, run_id: str, env: dict[str, str],
                                dry_run: bool) -> Preview | None:
        """Create (or adopt) the runner job of a reserved run, or preview its plan."""
        reserved = await queries.get_reserved_run(self.pool, run_id)
        if reserved is None:
            raise NotFound(f"run {run_id} not found", runId=run_id)
        dispatcher = self.dispatcher
        facts = await dispatcher.facts(reserved.task_id)
        dispatcher.check_env(facts, env)
        if dry_run:
            job = await dispatcher.plan_for(facts, [], reserved.attempt_id, env)
            return Preview("runner-job", reserved.task_id, None, None, [], {
                "runId": run_id, "attemptState": reserved.state, **job})
        if reserved.state == AttemptStatus.RESERVED:
            await dispatcher.materialize(facts.task_id, reserved.attempt_id, facts, env)
        return None
