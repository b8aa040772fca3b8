"""Commands added to a run (``POST /runs/{runId}/commands``): each a turn of the run's
session, its runner job created through :mod:`.materialize`; or its preview."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from ledger.errors import InvalidTransition, NotFound, Refused
from ledger.ids import new_id
from ledger.states import StorageKind
from projections import orchestration_queries as oq
from projections.orchestration_queries import JobIdentity, RunBase
from projections.session_summary import SessionRow
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.plan import Ids, RunnerJobPlan
from runner_assembly.drivers.protocol import RunnerDriver
from runner_assembly.orchestration.facts import TaskFacts, TaskReader, bounded
from runner_assembly.orchestration.materialize import (
    CreateFailed,
    JobMaterializer,
    JobOrder,
    TurnRefused,
)
from runner_assembly.orchestration.planning import JobPlanner
from runner_assembly.orchestration.session_turns import ACTOR, SessionTurns


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
class Prior:
    """What is known of a command before its turn is planned: its run, the job of the turn
    its ``commandId`` reserved but did not start (to resume), or the answer of the turn it
    started."""

    run: RunBase
    resumed: str | None = None
    answer: dict[str, Any] | None = None


@dataclass(frozen=True)
class PlannedTurn:
    """A command's turn as planned: what a preview shows and what creating it needs."""

    view: dict[str, Any]
    facts: TaskFacts
    plan: RunnerJobPlan
    ids: Ids
    thread: str | None
    session: SessionRow


@dataclass(eq=False)
class SessionCommands:
    """Starts the turn of a command added to a run, or previews it."""

    pool: asyncpg.Pool
    driver: RunnerDriver
    reader: TaskReader
    planner: JobPlanner
    materializer: JobMaterializer
    turns: SessionTurns

    async def add_command(self, command: NewCommand) -> dict[str, Any]:
        """Start a turn in the run's session (or find the one ``commandId`` started)."""
        prior = await self._prior(command)
        if prior.answer is not None:
            return prior.answer
        run = prior.run
        async with self.materializer.fence(None) as conn, \
                self.turns.lock(run.session_id, conn):
            turn = await self._plan(run, command, prior.resumed)
            if turn.session.storage_kind == StorageKind.VOLUME:
                await self.driver.ensure_volume(self.turns.volume(run.session_id,
                                                                  run.conversation_id))
            try:
                await self.materializer.materialize(self._order(run, command, turn), conn)
            except TurnRefused as refused:
                raise refused.refusal from None
            except CreateFailed as failed:  # ended by the materializer: its runner's claim
                # is refused before the session takes another turn
                raise Refused(failed.kind, bounded(failed.message)) from None
        return {**turn.view, "created": True}

    async def preview_command(self, command: NewCommand) -> dict[str, Any]:
        """The turn a command would start and its job's plan (or the turn it found)."""
        prior = await self._prior(command)
        if prior.answer is not None:
            return prior.answer
        turn = await self._plan(prior.run, command, prior.resumed)
        return {**turn.view, "runnerJob": msgspec.to_builtins(turn.plan),
                "valuesPrinted": False}

    async def _prior(self, command: NewCommand) -> Prior:
        """The command's run and what its ``commandId`` already did."""
        run = await oq.run_base(self.pool, command.run_id)
        if run is None:
            raise NotFound(f"run {command.run_id} not found", runId=command.run_id)
        found = await oq.turn_by_command(self.pool, command.command_id) \
            if command.command_id else None
        if found is None:
            return Prior(run)
        if found.run_id != command.run_id:
            raise InvalidTransition("commandId already names a command of another run",
                                    commandId=command.command_id)
        if not await self.turns.started(run.session_id, found.runner_job_id):
            return Prior(run, resumed=found.runner_job_id)  # its job maybe not created yet
        return Prior(run, answer={
            "sessionId": run.session_id, "runId": command.run_id,
            "commandId": found.command_id, "runnerJobId": found.runner_job_id,
            "threadId": found.thread_id, "resumed": found.thread_id is not None,
            "created": False})

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
        session = await self.turns.row(run.session_id)  # its tenant's grants apply
        contract = {**base, "payload": payload, "sessionRef": ref,
                    "tenantId": session.tenant_id if session is not None else ""}
        return TaskFacts("", run.backend_profile, command.prompt,
                         base.get("resourceBundleRef"), ref, contract)

    async def _plan(self, run: RunBase, command: NewCommand,
                    resumed: str | None) -> PlannedTurn:
        """Plan the command's turn: refused on a session of another profile, evicted or
        busy (but for the turn ``resumed``), or an assembly that fails."""
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
            plan = await self.planner.plan(facts, ids, command.transient_env, thread)
        except AssemblyFailure as failure:
            raise Refused(failure.kind, failure.message, **failure.details) from None
        view = {"sessionId": session_id, "runId": command.run_id, "commandId": command_id,
                "runnerJobId": ids.runner_job_id, "threadId": thread,
                "resumed": thread is not None}
        return PlannedTurn(view, facts, plan, ids, thread, session)

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
