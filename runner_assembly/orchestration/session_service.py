"""The session API's manager side: create sessions, add commands to runs, follow running
turns, cancel, read, storage summaries and GC of expired volumes.

Commands of a run are turns of its session: the session stream records them (the session
layer owns the command stream, SPEC 1); a run the session API created has no task and
keeps its run base on the run record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from datetime import UTC, datetime
from typing import Any

import msgspec

from ledger.errors import InvalidTransition, NotFound, Refused
from ledger.ids import new_id
from ledger.run import CreateRun
from ledger.session import CancelSession, EvictSession, MarkSessionRead
from ledger.states import AttemptStatus, FailureKind, JobState, StorageKind, TurnStatus
from projections import orchestration_queries as oq
from projections.orchestration_queries import JobIdentity, RunBase
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.plan import Ids
from runner_assembly.drivers import faults
from runner_assembly.drivers.protocol import DriverError, JobStatus
from runner_assembly.orchestration.dispatch import Dispatcher, TaskFacts
from runner_assembly.orchestration.session_turns import ACTOR

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


class SessionService:
    """Session operations behind the session API."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.turns = dispatcher.sessions
        self.pool = dispatcher.pool
        self.writer = dispatcher.writer
        self.driver = dispatcher.driver
        self.protocol = dispatcher.protocol

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
            task = await self.dispatcher.facts(run.task_id)
            contract = {**task.contract, "payload": payload}
            return TaskFacts(task.task_id, run.backend_profile, command.prompt,
                             task.resource_bundle_ref, task.session_ref, contract)
        base = run.base or {}
        ref = {"sessionId": run.session_id, "conversationId": run.conversation_id}
        contract = {**base, "payload": payload, "sessionRef": ref}
        return TaskFacts("", run.backend_profile, command.prompt,
                         base.get("resourceBundleRef"), ref, contract)

    async def add_command(self, command: NewCommand, *, dry_run: bool) -> dict[str, Any]:
        """Start a turn in the run's session (or find the one ``commandId`` started)."""
        run = await oq.run_base(self.pool, command.run_id)
        if run is None:
            raise NotFound(f"run {command.run_id} not found", runId=command.run_id)
        session_id = run.session_id
        resumed = None
        if command.command_id:
            found = await oq.turn_by_command(self.pool, command.command_id)
            if found is not None and found.run_id != command.run_id:
                raise InvalidTransition("commandId already names a command of another "
                                        "run", commandId=command.command_id)
            if found is not None and not await self.turns.started(session_id,
                                                                  found.runner_job_id):
                resumed = found.runner_job_id  # reserved, its job maybe not created yet
            elif found is not None:
                return {"sessionId": session_id, "runId": command.run_id,
                        "commandId": found.command_id,
                        "runnerJobId": found.runner_job_id, "threadId": found.thread_id,
                        "resumed": found.thread_id is not None, "created": False}
        facts = await self._facts(run, command)
        self.dispatcher.check_env(facts, command.transient_env)
        async with self.dispatcher.fence_pool.acquire() as conn, \
                self.turns.lock(session_id, conn):
            session = await self.turns.check_usable(session_id, run.backend_profile,
                                                    resumed)
            if session is None:
                raise NotFound(f"session {session_id} not found", sessionId=session_id)
            volume = session.storage_kind == StorageKind.VOLUME
            thread = facts.thread(session.thread_id) if volume else None
            command_id = command.command_id or new_id("cmd")
            ids = Ids(task_id=run.task_id, attempt_id=run.attempt_id,
                      run_id=command.run_id, command_id=command_id,
                      runner_job_id=job_id_for(command.run_id, command_id))
            try:
                plan = self.dispatcher.job_plan(facts, ids, command.transient_env, thread)
            except AssemblyFailure as failure:
                raise Refused(failure.kind, failure.message, **failure.details) from None
            view = {"sessionId": session_id, "runId": command.run_id, "commandId": command_id,
                    "runnerJobId": ids.runner_job_id, "threadId": thread,
                    "resumed": thread is not None}
            if dry_run:
                return {**view, "runnerJob": msgspec.to_builtins(plan), "valuesPrinted": False}
            row = JobIdentity(runner_job_id=ids.runner_job_id, run_id=command.run_id,
                              session_id=session_id, backend_profile=run.backend_profile)
            spec = self.dispatcher.job_spec(facts, row, plan, command.transient_env, thread)
            spec = dataclasses.replace(spec, runner_token=await self.protocol.issue(
                ids.runner_job_id, session_id=session_id, run_id=command.run_id,
                task_id=run.task_id, attempt_id=run.attempt_id))
            if volume:
                await self.driver.ensure_volume(self.turns.volume(session_id,
                                                                  run.conversation_id))
            await self.turns.reserve_turn(session_id, run_id=command.run_id,
                                          command_id=command_id,
                                          runner_job_id=ids.runner_job_id, thread_id=thread,
                                          task_id=run.task_id or None, prompt=command.prompt,
                                          profile=run.backend_profile)
            faults.crash_after_reserve(self.dispatcher.settings.faults)
            try:
                handle = await self.driver.create(spec)
            except DriverError as error:  # the job may exist all the same (a runner
                # forked too late, a create that worked but reported an error): ended first,
                # its runner's claim is refused before the session takes another turn
                await self.protocol.end(ids.runner_job_id, error.kind)
                await self.turns.abandon_turn(session_id, ids.runner_job_id, error.kind,
                                              error.message)
                raise Refused(error.kind, error.message) from None
            faults.crash_at(self.dispatcher.settings.faults, "crash-after-create")
            await self.turns.start_turn(session_id, handle, ids.runner_job_id)
        return {**view, "created": True}

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
            task = await self.dispatcher.task_state(turn.task_id)
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
