"""Dispatch and retry: the attempt decisions. Each reserves an attempt in the task's ledger
stream (or finds the one already reserved) and hands it to :class:`AttemptJobs`; a preview
shows the reservation and the job it would get, changing nothing.

Reservation (ledger) and materialisation (driver) are separate steps: replaying either is
always safe (DESIGN 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import msgspec

from ledger.errors import NotFound
from ledger.events import AttemptReserved
from ledger.ids import new_id
from ledger.intake import payload_hash
from ledger.states import AttemptStatus
from ledger.task import (
    AttemptIds,
    DispatchTask,
    RetryTask,
    TaskState,
    used_key,
)
from ledger.writer import Writer
from projections import orchestration_queries as oq
from projections import queries
from runner_assembly.assembly.capability import work_ready_summary
from runner_assembly.assembly.plan import Ids
from runner_assembly.drivers import faults
from runner_assembly.orchestration.attempt_jobs import ACTOR, AttemptJobs
from runner_assembly.orchestration.facts import TaskFacts, TaskReader
from runner_assembly.orchestration.planning import JobPlanner
from runner_assembly.orchestration.preview import Preview
from runner_assembly.orchestration.session_turns import SessionTurns


@dataclass(eq=False)
class Dispatcher:
    """Reserves attempts (dispatch, retry) and has their runner jobs materialised."""

    pool: asyncpg.Pool
    writer: Writer
    reader: TaskReader
    planner: JobPlanner
    jobs: AttemptJobs
    turns: SessionTurns
    faults: frozenset[str] = frozenset()

    async def dispatch(self, task_id: str, attempt_id: str | None = None,
                       transient_env: dict[str, str] | None = None) -> str:
        """Reserve (or find) the attempt, then materialise it; its id."""
        env = transient_env or {}
        facts = await self._dispatchable(task_id, env)
        outcome = await self.writer.execute(self._dispatch_command(facts, attempt_id), ACTOR)
        state: TaskState = outcome.state
        attempt = state.attempt(attempt_id) if attempt_id else state.latest
        assert attempt is not None
        if outcome.events:
            faults.crash_after_reserve(self.faults)
        if attempt.state == AttemptStatus.RESERVED:  # still due (else a replay of it)
            await self.jobs.materialize(task_id, attempt.attempt_id, facts, env, attempt)
        return attempt.attempt_id

    async def preview_dispatch(self, task_id: str, attempt_id: str | None = None,
                               transient_env: dict[str, str] | None = None) -> Preview:
        """What dispatching would reserve, and the job it would get."""
        env = transient_env or {}
        facts = await self._dispatchable(task_id, env)
        outcome = await self.writer.plan(self._dispatch_command(facts, attempt_id))
        latest = outcome.state.latest
        named = attempt_id or (latest.attempt_id if latest else None)
        job = await self.preview_job(facts, outcome.events, named, env)
        return Preview.of("dispatch", task_id, outcome, workReady=work_ready_summary(), **job)

    async def retry(self, task_id: str, key: str, reason: str) -> tuple[str, bool]:
        """Reserve a new attempt under ``key`` (or find the one it reserved), materialise it:
        its id and whether the key had already reserved it (a replay)."""
        facts = await self.reader.facts(task_id)
        self.planner.check_grants(facts.contract)
        await self.check_session(facts)
        command = RetryTask(task_id, key, reason, self._new_ids(facts, None))
        outcome = await self.writer.execute(command, ACTOR)
        attempt = used_key(outcome.state, key)
        assert attempt is not None
        if outcome.events:
            faults.crash_after_reserve(self.faults)
        if attempt.state == AttemptStatus.RESERVED:  # still due (else a replay of it)
            await self.jobs.materialize(task_id, attempt.attempt_id, facts, None, attempt)
        return attempt.attempt_id, not outcome.events

    async def preview_retry(self, task_id: str, key: str, reason: str) -> Preview:
        """What retrying under ``key`` would reserve (or replay), whether the stored
        contract still matches its hash, and the job the attempt would get."""
        facts = await self.reader.facts(task_id)
        self.planner.check_grants(facts.contract)
        await self.check_session(facts)
        command = RetryTask(task_id, key, reason, self._new_ids(facts, None))
        outcome = await self.writer.plan(command)
        replayed = used_key(outcome.before, key)
        found = await queries.get_task(self.pool, task_id)
        if found is None:
            raise NotFound(f"task {task_id} not found", taskId=task_id)
        row, contract = found
        job = await self.preview_job(facts, outcome.events,
                                     replayed.attempt_id if replayed else None, {})
        return Preview.of(
            "retry", task_id, outcome,
            payloadHashVerified=payload_hash(contract) == row.payload_hash,
            replayOf=replayed.attempt_id if replayed else None,
            missingSecretKeys=self.planner.missing_secret_keys(facts), **job)

    async def _dispatchable(self, task_id: str, env: dict[str, str]) -> TaskFacts:
        """The task's facts, once its ``transientEnv`` and its session are checked."""
        facts = await self.reader.facts(task_id)
        self.planner.check_env(facts, env)
        await self.check_session(facts)
        return facts

    def _dispatch_command(self, facts: TaskFacts, attempt_id: str | None) -> DispatchTask:
        return DispatchTask(facts.task_id, self._new_ids(facts, attempt_id),
                            named=attempt_id is not None)

    def _new_ids(self, facts: TaskFacts, attempt_id: str | None) -> AttemptIds:
        return AttemptIds(
            attempt_id=attempt_id or new_id("att"), run_id=new_id("run"),
            command_id=new_id("cmd"), runner_job_id=new_id("job"),
            session_id=facts.named_session or new_id("ses"),
            backend_profile=facts.backend_profile)

    async def check_session(self, facts: TaskFacts) -> None:
        """Refuse, before anything is reserved, a task whose session belongs to another
        profile, was evicted, or is running a turn (other than that of the task's reserved
        attempt, which dispatching again resumes), or would open one past its tenant's cap
        (checked again under the tenant's lock when the session is opened)."""
        session_id = facts.named_session
        if not facts.persistent_session or session_id is None:
            return
        task = await self.reader.state(facts.task_id)
        latest = task.latest if task is not None else None
        resumed = latest.ids.runner_job_id if latest is not None and latest.ids \
            and latest.state == AttemptStatus.RESERVED else None
        if await self.turns.check_usable(session_id, facts.backend_profile, resumed) is None:
            await self.turns.cap.check(facts.tenant_id)

    async def preview_job(self, facts: TaskFacts, events: Sequence[msgspec.Struct],
                          attempt_id: str | None,
                          transient_env: dict[str, str]) -> dict[str, object]:
        """The dry-run view of the job an attempt would get: its plan, or why assembly fails.

        ``events`` are those the dry run would append (a reservation names the new ids);
        otherwise ``attempt_id`` names the existing attempt.
        """
        ids = await self._planned_ids(facts.task_id, events, attempt_id)
        thread = None
        if ids is not None and facts.persistent_session:
            row = await self.turns.row(facts.named_session or ids.runner_job_id)
            thread = facts.thread(row.thread_id if row else None)
        return await self.planner.preview(facts, ids, transient_env, thread)

    async def _planned_ids(self, task_id: str, events: Sequence[msgspec.Struct],
                           attempt_id: str | None) -> Ids | None:
        """Ids of the attempt a dry run would reserve (from its events) or resume."""
        for event in events:
            if isinstance(event, AttemptReserved):
                return Ids(task_id=task_id, attempt_id=event.attempt_id, run_id=event.run_id,
                           command_id=event.command_id, runner_job_id=event.runner_job_id)
        row = await oq.attempt_identity(self.pool, task_id, attempt_id) if attempt_id else None
        if attempt_id is None or row is None:
            return None
        return Ids(task_id=task_id, attempt_id=attempt_id, run_id=row.run_id,
                   command_id=row.command_id, runner_job_id=row.runner_job_id)
