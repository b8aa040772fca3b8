"""Session projections: the session list row, one row per turn, and per-reader cursors.

Folded from the session streams only; the queue's projections never read them and these
never read the queue's.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec

from ledger import events as ev
from ledger.session import STREAM_TYPE as SESSION_STREAM
from ledger.states import SessionStatus, StorageKind, TurnStatus, session_status_after
from ledger.streams import RecordedEntry
from projections.projection import Fold, Projection, Rows


class SessionRow(msgspec.Struct, frozen=True):
    """A row of ``session_summary``."""

    session_id: str
    conversation_id: str
    backend_profile: str
    state: SessionStatus
    thread_id: str | None
    storage_kind: StorageKind
    pvc_name: str | None
    pvc_phase: str | None
    storage_size_bytes: int | None
    storage_files_count: int | None
    storage_sha256: str | None
    storage_updated_at: datetime | None
    ttl_seconds: int
    expires_at: datetime
    run_id: str | None
    latest_run_id: str | None
    latest_command_id: str | None
    latest_runner_job_id: str | None
    latest_task_id: str | None
    turns: int
    failure_kind: str | None
    version: int
    change_seq: int
    creator: str
    created_at: datetime
    updated_at: datetime
    tenant_id: str = ""


class TurnRow(msgspec.Struct, frozen=True):
    """A row of ``session_turn``: one command of a run, executed by one runner job."""

    runner_job_id: str
    session_id: str
    run_id: str
    command_id: str
    task_id: str | None
    thread_id: str | None
    status: TurnStatus
    result_thread_id: str | None
    driver: str | None
    handle: str | None
    failure_kind: str | None
    failure_message: str | None
    exit_code: int | None
    prompt_sha256: str
    prompt_bytes: int
    change_seq: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class SessionCursorRow(msgspec.Struct, frozen=True):
    """A row of ``session_read_cursor``."""

    reader_id: str
    session_id: str
    version: int
    change_seq: int


def _expiry(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _opened(event: ev.SessionOpened, entry: RecordedEntry) -> SessionRow:
    return SessionRow(
        session_id=event.session_id, conversation_id=event.conversation_id,
        backend_profile=event.backend_profile, state=SessionStatus.IDLE, thread_id=None,
        storage_kind=event.storage_kind, pvc_name=event.pvc_name, pvc_phase=None,
        storage_size_bytes=None, storage_files_count=None, storage_sha256=None,
        storage_updated_at=None, ttl_seconds=event.ttl_seconds,
        expires_at=_expiry(event.expires_at), run_id=event.run_id, latest_run_id=event.run_id,
        latest_command_id=None, latest_runner_job_id=None, latest_task_id=None, turns=0,
        failure_kind=None, version=1, change_seq=entry.change_seq, creator=event.creator,
        created_at=entry.recorded_at, updated_at=entry.recorded_at, tenant_id=event.tenant_id)


def _turn_reserved(event: ev.SessionTurnReserved, entry: RecordedEntry) -> TurnRow:
    return TurnRow(
        runner_job_id=event.runner_job_id, session_id=entry.stream_id, run_id=event.run_id,
        command_id=event.command_id, task_id=event.task_id, thread_id=event.thread_id,
        status=TurnStatus.RESERVED, result_thread_id=None, driver=None, handle=None,
        failure_kind=None, failure_message=None, exit_code=None, prompt_sha256=event.prompt_sha256,
        prompt_bytes=event.prompt_bytes, change_seq=entry.change_seq,
        created_at=entry.recorded_at, started_at=None, finished_at=None)


def evolve_session(row: SessionRow, entry: RecordedEntry) -> SessionRow:
    """Fold one entry (after ``session-opened``) into the session row."""
    event = entry.event
    changes: dict[str, Any] = {"version": row.version + 1, "change_seq": entry.change_seq,
                               "updated_at": entry.recorded_at}
    if isinstance(event, ev.SessionTurnReserved):
        changes.update(state=SessionStatus.RUNNING, latest_run_id=event.run_id,
                       latest_command_id=event.command_id,
                       latest_runner_job_id=event.runner_job_id, latest_task_id=event.task_id,
                       turns=row.turns + 1, failure_kind=None,
                       expires_at=_expiry(event.expires_at))
    elif isinstance(event, ev.SessionTurnFinished):
        changes.update(state=session_status_after(event.status),
                       failure_kind=event.failure_kind, thread_id=event.thread_id or row.thread_id)
    elif isinstance(event, ev.SessionStorageRefreshed):
        changes.update(pvc_name=event.pvc_name or row.pvc_name, pvc_phase=event.pvc_phase,
                       storage_size_bytes=event.size_bytes,
                       storage_files_count=event.files_count, storage_sha256=event.sha256,
                       storage_updated_at=_expiry(event.updated_at))
    elif isinstance(event, ev.SessionEvicted):
        changes.update(state=SessionStatus.EVICTED, storage_kind=StorageKind.EVICTED,
                       pvc_phase=None)
    elif not isinstance(event, ev.SessionTurnStarted | ev.SessionCancelled):
        raise AssertionError(f"unexpected session event {type(event).__name__}")
    return msgspec.structs.replace(row, **changes)


def evolve_turn(turn: TurnRow, entry: RecordedEntry) -> TurnRow:
    """Fold a started or finished event into its turn row."""
    event = entry.event
    if isinstance(event, ev.SessionTurnStarted):
        return msgspec.structs.replace(turn, status=TurnStatus.RUNNING, driver=event.driver,
                                       handle=event.handle, started_at=entry.recorded_at,
                                       change_seq=entry.change_seq)
    assert isinstance(event, ev.SessionTurnFinished)
    return msgspec.structs.replace(
        turn, status=event.status, result_thread_id=event.thread_id,
        failure_kind=event.failure_kind, failure_message=event.failure_message,
        exit_code=event.exit_code, finished_at=entry.recorded_at, change_seq=entry.change_seq)


def turn_id_of(entry: RecordedEntry) -> str | None:
    """The runner job id of the turn an entry changes, if any."""
    event = entry.event
    if isinstance(event, ev.SessionTurnReserved | ev.SessionTurnStarted | ev.SessionTurnFinished):
        return str(event.runner_job_id)
    return None


def expires_after(now: datetime, ttl_seconds: int) -> str:
    """The ISO expiry ``ttl_seconds`` after ``now``."""
    return (now + timedelta(seconds=ttl_seconds)).isoformat()


def _session_key(entry: RecordedEntry, _rows: Rows) -> str | None:
    return None if type(entry.event) is ev.SessionRead else entry.stream_id


def _session(row: SessionRow | None, entry: RecordedEntry) -> SessionRow | None:
    event = entry.event
    if isinstance(event, ev.SessionOpened):
        return _opened(event, entry)
    return None if row is None else evolve_session(row, entry)


def _turn_key(entry: RecordedEntry, _rows: Rows) -> str | None:
    return turn_id_of(entry)


def _turn(turn: TurnRow | None, entry: RecordedEntry) -> TurnRow | None:
    event = entry.event
    if isinstance(event, ev.SessionTurnReserved):
        return _turn_reserved(event, entry)
    return None if turn is None else evolve_turn(turn, entry)


def _cursor_key(entry: RecordedEntry, _rows: Rows) -> tuple[str, str]:
    event = entry.event
    assert isinstance(event, ev.SessionRead)
    return (event.reader_id, entry.stream_id)


def _cursor(_row: SessionCursorRow | None, entry: RecordedEntry) -> SessionCursorRow:
    event = entry.event
    assert isinstance(event, ev.SessionRead)
    return SessionCursorRow(event.reader_id, entry.stream_id, event.version, entry.change_seq)


_READ = frozenset({ev.SessionRead})
SESSIONS = Projection("session_summary", SessionRow, key=("session_id",), origin=Fold(
    SESSION_STREAM, _session_key, _session, created_by=frozenset({ev.SessionOpened})))
TURNS = Projection("session_turn", TurnRow, key=("runner_job_id",), origin=Fold(
    SESSION_STREAM, _turn_key, _turn, events=frozenset(
        {ev.SessionTurnReserved, ev.SessionTurnStarted, ev.SessionTurnFinished}),
    created_by=frozenset({ev.SessionTurnReserved})))
SESSION_CURSORS = Projection("session_read_cursor", SessionCursorRow,
                             key=("reader_id", "session_id"), origin=Fold(
                                 SESSION_STREAM, _cursor_key, _cursor, events=_READ,
                                 created_by=_READ))
PROJECTIONS = (SESSIONS, TURNS, SESSION_CURSORS)
