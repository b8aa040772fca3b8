"""The pure core of the task stream: ``decide`` and ``evolve`` without a database."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.errors import InvalidTransition, NotFound
from ledger.events import TaskCancelled, TaskReadCursorAdvanced
from ledger.task import CancelTask, MarkTaskRead, SubmitTask, TaskState, decide, evolve


def submit_command(task_id: str = "tsk_1") -> SubmitTask:
    return SubmitTask(task_id=task_id, tenant_id="t", project_id="p", queue="q",
                      lane="default", title="x", priority=50, backend_profile=None,
                      contract={}, payload_hash="0" * 64, creator="test")


def test_commands_on_a_missing_task_are_not_found() -> None:
    with pytest.raises(NotFound):
        decide(None, CancelTask("tsk_1"))
    with pytest.raises(NotFound):
        decide(None, MarkTaskRead("tsk_1", "r"))


def test_a_task_cannot_be_submitted_twice() -> None:
    state = evolve(None, decide(None, submit_command())[0])
    with pytest.raises(InvalidTransition):
        decide(state, submit_command())


def test_cancel_is_refused_once_cancelled() -> None:
    state = evolve(None, decide(None, submit_command())[0])
    state = evolve(state, decide(state, CancelTask("tsk_1", "why"))[0])
    assert (state.state, state.version) == ("cancelled", 2)
    with pytest.raises(InvalidTransition):
        decide(state, CancelTask("tsk_1"))


def test_cancel_is_refused_for_completed_tasks() -> None:
    with pytest.raises(InvalidTransition):
        decide(TaskState("tsk_1", "completed", 3), CancelTask("tsk_1"))


commands = st.lists(st.one_of(
    st.builds(CancelTask, st.just("tsk_1"), st.none() | st.text(max_size=5)),
    st.builds(MarkTaskRead, st.just("tsk_1"), st.sampled_from(["a", "b", "c"])),
), max_size=30)


@given(commands)
def test_any_command_sequence_keeps_the_invariants(sequence: list[object]) -> None:
    state = evolve(None, decide(None, submit_command())[0])
    for command in sequence:
        before = state
        try:
            events = decide(state, command)  # type: ignore[arg-type]
        except InvalidTransition:
            assert isinstance(command, CancelTask) and state.state == "cancelled"
            continue
        for event in events:
            state = evolve(state, event)
        if isinstance(command, MarkTaskRead):
            assert state.version == before.version, "a read never changes the task version"
            assert state.cursors[command.reader_id] == state.version
            assert all(isinstance(e, TaskReadCursorAdvanced) for e in events)
            if before.cursors.get(command.reader_id) == before.version:
                assert events == [], "a repeated read appends nothing"
        else:
            assert events == [TaskCancelled(reason=command.reason)]  # type: ignore[attr-defined]
            assert state.version == before.version + 1
        assert all(v <= state.version for v in state.cursors.values())
