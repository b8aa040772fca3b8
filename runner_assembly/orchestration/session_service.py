"""The session API's manager side: create sessions, follow running turns, cancel, read,
storage summaries and GC of expired volumes (commands added to runs:
:mod:`.session_commands`).

A run the session API created has no task and keeps its run base on the run record.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec

from ledger.errors import InvalidTransition, NotFound
from ledger.ids import new_id
from ledger.run import CreateRun
from ledger.session import CancelSession, EvictSession, MarkSessionRead
from ledger.states import AttemptStatus, FailureKind, JobState, TurnStatus
from ledger.writer import Writer
from projections import orchestration_queries as oq
from runner_assembly.drivers.protocol import JobStatus, RunnerDriver
from runner_assembly.orchestration.facts import TaskReader
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
    tenant_id: str = ""
    """Whose live sessions it counts toward (the caller's; ``""`` without a principal)."""


@dataclass(eq=False)
class SessionService:
    """Session operations behind the session API."""

    pool: asyncpg.Pool
    writer: Writer
    driver: RunnerDriver
    reader: TaskReader
    turns: SessionTurns
    protocol: RunnerProtocol

    async def create(self, request: NewSession) -> str:
        """Create the session, its volume and its run (or find it); its id. A new session
        counts toward its tenant's cap: refused at it (``session-limit-reached``) with
        nothing recorded."""
        session_id = request.session_id or new_id("ses")
        existing = await self.turns.row(session_id)
        if existing is None:
            async with self.turns.cap.opening(request.tenant_id, session_id):
                existing = await self.turns.row(session_id)
                if existing is None:
                    await self._record_new(session_id, request)
        row = existing or await self.turns.row(session_id)
        assert row is not None
        await self.turns.open(session_id, row.conversation_id, request.backend_profile,
                              persistent=True)
        return session_id

    async def _record_new(self, session_id: str, request: NewSession) -> None:
        """Record a new session and its run (its volume comes after)."""
        conversation = request.conversation_id or "cnv_" + session_id.removeprefix("ses_")
        base = request.run_base
        run_id = new_id("run")
        await self.writer.execute_all([CreateRun(
            run_id=run_id, task_id="", attempt_id="", command_id="", runner_job_id="",
            session_id=session_id, conversation_id=conversation,
            backend_profile=request.backend_profile,
            resource_bundle_ref=base.get("resourceBundleRef"), base=base),
            self.turns.open_command(session_id, conversation, request.backend_profile,
                                    persistent=True, run_id=run_id,
                                    tenant_id=request.tenant_id)], ACTOR)

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
        """Follow every running session once (the background loop), a page of
        :data:`SYNC_BATCH` sessions at a time: one query names a page's started turns and
        whether each job is quiet (lease fresh, no exit or end recorded); the driver is asked
        about the page's quiet jobs together (:meth:`RunnerDriver.statuses`: one list for
        Kubernetes), and only a session with a job that is not quiet, or gone, is followed in
        full (:meth:`sync`)."""
        moment = datetime.now(UTC)
        after, followed = 0, set[str]()
        while True:
            turns = await oq.running_turns(self.pool, SYNC_BATCH, moment - self.protocol.lease,
                                           after)
            fresh = [turn for turn in turns if turn.session_id not in followed]
            await self._follow(fresh)
            sessions = {turn.session_id for turn in turns}
            followed |= sessions  # a session that changed meanwhile comes again: once is enough
            if len(sessions) < SYNC_BATCH or not fresh:  # the last page, or only those again
                return
            after = turns[-1].change_seq

    async def _follow(self, turns: list[oq.RunningTurn]) -> None:
        """Follow the sessions of a page whose job is not quiet or is gone."""
        quiet = [turn.runner_job_id for turn in turns if turn.quiet and turn.runner_job_id]
        try:
            seen = await self.driver.statuses(quiet)
        except Exception:  # the driver could not say: ask again next round
            log.exception("asking the driver about %d quiet jobs failed", len(quiet))
            seen = {}
        look: dict[str, None] = {}
        for turn in turns:
            if turn.runner_job_id is None:
                continue
            status = seen.get(turn.runner_job_id)
            if not turn.quiet or (status is not None and status.terminal):
                look[turn.session_id] = None
        for session_id in look:
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
