"""The session stream: a session's identity, its turns (commands of runs), storage and readers.

A session volume has a single writer, so a session runs at most one turn at a time. A turn
is reserved (identities fixed) before its runner job exists, like an attempt. Every record
command is idempotent, so a crashed or concurrent caller can replay it safely.
"""

from __future__ import annotations

import msgspec

from ledger import events as ev
from ledger.addressed import Addressed
from ledger.errors import InvalidTransition, NotFound, SessionStoreEvicted
from ledger.states import ACTIVE_TURNS, StorageKind, TurnStatus

STREAM_TYPE = "session"


class _OnSession(msgspec.Struct, Addressed, frozen=True):
    session_id: str


class OpenSession(ev.SessionFacts, Addressed, frozen=True):
    """Create the session, or find it (same profile only)."""


class ReserveTurn(_OnSession, frozen=True):
    """Fix a turn's run, command, runner job and thread before the job exists."""

    turn: ev.TurnFacts
    backend_profile: str | None = None
    """The profile the turn runs under, when the caller checks it (a switch is refused)."""


class StartTurn(_OnSession, frozen=True):
    """The turn's runner job was created (or adopted)."""

    runner_job_id: str
    driver: str
    handle: str


class FinishTurn(_OnSession, frozen=True):
    """The turn ended (or could not start: then the decision state forgets it, so the same
    runner job may be reserved again when its attempt is resumed)."""

    end: ev.TurnEnd


class RefreshStorage(_OnSession, frozen=True):
    """Record the runner's volume summary."""

    summary: ev.VolumeSummary


class EvictSession(_OnSession, frozen=True):
    """The volume is gone (GC): mark the storage evicted."""

    reason: str


class CancelSession(_OnSession, frozen=True):
    """Cancel the active turn (conversation control)."""

    reason: str | None = None


class MarkSessionRead(_OnSession, frozen=True):
    """Advance a reader's cursor to the session's current version."""

    reader_id: str


SessionCommand = (OpenSession | ReserveTurn | StartTurn | FinishTurn | RefreshStorage
                  | EvictSession | CancelSession | MarkSessionRead)


class SessionState(msgspec.Struct, frozen=True):
    """What ``decide`` needs to know about a session."""

    session_id: str
    backend_profile: str
    storage_kind: StorageKind
    version: int
    thread_id: str | None = None
    turns: dict[str, str] = {}
    """runner job id -> turn status (turns that ended without starting are left out)."""
    cursors: dict[str, int] = {}

    def active_turn(self) -> str | None:
        """The runner job id of the turn in progress, if any."""
        return next((job for job, status in self.turns.items() if status in ACTIVE_TURNS),
                    None)


def profile_mismatch(session_id: str, owner: str, wanted: str) -> InvalidTransition:
    """The refusal for using a session under another profile."""
    return InvalidTransition(
        f"session {session_id} belongs to {owner}; a profile switch never reuses another "
        "profile's session", sessionId=session_id, backendProfile=owner)


def decide(state: SessionState | None, command: SessionCommand) -> list[ev.SessionEvent]:
    """Events for a session command, or a refusal."""
    if isinstance(command, OpenSession):
        return _open(state, command)
    if state is None:
        raise NotFound(f"session {command.session_id} not found", sessionId=command.session_id)
    if isinstance(command, ReserveTurn):
        return _reserve(state, command)
    if isinstance(command, StartTurn):
        if state.turns.get(command.runner_job_id) != TurnStatus.RESERVED:
            return []
        return [ev.SessionTurnStarted(command.runner_job_id, command.driver, command.handle)]
    if isinstance(command, FinishTurn):
        if state.turns.get(command.end.runner_job_id) not in ACTIVE_TURNS:
            return []
        return [ev.SessionTurnFinished(**msgspec.structs.asdict(command.end))]
    if isinstance(command, RefreshStorage):
        if state.storage_kind == StorageKind.EVICTED:
            return []
        return [ev.SessionStorageRefreshed(**msgspec.structs.asdict(command.summary))]
    if isinstance(command, EvictSession):
        if state.storage_kind == StorageKind.EVICTED:
            return []
        if state.active_turn() is not None:
            raise InvalidTransition("the session has a turn in progress",
                                    sessionId=state.session_id)
        return [ev.SessionEvicted(command.reason)]
    if isinstance(command, CancelSession):
        if state.active_turn() is None:
            raise InvalidTransition("the session has no turn in progress to cancel",
                                    sessionId=state.session_id)
        return [ev.SessionCancelled(command.reason)]
    if state.cursors.get(command.reader_id, 0) >= state.version:
        return []
    return [ev.SessionRead(command.reader_id, state.version)]


def _open(state: SessionState | None, command: OpenSession) -> list[ev.SessionEvent]:
    if state is not None:
        if state.backend_profile != command.backend_profile:
            raise profile_mismatch(state.session_id, state.backend_profile,
                                   command.backend_profile)
        return []
    return [ev.SessionOpened(**msgspec.structs.asdict(command))]


def refuse_new_turn(state: SessionState, backend_profile: str | None = None,
                    runner_job_id: str | None = None) -> None:
    """Raise why a turn may not start in the session: it belongs to another profile, its
    volume was evicted, or another turn than ``runner_job_id``'s is in progress."""
    if backend_profile is not None and state.backend_profile != backend_profile:
        raise profile_mismatch(state.session_id, state.backend_profile, backend_profile)
    if state.storage_kind == StorageKind.EVICTED:
        raise SessionStoreEvicted(f"session {state.session_id} was evicted: its volume is gone",
                                  sessionId=state.session_id)
    active = state.active_turn()
    if active is not None and active != runner_job_id:
        raise InvalidTransition("the session already has a turn in progress (a session "
                                "volume has a single writer)", sessionId=state.session_id,
                                runnerJobId=active)


def _reserve(state: SessionState, command: ReserveTurn) -> list[ev.SessionEvent]:
    if command.turn.runner_job_id in state.turns:
        return []
    refuse_new_turn(state, command.backend_profile)
    return [ev.SessionTurnReserved(**msgspec.structs.asdict(command.turn))]


def evolve(state: SessionState | None, event: ev.SessionEvent) -> SessionState:
    """Fold one session event."""
    if isinstance(event, ev.SessionOpened):
        return SessionState(event.session_id, event.backend_profile, event.storage_kind, 1)
    assert state is not None, "event before session-opened"
    if isinstance(event, ev.SessionRead):
        return msgspec.structs.replace(state, cursors={**state.cursors,
                                                       event.reader_id: event.version})
    state = msgspec.structs.replace(state, version=state.version + 1)
    if isinstance(event, ev.SessionTurnReserved):
        return msgspec.structs.replace(state, turns={**state.turns,
                                                     event.runner_job_id: TurnStatus.RESERVED})
    if isinstance(event, ev.SessionTurnStarted):
        return msgspec.structs.replace(state, turns={**state.turns,
                                                     event.runner_job_id: TurnStatus.RUNNING})
    if isinstance(event, ev.SessionTurnFinished):
        turns = {**state.turns, event.runner_job_id: event.status}
        if state.turns.get(event.runner_job_id) == TurnStatus.RESERVED:
            del turns[event.runner_job_id]  # it never started: its job may be reserved again
        return msgspec.structs.replace(state, thread_id=event.thread_id or state.thread_id,
                                       turns=turns)
    if isinstance(event, ev.SessionEvicted):
        return msgspec.structs.replace(state, storage_kind=StorageKind.EVICTED)
    return state
