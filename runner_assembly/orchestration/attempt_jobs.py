"""The runner job of an attempt: materialised under a fence (or failed, with its run), and
cancelled. The job itself comes to exist through :mod:`.materialize`."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import asyncpg
import msgspec

from ledger.database import DbConnection
from ledger.errors import DomainError, NotFound
from ledger.events import RunEnd
from ledger.run import CreateRun, FinishRun, RecordRunnerJob
from ledger.states import (
    AttemptStatus,
    FailureKind,
    JobState,
    RunStatus,
    StorageKind,
    TaskStatus,
)
from ledger.streams import Command
from ledger.task import (
    AttemptIds,
    AttemptState,
    FailMaterialization,
    MaterializeAttempt,
    after_materialization_failure,
)
from ledger.writer import Writer
from projections import orchestration_queries as oq
from projections.session_summary import SessionRow
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.plan import Ids
from runner_assembly.drivers.protocol import JobStatus, RunnerDriver
from runner_assembly.orchestration.facts import TaskFacts, TaskReader, bounded
from runner_assembly.orchestration.materialize import (
    CapacityExhausted,
    CreateFailed,
    JobMaterializer,
    JobOrder,
    TurnRefused,
)
from runner_assembly.orchestration.planning import JobPlanner
from runner_assembly.orchestration.runner_protocol import RunnerProtocol
from runner_assembly.orchestration.session_turns import SessionTurns

log = logging.getLogger(__name__)
ACTOR = "dispatcher"


@dataclass(eq=False)
class AttemptJobs:
    """Creates the runner job of a reserved attempt, fails it, or cancels it."""

    pool: asyncpg.Pool
    writer: Writer
    driver: RunnerDriver
    reader: TaskReader
    planner: JobPlanner
    materializer: JobMaterializer
    turns: SessionTurns
    protocol: RunnerProtocol

    async def materialize(self, task_id: str, attempt_id: str, facts: TaskFacts | None = None,
                          transient_env: dict[str, str] | None = None,
                          reserved: AttemptState | None = None) -> None:
        """Create the attempt's run and runner job (or adopt them); record the outcome.

        ``reserved``: the attempt as the caller's reservation left it (its ids never change),
        which spares a fold of the task stream; the state is always re-read under the fence.
        """
        facts = facts or await self.reader.facts(task_id)
        if reserved is None or reserved.ids is None:
            task = await self.reader.state(task_id)
            reserved = task.attempt(attempt_id) if task is not None else None
        if reserved is None or reserved.ids is None:
            raise NotFound(f"attempt {attempt_id} not found", attemptId=attempt_id)
        row = reserved.ids
        async with self.materializer.fence(f"run/{row.run_id}/{attempt_id}") as conn:
            task = await self.reader.state(task_id)
            current = task.attempt(attempt_id) if task is not None else None
            if task is None or current is None or current.state != AttemptStatus.RESERVED:
                return  # another caller finished it while we waited at the fence
            async with self.turns.lock(row.session_id, conn):
                order = await self._order(facts, row, transient_env or {}, task.state, conn)
                if order is None:
                    return  # its assembly failed: the attempt is failed, its run recorded
                try:
                    started = await self.materializer.materialize(order, conn)
                except (TurnRefused, CapacityExhausted, CreateFailed) as failure:
                    # A turn the order keeps stays reserved with the attempt: the job's
                    # token still works (a runner the create started may claim), so no
                    # other turn of the session may start until dispatching again adopts
                    # the job or a cancel ends it (docs/decisions.md, "A failed create
                    # keeps its session turn").
                    await self.fail(task_id, attempt_id, *_failure_of(failure))
                    return
        attempt = started[-1].state.attempt(attempt_id)
        if attempt is not None and attempt.state == AttemptStatus.CANCELLED:
            await self.cancel_job(row.run_id, row.runner_job_id)

    async def _order(self, facts: TaskFacts, row: AttemptIds, env: dict[str, str],
                     task_state: TaskStatus, conn: DbConnection) -> JobOrder | None:
        """The order of the attempt's job: its run recorded and its session opened with
        the turn's reservation. An assembly that fails records them and fails the attempt
        instead (None). ``conn``: the caller's fence connection."""
        existing = await self.turns.row(row.session_id)
        thread = facts.thread(existing.thread_id if existing else None)
        ids = Ids(task_id=facts.task_id, attempt_id=row.attempt_id, run_id=row.run_id,
                  command_id=row.command_id, runner_job_id=row.runner_job_id)
        prelude = self._prelude(facts, row)
        try:
            plan = await self.planner.plan(facts, ids, env, thread)
        except AssemblyFailure as failure:
            await self._record_then_fail(facts, row, existing, prelude, failure, conn)
            return None
        return JobOrder(
            spec=self.planner.spec(facts, row, plan, env, thread),
            turn=self.turns.reserve_command(
                row.session_id, existing, run_id=row.run_id, command_id=row.command_id,
                runner_job_id=row.runner_job_id, thread_id=thread, task_id=facts.task_id,
                prompt=facts.prompt, profile=row.backend_profile),
            actor=ACTOR, task_id=facts.task_id, attempt_id=row.attempt_id, prelude=prelude,
            volume=self._volume(facts, row, existing),
            tenant_id=_counted(facts),
            takes_capacity=self.materializer.settings.retention,
            keeps_turn=lambda kind: after_materialization_failure(
                task_state, kind) == AttemptStatus.RESERVED,
            recorded=lambda handle: [RecordRunnerJob(row.run_id, handle.driver, handle.handle,
                                                     msgspec.to_builtins(plan))],
            then=[MaterializeAttempt(facts.task_id, row.attempt_id)])

    async def _record_then_fail(self, facts: TaskFacts, row: AttemptIds,
                                existing: SessionRow | None, prelude: list[Command],
                                failure: AssemblyFailure, conn: DbConnection) -> None:
        """An attempt whose assembly fails still records its run and its session (within
        its tenant's cap of live sessions)."""
        try:
            async with self.turns.cap.opening(_counted(facts), row.session_id, conn):
                await self.writer.execute_all(prelude, ACTOR)
        except DomainError as refusal:
            await self.fail(facts.task_id, row.attempt_id, refusal.code, refusal.message)
            return
        volume = self._volume(facts, row, existing)
        if volume is not None:
            await self.driver.ensure_volume(volume)
        await self.fail(facts.task_id, row.attempt_id, failure.kind, failure.message)
        log.debug("assembly of attempt %s failed: %s: %s", row.attempt_id, failure.kind,
                  failure.message)

    def _prelude(self, facts: TaskFacts, row: AttemptIds) -> list[Command]:
        """The run's record and the session's opening (a no-op when it exists)."""
        conversation = facts.conversation_of(row.session_id)
        prompt = facts.prompt.encode()
        run = CreateRun(
            run_id=row.run_id, task_id=facts.task_id, attempt_id=row.attempt_id,
            command_id=row.command_id, runner_job_id=row.runner_job_id,
            session_id=row.session_id, conversation_id=conversation,
            backend_profile=row.backend_profile, resource_bundle_ref=facts.resource_bundle_ref,
            prompt_sha256=hashlib.sha256(prompt).hexdigest(), prompt_bytes=len(prompt))
        return [run, self.turns.open_command(row.session_id, conversation, row.backend_profile,
                                             persistent=facts.persistent_session,
                                             tenant_id=facts.tenant_id)]

    def _volume(self, facts: TaskFacts, row: AttemptIds,
                existing: SessionRow | None) -> dict[str, object] | None:
        """The session volume the job needs, if its session keeps one."""
        storage = existing.storage_kind if existing else StorageKind.VOLUME \
            if facts.persistent_session else StorageKind.NONE
        if storage != StorageKind.VOLUME:
            return None
        conversation = existing.conversation_id if existing \
            else facts.conversation_of(row.session_id)
        return self.turns.volume(row.session_id, conversation)

    async def fail(self, task_id: str, attempt_id: str, kind: str, message: str) -> None:
        """Fail the attempt's materialisation, then end its run with the same blocker
        (SPEC 5.2 rule 9): the run and command records never stay ``created``.

        An attempt that this leaves ended (not reserved) also ends its runner job first: a
        runner the failed create may still have started (a forkserver that answered too late,
        a create that worked but reported an error) has its claim refused, so no backend runs
        for it. One left reserved keeps its job's token: dispatching again adopts that job.
        """
        outcome = await self.writer.execute(
            FailMaterialization(task_id, attempt_id, kind, bounded(message)), ACTOR)
        attempt = outcome.state.attempt(attempt_id) if outcome.state is not None else None
        ended = {AttemptStatus.BLOCKED: RunStatus.BLOCKED, AttemptStatus.FAILED: RunStatus.FAILED}
        if attempt is not None and attempt.ids is not None and attempt.state in ended:
            await self.protocol.end(attempt.ids.runner_job_id, str(attempt.state))
            await self.writer.execute(FinishRun(attempt.ids.run_id, RunEnd(
                ended[attempt.state], failure_kind=kind, failure_message=bounded(message))),
                ACTOR)

    async def cancel_job(self, run_id: str, runner_job_id: str) -> None:
        """Stop a runner job and record the run (and its session turn) as cancelled."""
        await self.driver.cancel(runner_job_id)
        await self.protocol.end(runner_job_id, JobState.CANCELLED)
        await self.writer.execute(FinishRun(run_id, RunEnd(RunStatus.CANCELLED)), ACTOR)
        session_id = await oq.session_of_job(self.pool, runner_job_id)
        if session_id is not None:
            await self.turns.finish(session_id, runner_job_id, JobStatus(JobState.CANCELLED))


def _counted(facts: TaskFacts) -> str | None:
    """The tenant whose cap the task's new session counts toward (None: it keeps no
    volume, so it does not count)."""
    return facts.tenant_id if facts.persistent_session else None


def _failure_of(failure: TurnRefused | CapacityExhausted | CreateFailed) -> tuple[str, str]:
    """The failure kind and message a materialisation failure fails the attempt with."""
    if isinstance(failure, TurnRefused):
        return failure.refusal.code, failure.refusal.message
    if isinstance(failure, CreateFailed):
        return failure.kind, failure.message
    return FailureKind.INFRA_FAILED, str(failure)
