"""The session API's manager side: create sessions, add commands to runs, follow running
turns, cancel, read, storage summaries and GC of expired volumes.

Commands of a run are turns of its session: the session stream records them (the session
layer owns the command stream, SPEC 1); a run the session API created has no task and
keeps its run base on the run record.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec

from ledger.errors import InvalidTransition, NotFound, Refused
from ledger.ids import new_id
from ledger.run import CreateRun
from ledger.session import CancelSession, EvictSession, MarkSessionRead
from ledger.states import AttemptStatus, FailureKind, JobState, StorageKind, TurnStatus
from ledger.writer import Writer
from projections import orchestration_queries as oq
from projections.orchestration_queries import JobIdentity, RunBase
from projections.session_summary import SessionRow
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.plan import Ids, RunnerJobPlan
from runner_assembly.drivers.protocol import DriverError, JobStatus, RunnerDriver
from runner_assembly.orchestration.facts import TaskFacts, TaskReader
from runner_assembly.orchestration.materialize import JobMaterializer, JobOrder
from runner_assembly.orchestration.planning import JobPlanner
from runner_assembly.orchestration.runner_protocol import RunnerProtocol
from runner_assembly.orchestration.session_turns import ACTOR, SessionTurns

log = logging.getLogger(__name__)
SYNC_BATCH = 100


class NewSession(msgspec.Struct, frozen=True):
    """What ``POST /api/v1/sessions`` asks for."""

    session_id: str | None
    conversation_id: str | None
    backend_profile: str
    run_base: dict[str, Any]


class NewCommand(msgspec.Struct, frozen=True):
    """What ``POST /api/v1/runs/{runId}/commands`` asks for."""

    run_id: str
    prompt: str
    thread_id: str | None = None
    command_id: str | None = None
    transient_env: dict[str, str] = {}


def job_id_for(run_id: str, command_id: str) -> str:
    """The runner job id of a command: derived, so a replayed command adopts its job."""
    digest = hashlib.sha256(f"{run_id}/{command_id}".encode()).hexdigest()[:26]
    return f"job_{digest}"


@dataclass(frozen=True)
class PlannedTurn:
    """A command's turn as planned under the session's lock: what a preview shows and what
    materialising it needs."""

    view: dict[str, Any]
    facts: TaskFacts
    plan: RunnerJobPlan
    ids: Ids
    thread: str | None
    session: SessionRow

    @property
    def volume(self) -> bool:
        """Whether the session keeps a volume."""
        return self.session.storage_kind == StorageKind.VOLUME


@dataclass(eq=False)
class SessionService:
    """Session operations behind the session API."""

    pool: asyncpg.Pool
    writer: Writer
    driver: RunnerDriver
    reader: TaskReader
    planner: JobPlanner
    materializer: JobMaterializer
    turns: SessionTurns
    protocol: RunnerProtocol

    async def create(self, request: NewSession) -> str:
        """Create the session, its volume and its run (or find it); its id."""
        session_id = request.session_id or new_id("ses")
        existing = await self.turns.row(session_id)
        if existing is not None:
            await self.turns.open(session_id, existing.conversation_id,
                                  request.backend_profile, persistent=True)
            return session_id
        conversation = request.conversation_id or "cnv_" + session_id.removeprefix("ses_")
        base = request.run_base
        run_id = new_id("run")
        await self.writer.execute(CreateRun(
            run_id=run_id, task_id="", attempt_id="", command_id="", runner_job_id="",
            session_id=session_id, conversation_id=conversation,
            backend_profile=request.backend_profile,
            resource_bundle_ref=base.get("resourceBundleRef"), base=base), ACTOR)
        await self.turns.open(session_id, conversation, request.backend_profile,
                              persistent=True, run_id=run_id)
        return session_id

    async def _facts(self, run: RunBase, command: NewCommand) -> TaskFacts:
        """The contract a command of ``run`` executes with: its task's, or the run base."""
        payload: dict[str, str] = {"prompt": command.prompt}
        if command.thread_id:
            payload["threadId"] = command.thread_id
        if run.task_id:
            task = await self.reader.facts(run.task_id)
            contract = {**task.contract, "payload": payload}
            return TaskFacts(task.task_id, run.backend_profile, command.prompt,
                             task.resource_bundle_ref, task.session_ref, contract)
        base = run.base or {}
        ref = {"sessionId": run.session_id, "conversationId": run.conversation_id}
        contract = {**base, "payload": payload, "sessionRef": ref}
        return TaskFacts("", run.backend_profile, command.prompt,
                         base.get("resourceBundleRef"), ref, contract)

    async def _found(self, command: NewCommand, run: RunBase) -> tuple[str | None,
                                                                         dict[str, Any] | None]:
        """The job of the turn ``commandId`` reserved but did not start (to resume), or the
        answer of the turn it started."""
        if not command.command_id:
            return None, None
        found = await oq.turn_by_command(self.pool, command.command_id)
        if found is None:
            return None, None
        if found.run_id != command.run_id:
            raise InvalidTransition("commandId already names a command of another run",
                                    commandId=command.command_id)
        if not await self.turns.started(run.session_id, found.runner_job_id):
            return found.runner_job_id, None  # reserved, its job maybe not created yet
        return None, {"sessionId": run.session_id, "runId": command.run_id,
                      "commandId": found.command_id, "runnerJobId": found.runner_job_id,
                      "threadId": found.thread_id, "resumed": found.thread_id is not None,
                      "created": False}

    async def _run(self, command: NewCommand) -> RunBase:
        run = await oq.run_base(self.pool, command.run_id)
        if run is None:
            raise NotFound(f"run {command.run_id} not found", runId=command.run_id)
        return run

    async def _plan(self, run: RunBase, command: NewCommand,
                    resumed: str | None) -> PlannedTurn:
        """Plan the command's turn (under the session's lock): refused on a session of
        another profile, evicted or busy, or an assembly that fails."""
        facts = await self._facts(run, command)
        self.planner.check_env(facts, command.transient_env)
        session_id = run.session_id
        session = await self.turns.check_usable(session_id, run.backend_profile, resumed)
        if session is None:
            raise NotFound(f"session {session_id} not found", sessionId=session_id)
        volume = session.storage_kind == StorageKind.VOLUME
        thread = facts.thread(session.thread_id) if volume else None
        command_id = command.command_id or new_id("cmd")
        ids = Ids(task_id=run.task_id, attempt_id=run.attempt_id, run_id=command.run_id,
                  command_id=command_id, runner_job_id=job_id_for(command.run_id, command_id))
        try:
            plan = self.planner.plan(facts, ids, command.transient_env, thread)
        except AssemblyFailure as failure:
            raise Refused(failure.kind, failure.message, **failure.details) from None
        view = {"sessionId": session_id, "runId": command.run_id, "commandId": command_id,
                "runnerJobId": ids.runner_job_id, "threadId": thread,
                "resumed": thread is not None}
        return PlannedTurn(view, facts, plan, ids, thread, session)

    async def add_command(self, command: NewCommand) -> dict[str, Any]:
        """Start a turn in the run's session (or find the one ``commandId`` started)."""
        run = await self._run(command)
        resumed, answer = await self._found(command, run)
        if answer is not None:
            return answer
        async with self.materializer.fence(None) as conn, \
                self.turns.lock(run.session_id, conn):
            turn = await self._plan(run, command, resumed)
            if turn.volume:
                await self.driver.ensure_volume(self.turns.volume(run.session_id,
                                                                  run.conversation_id))
            try:
                await self.materializer.materialize(self._order(run, command, turn), conn)
            except DriverError as error:  # ended by the materializer: its runner's claim
                # is refused before the session takes another turn
                raise Refused(error.kind, error.message) from None
        return {**turn.view, "created": True}

    async def preview_command(self, command: NewCommand) -> dict[str, Any]:
        """The turn a command would start and its job's plan (or the turn it found)."""
        run = await self._run(command)
        resumed, answer = await self._found(command, run)
        if answer is not None:
            return answer
        async with self.materializer.fence(None) as conn, \
                self.turns.lock(run.session_id, conn):
            turn = await self._plan(run, command, resumed)
        return {**turn.view, "runnerJob": msgspec.to_builtins(turn.plan),
                "valuesPrinted": False}

    def _order(self, run: RunBase, command: NewCommand, turn: PlannedTurn) -> JobOrder:
        """The job order of a command's turn."""
        job = JobIdentity(runner_job_id=turn.ids.runner_job_id, run_id=command.run_id,
                          session_id=run.session_id, backend_profile=run.backend_profile)
        return JobOrder(
            spec=self.planner.spec(turn.facts, job, turn.plan, command.transient_env,
                                   turn.thread),
            turn=self.turns.reserve_command(
                run.session_id, turn.session, run_id=command.run_id,
                command_id=turn.ids.command_id, runner_job_id=turn.ids.runner_job_id,
                thread_id=turn.thread, task_id=run.task_id or None, prompt=command.prompt,
                profile=run.backend_profile),
            actor=ACTOR, task_id=run.task_id, attempt_id=run.attempt_id)

    async def sync(self, session_id: str) -> None:
        """Finish the session's turns whose runner reported its exit (or was lost)."""
        for turn in await oq.active_turns(self.pool, session_id):
            job = turn.runner_job_id
            if not await self.turns.started(session_id, job):
                continue  # reserved: its job is being created
            status = await self.protocol.status(job)
            if status.terminal:
                await self.turns.finish(session_id, job, status)
                await self.protocol.end(job, str(status.state))

    async def sync_running(self) -> None:
        """Follow every running session once (the background loop)."""
        for session_id in await oq.running_sessions(self.pool, SYNC_BATCH):
            try:
                await self.sync(session_id)
            except Exception:  # one broken session must not stop the others
                log.exception("following session %s failed", session_id)

    async def check_cancellable(self, session_id: str) -> None:
        """Refuse to cancel a turn that a task's reserved attempt holds (its create failed,
        or is under way): that attempt adopts its job when dispatched again, which an ended
        job refuses, so only cancelling the task ends the job and frees the turn."""
        for turn in await oq.active_turns(self.pool, session_id):
            if turn.status != TurnStatus.RESERVED or not turn.task_id:
                continue
            task = await self.reader.state(turn.task_id)
            latest = task.latest if task is not None else None
            if latest is not None and latest.state == AttemptStatus.RESERVED \
                    and latest.ids is not None \
                    and latest.ids.runner_job_id == turn.runner_job_id:
                raise InvalidTransition(
                    "the session's turn belongs to a reserved attempt of a task: cancel the "
                    "task", sessionId=session_id, taskId=turn.task_id,
                    runnerJobId=turn.runner_job_id)

    async def cancel(self, session_id: str, reason: str | None) -> None:
        """Cancel the session's running turn: stop its runner job, record the end."""
        await self.check_cancellable(session_id)
        await self.writer.execute(CancelSession(session_id, reason), ACTOR)
        for turn in await oq.active_turns(self.pool, session_id):
            await self.driver.cancel(turn.runner_job_id)
            await self.protocol.end(turn.runner_job_id, JobState.CANCELLED)
            await self.turns.finish(session_id, turn.runner_job_id, JobStatus(
                JobState.CANCELLED, failure_kind=FailureKind.RUNNER_CANCELLED,
                failure_message="cancelled through session control"))

    @staticmethod
    def preview_create(request: NewSession) -> dict[str, object]:
        """The dry-run plan of creating a session."""
        return {"sessionId": request.session_id, "backendProfile": request.backend_profile,
                "volume": "create or resolve", "valuesPrinted": False}

    async def preview(self, name: str,
                      command: CancelSession | MarkSessionRead) -> dict[str, object]:
        """The dry-run plan of a session command: the events it would append."""
        if isinstance(command, CancelSession):
            await self.check_cancellable(command.session_id)
        outcome = await self.writer.plan(command)
        return {"operation": name, "sessionId": command.session_id,
                "events": [type(e).__name__ for e in outcome.events]}

    async def read(self, session_id: str, reader_id: str) -> None:
        """Advance a reader's cursor to the session's current version."""
        await self.writer.execute(MarkSessionRead(session_id, reader_id), ACTOR)

    async def refresh_storage(self, session_id: str, summary: dict[str, Any] | None) -> None:
        """Record the volume summary a runner wrote back (posted, or left by its job)."""
        row = await self.turns.row(session_id)
        if row is None:
            raise NotFound(f"session {session_id} not found", sessionId=session_id)
        if row.storage_kind != "volume":
            raise InvalidTransition(f"session {session_id} has no volume "
                                    f"(storage {row.storage_kind})", sessionId=session_id)
        if summary is None:
            raise InvalidTransition("post the volume summary a runner wrote (the manager "
                                    "reads no job files)", sessionId=session_id)
        await self.turns.refresh_storage(session_id, summary)

    async def gc(self, now: datetime | None = None) -> list[str]:
        """Remove the volumes of expired sessions with no turn running; mark them evicted."""
        evicted = []
        moment = now or datetime.now(UTC)
        for row in await oq.expired_sessions(self.pool, moment, SYNC_BATCH):
            session_id = row.session_id
            async with self.turns.lock(session_id):
                try:
                    await self.writer.plan(EvictSession(session_id, "expired"))
                except InvalidTransition:
                    continue  # a turn started meanwhile
                await self.driver.delete_volume(self.turns.volume(session_id,
                                                                  row.conversation_id))
                await self.writer.execute(EvictSession(session_id, "expired"), ACTOR)
            evicted.append(session_id)
        return evicted
