"""The manager's side of a session turn: open the session and its volume, choose the thread,
record the turn around its runner job, take in its output and trace, finish it.

A session volume has one writer: starting a turn and removing a volume (GC) hold the
session's advisory lock, so they never overlap.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

import asyncpg
import msgspec

from ledger import store
from ledger.database import DbConnection, advisory_lock
from ledger.events import TurnEnd, TurnFacts, VolumeSummary
from ledger.session import (
    FinishTurn,
    OpenSession,
    RefreshStorage,
    ReserveTurn,
    SessionState,
    refuse_new_turn,
)
from ledger.states import JobState, StorageKind, TurnStatus, turn_status_of
from ledger.streams import SESSION_STREAM, StreamKind
from ledger.writer import Writer
from projections import orchestration_queries as oq
from projections.session_summary import SessionRow, expires_after
from runner_assembly.assembly.resolve import Resolver
from runner_assembly.drivers.protocol import JobStatus, RunnerDriver
from runner_assembly.orchestration.session_cap import SessionCap
from runner_assembly.settings import RunnerSettings

ACTOR = "session-layer"


async def folded(pool: asyncpg.Pool, kind: StreamKind, stream_id: str) -> Any:
    """The decision state of one stream, folded from its ledger entries (None: no stream,
    or a stream of another type under that id: a session named like a runner job)."""
    async with pool.acquire() as conn:
        entries = (await store.read_streams(conn, [stream_id])).get(stream_id, [])
    if any(entry.stream_type != kind.stream_type for entry in entries):
        return None
    state: Any = None
    for entry in entries:
        state = kind.evolve(state, entry.event)
    return state


def choose_thread(payload_thread: object, ref_thread: object, session_thread: str | None,
                  persistent: bool) -> str | None:
    """SPEC 9: the command's ``payload.threadId``, else ``sessionRef.threadId``, else the
    session's recorded thread; without a session volume every turn starts a new thread."""
    if not persistent:
        return None
    for candidate in (payload_thread, ref_thread, session_thread):
        if isinstance(candidate, str) and candidate:
            return candidate
    return None


@dataclass(eq=False)
class SessionTurns:
    """Session bookkeeping around runner jobs."""

    pool: asyncpg.Pool
    fence_pool: asyncpg.Pool
    writer: Writer
    driver: RunnerDriver
    settings: RunnerSettings
    resolver: Resolver

    @asynccontextmanager
    async def lock(self, session_id: str,
                   conn: DbConnection | None = None) -> AsyncIterator[None]:
        """Hold the session's advisory lock (turn start and volume removal), on ``conn``
        when the caller already holds a fence connection (never a second one: a pool of
        fence waiters would deadlock)."""
        if conn is None:
            async with self.fence_pool.acquire() as own, self.lock(session_id, own):
                yield
            return
        async with advisory_lock(conn, f"session/{session_id}"):
            yield

    @cached_property
    def cap(self) -> SessionCap:
        """The per-tenant cap of live sessions (``SVC_MAX_SESSIONS_PER_TENANT``)."""
        return SessionCap(self.pool, self.fence_pool, self.settings.max_sessions_per_tenant)

    async def row(self, session_id: str) -> SessionRow | None:
        """The session's summary row, if it exists."""
        return await oq.session_state(self.pool, session_id)

    def volume(self, session_id: str, conversation_id: str) -> dict[str, object]:
        """The session volume as a plan shows it (``sessionVolume``)."""
        volume = self.resolver.session_volume({"sessionId": session_id,
                                               "conversationId": conversation_id})
        assert volume is not None
        return dict(msgspec.to_builtins(volume))

    async def state(self, session_id: str) -> SessionState | None:
        """The session's decision state, from its ledger stream."""
        state: SessionState | None = await folded(self.pool, SESSION_STREAM, session_id)
        return state

    async def started(self, session_id: str, runner_job_id: str) -> bool:
        """Whether the session stream records the turn of ``runner_job_id`` as started."""
        state = await self.state(session_id)
        status = state.turns.get(runner_job_id) if state is not None else None
        return status is not None and status != TurnStatus.RESERVED

    async def check_usable(self, session_id: str, profile: str,
                           runner_job_id: str | None = None) -> SessionRow | None:
        """Refuse a session of another profile, an evicted one, or one running another turn
        than ``runner_job_id``'s (decided on the session stream); the session's row."""
        state = await self.state(session_id)
        if state is None:
            return None
        refuse_new_turn(state, profile, runner_job_id)
        return await self.row(session_id)

    def open_command(self, session_id: str, conversation_id: str, profile: str, *,
                     persistent: bool, run_id: str | None = None,
                     tenant_id: str = "") -> OpenSession:
        """The command that creates the session (a no-op when it exists), of ``tenant_id``."""
        ttl = self.settings.session_ttl_s
        volume = self.volume(session_id, conversation_id) if persistent else None
        return OpenSession(
            session_id=session_id, conversation_id=conversation_id, backend_profile=profile,
            storage_kind=StorageKind.VOLUME if persistent else StorageKind.NONE,
            pvc_name=str(volume["pvcName"]) if volume else None, ttl_seconds=ttl,
            expires_at=expires_after(datetime.now(UTC), ttl), creator=ACTOR, run_id=run_id,
            tenant_id=tenant_id)

    async def ensure_volume(self, session_id: str, conversation_id: str,
                            storage_kind: StorageKind) -> None:
        """Create the session's volume if the session keeps one (after it is recorded)."""
        if storage_kind == StorageKind.VOLUME:
            await self.driver.ensure_volume(self.volume(session_id, conversation_id))

    async def open(self, session_id: str, conversation_id: str, profile: str, *,
                   persistent: bool, run_id: str | None = None) -> SessionRow:
        """Create the session (and its volume) or find it; the volume exists afterwards."""
        await self.writer.execute(self.open_command(
            session_id, conversation_id, profile, persistent=persistent, run_id=run_id), ACTOR)
        row = await self.row(session_id)
        assert row is not None
        await self.ensure_volume(session_id, row.conversation_id, row.storage_kind)
        return row

    def reserve_command(self, session_id: str, row: SessionRow | None, *, run_id: str,
                        command_id: str, runner_job_id: str, thread_id: str | None,
                        task_id: str | None, prompt: str, profile: str) -> ReserveTurn:
        """The command that reserves a turn; ``row`` is the session's row (None: the session
        is being opened with the default TTL)."""
        ttl = row.ttl_seconds if row else self.settings.session_ttl_s
        encoded = prompt.encode()
        return ReserveTurn(session_id, TurnFacts(
            run_id=run_id, command_id=command_id, runner_job_id=runner_job_id,
            thread_id=thread_id, expires_at=expires_after(datetime.now(UTC), ttl),
            task_id=task_id, prompt_sha256=hashlib.sha256(encoded).hexdigest(),
            prompt_bytes=len(encoded)), profile)

    async def abandon_turn(self, session_id: str, runner_job_id: str, failure_kind: str,
                           failure_message: str) -> None:
        """End a reserved turn whose runner job could not be created."""
        await self.writer.execute(FinishTurn(session_id, TurnEnd(
            runner_job_id, TurnStatus.FAILED, failure_kind=failure_kind,
            failure_message=failure_message)), ACTOR)

    async def finish(self, session_id: str, runner_job_id: str, status: JobStatus) -> None:
        """Record the end of the job's turn (its lines and volume summary came from its
        runner through the runner protocol); the session's thread changes only with a
        completed turn that reported one."""
        thread_id = status.thread_id if status.state == JobState.COMPLETED else None
        await self.writer.execute(FinishTurn(session_id, TurnEnd(
            runner_job_id, turn_status_of(status.state), thread_id,
            status.failure_kind, status.failure_message, status.exit_code)), ACTOR)

    async def refresh_storage(self, session_id: str, summary: dict[str, Any]) -> None:
        """Record a runner-written volume summary."""
        await self.writer.execute(RefreshStorage(session_id, VolumeSummary(
            pvc_name=summary.get("pvcName"), pvc_phase=summary.get("pvcPhase"),
            size_bytes=int(summary["storageSizeBytes"]),
            files_count=int(summary["storageFilesCount"]),
            sha256=str(summary["storageSha256"]),
            updated_at=str(summary.get("storageUpdatedAt")
                           or datetime.now(UTC).isoformat()))), ACTOR)
