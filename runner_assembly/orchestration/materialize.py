"""The one place a runner job comes to exist.

A job is created in a session turn: the turn is reserved (with the job's token, and with
whatever the caller records alongside: the run, the session) before the job exists; then the
driver creates the job (adopting one of the same name); a create that fails ends the job's
token and gives the turn up unless the caller keeps it; a created job starts its turn (with
whatever the caller records alongside: the run's job, the attempt). Dispatch, retry, the
runner-job API and session turns all go through :meth:`JobMaterializer.materialize`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import asyncpg

from ledger.database import DbConnection, advisory_lock
from ledger.errors import DomainError
from ledger.session import ReserveTurn, StartTurn
from ledger.streams import Command
from ledger.writer import Outcome, Writer
from projections import orchestration_queries as oq
from runner_assembly.drivers import faults
from runner_assembly.drivers.protocol import DriverError, JobHandle, JobSpec, RunnerDriver
from runner_assembly.orchestration.facts import bounded
from runner_assembly.orchestration.runner_protocol import RunnerProtocol, new_token
from runner_assembly.orchestration.session_turns import SessionTurns
from runner_assembly.settings import RunnerSettings

log = logging.getLogger(__name__)


class CapacityExhausted(Exception):
    """The namespace has no free runner slot (``SVC_RUNNER_RETENTION``)."""

    def __init__(self) -> None:
        super().__init__("runner capacity of the namespace is exhausted")


class TurnRefused(Exception):
    """The ledger refused what is recorded before the job exists (the session refused the
    turn): nothing of the job was created."""

    def __init__(self, refusal: DomainError) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class CreateFailed(Exception):
    """The driver could not create the job (it may exist all the same)."""

    def __init__(self, error: DriverError) -> None:
        super().__init__(error.message)
        self.kind = error.kind
        self.message = error.message


def _never(_: str) -> bool:
    return False


def _nothing(_: JobHandle) -> Sequence[Command]:
    return ()


@dataclass(frozen=True)
class JobOrder:
    """One runner job to bring into existence in a reserved session turn."""

    spec: JobSpec
    """What the driver creates, without its token (:meth:`JobMaterializer.materialize`
    issues one and adds it)."""
    turn: ReserveTurn
    actor: str
    task_id: str = ""
    attempt_id: str = ""
    prelude: Sequence[Command] = ()
    """Recorded with the reservation, before it (the run, the session it opens)."""
    volume: dict[str, object] | None = None
    """The session volume to create once the prelude recorded its session."""
    tenant_id: str | None = None
    """The tenant whose cap of live sessions the prelude's session counts toward, if it
    opens one that counts (``SVC_MAX_SESSIONS_PER_TENANT``)."""
    takes_capacity: bool = False
    """Take a slot of the namespace's capacity before the turn is reserved."""
    keeps_turn: Callable[[str], bool] = _never
    """Whether a create that failed with this failure kind keeps its turn (and token)
    reserved, for a later call to adopt the job."""
    recorded: Callable[[JobHandle], Sequence[Command]] = _nothing
    """Recorded with the turn's start, before it (the run's job)."""
    then: Sequence[Command] = field(default=())
    """Recorded with the turn's start, after it (the attempt's materialisation)."""


@dataclass(eq=False)
class JobMaterializer:
    """Reserves, creates, cleans up after and starts runner jobs."""

    fence_pool: asyncpg.Pool
    writer: Writer
    driver: RunnerDriver
    protocol: RunnerProtocol
    turns: SessionTurns
    settings: RunnerSettings

    @asynccontextmanager
    async def fence(self, scope: str | None) -> AsyncIterator[DbConnection]:
        """A fence connection, holding ``scope``'s advisory lock (None: no lock); with
        retention, a scope is the namespace: its jobs are created one at a time."""
        if scope is not None and self.settings.retention:
            scope = f"namespace/{self.settings.namespace}"
        async with self.fence_pool.acquire() as conn:
            if scope is None:
                yield conn
                return
            async with advisory_lock(conn, scope):
                yield conn

    async def materialize(self, order: JobOrder, conn: DbConnection) -> list[Outcome]:
        """Reserve the turn, create the job, start the turn: the outcomes of the start's
        commands. Raises :class:`TurnRefused`, :class:`CapacityExhausted`, or
        :class:`CreateFailed` (after ending the job unless the order keeps it)."""
        token, issue = new_token(order.spec.runner_job_id, session_id=order.turn.session_id,
                                 run_id=order.spec.job.run_id, task_id=order.task_id,
                                 attempt_id=order.attempt_id)
        try:
            reserved = await self._reserve(order, [order.turn, issue], conn)
        except DomainError as refusal:
            raise TurnRefused(refusal) from refusal
        if reserved:  # a turn reserved now (not resumed): its job does not exist yet
            faults.crash_after_reserve(self.settings.faults)
        spec = dataclasses.replace(order.spec, runner_token=token)
        log.debug("creating runner job %s: plan %s", spec.runner_job_id, spec.job.plan)
        try:
            handle = await self.driver.create(spec)
        except DriverError as error:  # the job may exist all the same: ended first, a
            # runner the create started is refused its claim; its turn is given up
            if not order.keeps_turn(error.kind):
                await self.protocol.end(spec.runner_job_id, error.kind)
                await self.turns.abandon_turn(order.turn.session_id, spec.runner_job_id,
                                              error.kind, bounded(error.message))
            raise CreateFailed(error) from error
        faults.crash_at(self.settings.faults, "crash-after-create")
        start = StartTurn(order.turn.session_id, spec.runner_job_id, handle.driver,
                          handle.handle)
        return await self.writer.execute_all(
            [*order.recorded(handle), start, *order.then], order.actor)

    async def _reserve(self, order: JobOrder, reservation: list[Command],
                       conn: DbConnection) -> bool:
        """Record the prelude and the reservation (one transaction unless a capacity slot
        must be taken between them); the session volume exists afterwards. Whether the
        turn was reserved now (False: a replay found it reserved)."""
        together = not order.takes_capacity
        first = [*order.prelude, *reservation] if together else list(order.prelude)
        async with self.turns.cap.opening(order.tenant_id, order.turn.session_id, conn):
            outcomes = await self.writer.execute_all(first, order.actor) if first else []
        if order.volume is not None:
            await self.driver.ensure_volume(order.volume)
        if not together:
            if not await self._take_capacity(conn):
                raise CapacityExhausted()
            outcomes = await self.writer.execute_all(reservation, order.actor)
        turn, _token = outcomes[-2:]  # the reservation is [turn, token], recorded last
        return bool(turn.events)

    async def _take_capacity(self, conn: DbConnection) -> bool:
        """Compare-and-swap one slot of the namespace's capacity, reclaiming finished jobs."""
        namespace = self.settings.namespace
        await oq.ensure_capacity(conn, namespace, self.settings.retention_capacity)
        for _ in range(2):
            if await oq.take_capacity(conn, namespace):
                return True
            await oq.reclaim_capacity(conn, namespace)
        return False
