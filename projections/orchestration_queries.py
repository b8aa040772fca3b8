"""Typed queries of the orchestration layer: task facts, attempts, capacity, session turns."""

from __future__ import annotations

from datetime import datetime

import msgspec

from ledger.database import Queryable
from ledger.events import EVENT_TYPES, JobEnded, JobExited
from ledger.sqlfile import load_queries
from ledger.states import (
    ACTIVE_TURNS,
    AttemptStatus,
    RunStatus,
    SessionStatus,
    StorageKind,
    TurnStatus,
)
from projections.queries import RowDecoder
from projections.rows import JsonObject
from projections.session_summary import SessionRow

DISPATCH_SQL = load_queries("projections", "dispatch.sql")
TURNS_SQL = load_queries("projections", "session_turns.sql")


class TaskFactsRow(msgspec.Struct, frozen=True):
    """A task's backend profile and submitted contract."""

    backend_profile: str | None
    contract: JsonObject


class JobIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """The ids and profile a runner job is created under."""

    run_id: str
    runner_job_id: str
    session_id: str
    backend_profile: str


class AttemptIdentity(JobIdentity, frozen=True, kw_only=True):
    """A reserved attempt's run, command, job and session, and its state."""

    command_id: str
    state: AttemptStatus


class LatestAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """The latest attempt of a task."""

    attempt_id: str
    run_id: str
    runner_job_id: str
    state: AttemptStatus
    session_id: str


class ActiveTurn(msgspec.Struct, frozen=True, kw_only=True):
    """A turn that is reserved or running."""

    runner_job_id: str
    run_id: str
    task_id: str | None
    status: TurnStatus


class RunningTurn(msgspec.Struct, frozen=True, kw_only=True):
    """A started turn of a running session, and whether its job is quiet (its lease fresh,
    held by a live token, no exit or end recorded): then only its driver has news."""

    session_id: str
    runner_job_id: str | None
    """None: the session has no started turn (one is reserved: its job is being created)."""
    change_seq: int
    """The session's: where the next page of running sessions starts."""
    quiet: bool


class CommandTurn(msgspec.Struct, frozen=True, kw_only=True):
    """The turn a command id started."""

    runner_job_id: str
    session_id: str
    run_id: str
    command_id: str
    thread_id: str | None
    status: TurnStatus


class ExpiredSession(msgspec.Struct, frozen=True, kw_only=True):
    """A session whose volume has outlived its time to live."""

    session_id: str
    conversation_id: str
    pvc_name: str | None


class RunBase(msgspec.Struct, frozen=True, kw_only=True):
    """A run's identity and the base its commands execute with."""

    run_id: str
    task_id: str
    attempt_id: str
    session_id: str
    conversation_id: str
    backend_profile: str
    base: JsonObject | None


_TASK_FACTS = RowDecoder(TaskFactsRow, ("contract",))
_ATTEMPTS = RowDecoder(AttemptIdentity)
_LATEST = RowDecoder(LatestAttempt)
_SESSIONS = RowDecoder(SessionRow)
_ACTIVE = RowDecoder(ActiveTurn)
_COMMAND_TURNS = RowDecoder(CommandTurn)
_RUNNING = RowDecoder(RunningTurn)
_EXPIRED = RowDecoder(ExpiredSession)
_RUNS = RowDecoder(RunBase, ("base",))


async def task_facts(db: Queryable, task_id: str) -> TaskFactsRow | None:
    """A task's profile and contract, or None."""
    return _TASK_FACTS.maybe(await db.fetchrow(DISPATCH_SQL["task_facts"], task_id))


async def attempt_identity(db: Queryable, task_id: str,
                           attempt_id: str) -> AttemptIdentity | None:
    """A task's attempt: its ids, profile and state, or None."""
    return _ATTEMPTS.maybe(await db.fetchrow(DISPATCH_SQL["attempt_row"], task_id, attempt_id))


async def attempt_state(db: Queryable, task_id: str, attempt_id: str) -> AttemptStatus | None:
    """A task's attempt's state, or None."""
    state: str | None = await db.fetchval(DISPATCH_SQL["attempt_state"], task_id, attempt_id)
    return None if state is None else AttemptStatus(state)


async def latest_attempt(db: Queryable, task_id: str) -> LatestAttempt | None:
    """The latest attempt of a task, or None."""
    return _LATEST.maybe(await db.fetchrow(DISPATCH_SQL["latest_attempt_of_task"], task_id))


async def ensure_capacity(db: Queryable, namespace: str, max_jobs: int) -> None:
    """Create the namespace's capacity row with ``max_jobs`` slots unless it exists."""
    await db.execute(DISPATCH_SQL["ensure_capacity"], namespace, max_jobs)


async def take_capacity(db: Queryable, namespace: str) -> bool:
    """Take one free slot of the namespace's capacity; False when none is free."""
    return await db.fetchval(DISPATCH_SQL["take_capacity"], namespace) is not None


async def reclaim_capacity(db: Queryable, namespace: str) -> None:
    """Set the namespace's used slots to its running jobs, unless they changed meanwhile."""
    seen: int | None = await db.fetchval(DISPATCH_SQL["capacity_seen"], namespace)
    live: int = await db.fetchval(DISPATCH_SQL["running_jobs"], RunStatus.RUNNING)
    await db.execute(DISPATCH_SQL["reclaim_capacity"], namespace, live, seen)


async def session_of_job(db: Queryable, runner_job_id: str) -> str | None:
    """The session whose turn a runner job runs, or None."""
    session_id: str | None = await db.fetchval(DISPATCH_SQL["session_of_job"], runner_job_id)
    return session_id


async def session_state(db: Queryable, session_id: str) -> SessionRow | None:
    """A session's summary row, or None."""
    return _SESSIONS.maybe(await db.fetchrow(TURNS_SQL["session_row"], session_id))


async def active_turns(db: Queryable, session_id: str) -> list[ActiveTurn]:
    """The session's reserved or running turns."""
    return _ACTIVE.many(await db.fetch(TURNS_SQL["active_turns"], session_id,
                                       sorted(ACTIVE_TURNS)))


async def live_sessions(db: Queryable, tenant_id: str) -> int:
    """How many sessions of the tenant keep a volume (not evicted)."""
    return int(await db.fetchval(TURNS_SQL["live_sessions_of_tenant"], tenant_id,
                                 StorageKind.VOLUME))


async def running_sessions(db: Queryable, limit: int) -> list[str]:
    """Ids of running sessions, oldest change first."""
    return [r["session_id"] for r in await db.fetch(TURNS_SQL["running_sessions"], limit,
                                                   SessionStatus.RUNNING)]


async def running_turns(db: Queryable, limit: int, renewed_since: datetime,
                        after_seq: int = 0) -> list[RunningTurn]:
    """The started turns of the first ``limit`` running sessions changed after ``after_seq``
    (in the order of :func:`running_sessions`: a page; a session with none is a turn with no
    job), each with whether its job is quiet: its lease renewed at or after
    ``renewed_since`` by the token it holds, no exit or end recorded."""
    return _RUNNING.many(await db.fetch(
        TURNS_SQL["running_turns"], limit, SessionStatus.RUNNING, renewed_since,
        [EVENT_TYPES[JobExited], EVENT_TYPES[JobEnded]],
        TurnStatus.RUNNING, after_seq))


async def latest_turn_job(db: Queryable, session_id: str) -> str | None:
    """The runner job of the session's newest turn, or None."""
    record = await db.fetchrow(TURNS_SQL["latest_turn"], session_id)
    return None if record is None else str(record["runner_job_id"])


async def turn_by_command(db: Queryable, command_id: str) -> CommandTurn | None:
    """The turn a command id started, or None."""
    return _COMMAND_TURNS.maybe(await db.fetchrow(TURNS_SQL["turn_by_command"], command_id))


async def expired_sessions(db: Queryable, moment: datetime, limit: int) -> list[ExpiredSession]:
    """Sessions with a volume that expired before ``moment`` and no turn running."""
    return _EXPIRED.many(await db.fetch(TURNS_SQL["expired_sessions"], moment, limit,
                                        StorageKind.VOLUME, SessionStatus.RUNNING))


async def run_base(db: Queryable, run_id: str) -> RunBase | None:
    """A run's identity and base, or None."""
    return _RUNS.maybe(await db.fetchrow(TURNS_SQL["run_row"], run_id))
