"""Session ``decide`` without a database: every refusal and every event of each command."""

from __future__ import annotations

import pytest

from ledger import events as ev
from ledger.errors import InvalidTransition, NotFound, SessionStoreEvicted
from ledger.session import (
    CancelSession,
    EvictSession,
    FinishTurn,
    MarkSessionRead,
    OpenSession,
    RefreshStorage,
    ReserveTurn,
    SessionCommand,
    SessionState,
    StartTurn,
    decide,
    evolve,
    refuse_new_turn,
)
from tests.support import decided

SES = "ses_1"
SUMMARY = ev.VolumeSummary("pvc", "Bound", 10, 2, "0" * 64, "2026-01-01T00:00:00+00:00")


def open_command(profile: str = "codex") -> OpenSession:
    """Open the test session under ``profile``."""
    return OpenSession(session_id=SES, conversation_id="cnv_1", backend_profile=profile,
                       storage_kind="volume", pvc_name="pvc", ttl_seconds=60,
                       expires_at="2026-01-01T00:01:00+00:00", creator="test")


def turn(job: str) -> ev.TurnFacts:
    """The facts of a turn run by ``job``."""
    return ev.TurnFacts(run_id="run_1", command_id=f"cmd_{job}", runner_job_id=job,
                        thread_id=None, expires_at="2026-01-01T00:01:00+00:00")


def apply(state: SessionState | None,
          *commands: SessionCommand) -> tuple[SessionState, list[ev.SessionEvent]]:
    """Decide and fold each command; the events of the last."""
    return decided(decide, evolve, state, *commands)


def opened() -> SessionState:
    """An idle session with a volume."""
    return apply(None, open_command())[0]


def reserved(job: str = "job_1") -> SessionState:
    """A session whose turn ``job`` is reserved."""
    return apply(opened(), ReserveTurn(SES, turn(job)))[0]


def running(job: str = "job_1") -> SessionState:
    """A session whose turn ``job`` runs."""
    return apply(reserved(job), StartTurn(SES, job, "local", "h"))[0]


def evicted() -> SessionState:
    """A session whose volume was removed."""
    return apply(opened(), EvictSession(SES, "expired"))[0]


def test_open_creates_the_session_or_finds_it_under_the_same_profile() -> None:
    state, events = apply(None, open_command())
    assert events == [ev.SessionOpened(**{f: getattr(open_command(), f)
                                          for f in ev.SessionOpened.__struct_fields__})]
    assert (state.backend_profile, state.storage_kind, state.version) == ("codex", "volume", 1)
    assert decide(state, open_command()) == []


def test_open_under_another_profile_is_refused() -> None:
    with pytest.raises(InvalidTransition, match="belongs to codex"):
        decide(opened(), open_command("claude"))


@pytest.mark.parametrize("command", [
    ReserveTurn(SES, turn("job_1")), StartTurn(SES, "job_1", "local", "h"),
    FinishTurn(SES, ev.TurnEnd("job_1", "completed")), RefreshStorage(SES, SUMMARY),
    EvictSession(SES, "x"), CancelSession(SES), MarkSessionRead(SES, "r"),
])
def test_commands_on_a_missing_session_are_not_found(command: SessionCommand) -> None:
    with pytest.raises(NotFound):
        decide(None, command)


def test_reserve_records_the_turn_once() -> None:
    state, events = apply(opened(), ReserveTurn(SES, turn("job_1")))
    assert events == [ev.SessionTurnReserved(**{f: getattr(turn("job_1"), f)
                                                for f in ev.TurnFacts.__struct_fields__})]
    assert state.active_turn() == "job_1"
    assert decide(state, ReserveTurn(SES, turn("job_1"))) == []
    assert decide(running(), ReserveTurn(SES, turn("job_1"))) == []


def test_reserve_is_refused_while_another_turn_is_active() -> None:
    for state in (reserved(), running()):
        with pytest.raises(InvalidTransition, match="single writer") as refused:
            decide(state, ReserveTurn(SES, turn("job_2")))
        assert refused.value.details["runnerJobId"] == "job_1"


def test_reserve_in_an_evicted_session_is_refused() -> None:
    with pytest.raises(SessionStoreEvicted):
        decide(evicted(), ReserveTurn(SES, turn("job_1")))


def test_reserve_under_another_profile_is_refused_when_the_profile_is_given() -> None:
    with pytest.raises(InvalidTransition, match="belongs to codex"):
        decide(opened(), ReserveTurn(SES, turn("job_1"), "claude"))
    assert decide(opened(), ReserveTurn(SES, turn("job_1"), "codex"))


def test_the_turn_refusals_are_the_ones_the_orchestration_checks() -> None:
    refuse_new_turn(opened(), "codex")
    refuse_new_turn(running(), "codex", "job_1")  # the caller resumes this very turn
    with pytest.raises(InvalidTransition, match="belongs to codex"):
        refuse_new_turn(evicted(), "claude")  # the profile is checked first
    with pytest.raises(SessionStoreEvicted):
        refuse_new_turn(evicted(), "codex")
    with pytest.raises(InvalidTransition, match="single writer"):
        refuse_new_turn(running(), "codex", "job_2")


def test_start_runs_a_reserved_turn_only() -> None:
    state, events = apply(reserved(), StartTurn(SES, "job_1", "local", "h"))
    assert events == [ev.SessionTurnStarted("job_1", "local", "h")]
    assert state.turns == {"job_1": "running"}
    assert decide(state, StartTurn(SES, "job_1", "local", "h")) == []
    assert decide(opened(), StartTurn(SES, "job_9", "local", "h")) == []


def test_finish_ends_an_active_turn_and_keeps_its_thread() -> None:
    state, events = apply(running(), FinishTurn(SES, ev.TurnEnd(
        "job_1", "completed", "thr_1", None, None, 0)))
    assert events == [ev.SessionTurnFinished("job_1", "completed", "thr_1", None, None, 0)]
    assert (state.turns, state.thread_id, state.active_turn()) == (
        {"job_1": "completed"}, "thr_1", None)
    assert decide(state, FinishTurn(SES, ev.TurnEnd("job_1", "failed"))) == []
    state, _ = apply(state, ReserveTurn(SES, turn("job_2")),
                     StartTurn(SES, "job_2", "local", "h"),
                     FinishTurn(SES, ev.TurnEnd("job_2", "failed")))
    assert state.thread_id == "thr_1"  # a turn without a thread keeps the session's


def test_a_turn_that_never_started_may_be_reserved_again() -> None:
    state, events = apply(reserved(), FinishTurn(SES, ev.TurnEnd("job_1", "failed", None,
                                                                 "infra-failed")))
    assert events == [ev.SessionTurnFinished("job_1", "failed", None, "infra-failed")]
    assert state.turns == {} and state.active_turn() is None
    state, events = apply(state, ReserveTurn(SES, turn("job_1")))
    assert events and state.active_turn() == "job_1"


def test_refresh_records_the_summary_unless_evicted() -> None:
    state, events = apply(opened(), RefreshStorage(SES, SUMMARY))
    assert events == [ev.SessionStorageRefreshed(**{f: getattr(SUMMARY, f)
                                                    for f in ev.VolumeSummary.__struct_fields__})]
    assert state.version == 2
    assert decide(evicted(), RefreshStorage(SES, SUMMARY)) == []


def test_evict_marks_the_storage_once_and_never_under_a_running_turn() -> None:
    state, events = apply(opened(), EvictSession(SES, "expired"))
    assert events == [ev.SessionEvicted("expired")] and state.storage_kind == "evicted"
    assert decide(state, EvictSession(SES, "again")) == []
    for active in (reserved(), running()):
        with pytest.raises(InvalidTransition, match="turn in progress"):
            decide(active, EvictSession(SES, "expired"))


def test_cancel_needs_an_active_turn() -> None:
    for active in (reserved(), running()):
        assert decide(active, CancelSession(SES, "stop")) == [ev.SessionCancelled("stop")]
    with pytest.raises(InvalidTransition, match="no turn in progress"):
        decide(opened(), CancelSession(SES))


def test_read_advances_the_cursor_to_the_version_once() -> None:
    state, events = apply(running(), MarkSessionRead(SES, "r"))
    assert events == [ev.SessionRead("r", 3)] and state.cursors == {"r": 3}
    assert state.version == 3  # a read changes no version
    assert decide(state, MarkSessionRead(SES, "r")) == []
    assert decide(state, MarkSessionRead(SES, "s")) == [ev.SessionRead("s", 3)]
