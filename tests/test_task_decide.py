"""Task ``decide`` without a database: dispatch, retry, materialisation, finish and cancel."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from ledger import events as ev
from ledger.errors import IdempotencyConflict, InvalidTransition, NotFound, TaskNotRetryable
from ledger.task import (
    AttemptIds,
    CancelTask,
    DispatchTask,
    FailMaterialization,
    FinishAttempt,
    MaterializeAttempt,
    RecordJudge,
    RetryTask,
    SubmitTask,
    TaskCommand,
    TaskState,
    decide,
    evolve,
)
from tests.support import decided

TASK = "tsk_1"


def ids(n: int, attempt_id: str | None = None) -> AttemptIds:
    """The identities of attempt ``n``."""
    return AttemptIds(attempt_id or f"att_{n}", f"run_{n}", f"cmd_{n}", f"job_{n}",
                      f"ses_{n}", "codex")


def apply(state: TaskState | None, command: TaskCommand) -> tuple[TaskState, list[ev.TaskEvent]]:
    """Decide and fold the events."""
    return decided(decide, evolve, state, command)


def pending() -> TaskState:
    """A submitted task."""
    state, _ = apply(None, SubmitTask(
        task_id=TASK, tenant_id="t", project_id="p", queue="q", lane="default", title="x",
        priority=50, backend_profile=None, contract={}, payload_hash="0" * 64, creator="test"))
    return state


def reserved() -> TaskState:
    """A pending task with its first attempt reserved."""
    return apply(pending(), DispatchTask(TASK, ids(0)))[0]


def running() -> TaskState:
    """A task whose first attempt runs."""
    return apply(reserved(), MaterializeAttempt(TASK, "att_0"))[0]


def finished(outcome: str, kind: str | None = None) -> TaskState:
    """A task whose first attempt finished with ``outcome``."""
    return apply(running(), FinishAttempt(TASK, ev.AttemptEnd("att_0", outcome, kind)))[0]


def test_dispatch_reserves_the_first_attempt_with_its_ids() -> None:
    state, events = apply(pending(), DispatchTask(TASK, ids(0)))
    assert events == [ev.AttemptReserved("att_0", 0, "run_0", "cmd_0", "job_0", "ses_0", "codex")]
    assert state.state == "pending" and state.latest is not None
    assert (state.latest.state, state.latest.ids) == ("reserved", ids(0))
    assert state.in_flight() == state.latest


def test_dispatch_again_resumes_the_reserved_attempt() -> None:
    assert decide(reserved(), DispatchTask(TASK, ids(1))) == []


def test_a_named_dispatch_of_the_same_attempt_is_a_no_op_and_another_name_is_refused() -> None:
    assert decide(reserved(), DispatchTask(TASK, ids(1, "att_0"), named=True)) == []
    with pytest.raises(InvalidTransition, match="already reserved"):
        decide(reserved(), DispatchTask(TASK, ids(1), named=True))


@pytest.mark.parametrize(("state", "hint"), [
    (running, False), (lambda: finished("completed"), False),
    (lambda: finished("failed"), True), (lambda: finished("blocked"), True),
])
def test_dispatch_of_a_task_that_is_not_pending_is_refused(state: object, hint: bool) -> None:
    assert callable(state)
    with pytest.raises(InvalidTransition) as refused:
        decide(state(), DispatchTask(TASK, ids(1)))
    assert ("retry it instead" in refused.value.message) is hint


def test_commands_on_a_missing_task_or_attempt_are_not_found() -> None:
    missing_task: list[TaskCommand] = [DispatchTask(TASK, ids(0)),
                                       RetryTask(TASK, "k", "r", ids(0)),
                                       MaterializeAttempt(TASK, "att_0")]
    for command in missing_task:
        with pytest.raises(NotFound):
            decide(None, command)
    missing_attempt: list[TaskCommand] = [
        MaterializeAttempt(TASK, "att_x"), FinishAttempt(TASK, ev.AttemptEnd("att_x", "completed")),
        FailMaterialization(TASK, "att_x", "infra-failed", "m")]
    for command in missing_attempt:
        with pytest.raises(NotFound):
            decide(running(), command)


def test_materialise_runs_the_attempt_and_the_task_once() -> None:
    state, events = apply(reserved(), MaterializeAttempt(TASK, "att_0"))
    assert events == [ev.AttemptMaterialized("att_0")]
    assert state.state == "running" and state.latest is not None
    assert state.latest.state == "running"
    assert decide(state, MaterializeAttempt(TASK, "att_0")) == []


def test_a_blocker_on_dispatch_blocks_the_attempt_and_the_task() -> None:
    state, events = apply(reserved(), FailMaterialization(TASK, "att_0", "build-required", "m"))
    assert events == [ev.AttemptMaterializationFailed("att_0", "build-required", "m", "blocked")]
    assert state.state == "blocked" and state.latest is not None
    assert (state.latest.state, state.latest.failure_kind) == ("blocked", "build-required")
    assert decide(state, FailMaterialization(TASK, "att_0", "build-required", "m")) == []


def test_another_failure_on_dispatch_keeps_the_attempt_reserved_for_a_resume() -> None:
    state, events = apply(reserved(), FailMaterialization(TASK, "att_0", "infra-failed", "m"))
    assert events == [ev.AttemptMaterializationFailed("att_0", "infra-failed", "m", "reserved")]
    assert state.state == "pending" and state.latest is not None
    assert (state.latest.state, state.latest.failure_kind) == ("reserved", "infra-failed")
    assert state.in_flight() is None
    assert decide(state, DispatchTask(TASK, ids(1))) == []
    state, _ = apply(state, MaterializeAttempt(TASK, "att_0"))
    assert state.latest is not None and state.latest.failure_kind is None


def test_a_failure_on_retry_keeps_the_attempt_reserved_and_the_task_state() -> None:
    state, _ = apply(finished("failed"), RetryTask(TASK, "k", "r", ids(1)))
    state, events = apply(state, FailMaterialization(TASK, "att_1", "build-required", "m"))
    assert events == [ev.AttemptMaterializationFailed("att_1", "build-required", "m", "reserved")]
    assert state.state == "failed" and state.latest is not None
    assert state.latest.state == "reserved"


def test_finish_writes_the_outcome_to_the_attempt_and_the_task() -> None:
    for outcome in ("completed", "failed", "blocked"):
        state, events = apply(running(), FinishAttempt(TASK, ev.AttemptEnd(
            "att_0", outcome, None, None, 3)))
        assert events == [ev.AttemptFinished("att_0", outcome, None, None, 3)]
        assert state.state == outcome and state.latest is not None
        assert state.latest.state == outcome


def test_finish_of_an_attempt_that_is_not_running_is_a_no_op() -> None:
    assert decide(reserved(), FinishAttempt(TASK, ev.AttemptEnd("att_0", "completed"))) == []
    assert decide(finished("failed"),
                  FinishAttempt(TASK, ev.AttemptEnd("att_0", "completed"))) == []


def test_an_unknown_outcome_is_refused() -> None:
    with pytest.raises(InvalidTransition, match="unknown outcome"):
        decide(running(), FinishAttempt(TASK, ev.AttemptEnd("att_0", "running")))


def test_retry_reserves_a_new_attempt_after_the_previous_one() -> None:
    state, events = apply(finished("blocked", "build-required"),
                          RetryTask(TASK, "k", "fixed", ids(1)))
    assert events == [ev.AttemptReserved("att_1", 1, "run_1", "cmd_1", "job_1", "ses_1", "codex",
                                         "k", "fixed", "att_0")]
    assert state.state == "blocked" and [a.state for a in state.attempts] == ["blocked",
                                                                              "reserved"]


def test_retry_with_a_used_key_is_a_no_op_or_a_conflict() -> None:
    state, _ = apply(finished("failed"), RetryTask(TASK, "k", "r", ids(1)))
    state, _ = apply(state, MaterializeAttempt(TASK, "att_1"))
    assert decide(state, RetryTask(TASK, "k", "r", ids(2))) == []  # even though running
    with pytest.raises(IdempotencyConflict):
        decide(state, RetryTask(TASK, "k", "other", ids(2)))


@pytest.mark.parametrize("state", [pending, reserved, running, lambda: finished("completed")])
def test_retry_of_a_task_that_is_not_failed_or_blocked_is_refused(state: object) -> None:
    assert callable(state)
    with pytest.raises(TaskNotRetryable):
        decide(state(), RetryTask(TASK, "k", "r", ids(1)))


def test_retry_while_the_previous_retry_is_materialising_is_refused() -> None:
    state, _ = apply(finished("failed"), RetryTask(TASK, "k1", "r", ids(1)))
    with pytest.raises(InvalidTransition, match="still being materialized"):
        decide(state, RetryTask(TASK, "k2", "r", ids(2)))
    state, _ = apply(state, FailMaterialization(TASK, "att_1", "infra-failed", "m"))
    assert decide(state, RetryTask(TASK, "k2", "r", ids(2)))  # its failure frees the task


@pytest.mark.parametrize(("state", "attempt"), [
    (pending, None), (reserved, "cancelled"), (running, "cancelled"),
    (lambda: finished("failed"), "failed"), (lambda: finished("blocked"), "blocked"),
])
def test_cancel_closes_a_reserved_or_running_attempt_only(state: object,
                                                          attempt: str | None) -> None:
    assert callable(state)
    after, events = apply(state(), CancelTask(TASK, "stop"))
    assert events == [ev.TaskCancelled("stop")] and after.state == "cancelled"
    assert (after.latest.state if after.latest else None) == attempt


def test_cancel_of_a_completed_or_cancelled_task_is_refused() -> None:
    cancelled, _ = apply(running(), CancelTask(TASK))
    for state in (finished("completed"), cancelled):
        with pytest.raises(InvalidTransition):
            decide(state, CancelTask(TASK))
    with pytest.raises(InvalidTransition):
        decide(cancelled, DispatchTask(TASK, ids(1)))


def keyed_submit(key: str | None, payload_hash: str = "0" * 64) -> SubmitTask:
    """A submit of task ``TASK`` under an idempotency key."""
    return SubmitTask(
        task_id=TASK, tenant_id="t", project_id="p", queue="q", lane="default", title="x",
        priority=50, backend_profile=None, contract={}, payload_hash=payload_hash,
        creator="test", idempotency_key=key)


def test_a_keyed_submit_again_is_the_original_task_or_a_conflict() -> None:
    state, events = apply(None, keyed_submit("k"))
    assert len(events) == 1 and state.idempotency_key == "k"
    assert not keyed_submit("k").creates_stream and keyed_submit(None).creates_stream
    assert decide(state, keyed_submit("k")) == [], "same key, same body: nothing new"
    with pytest.raises(IdempotencyConflict):
        decide(state, keyed_submit("k", payload_hash="1" * 64))
    with pytest.raises(InvalidTransition):
        decide(state, keyed_submit(None))
    with pytest.raises(InvalidTransition):  # an unkeyed task is never a key's original
        decide(pending(), keyed_submit("k"))


def verdict(judge_id: str = "jdg_1", attempt_id: str = "att_0",
            result: str = "fail") -> ev.JudgeVerdict:
    """A judge's verdict suggesting a retry."""
    return ev.JudgeVerdict(judge_id, attempt_id, "reviewer", {"check": "tests"}, result,
                           "tests-failed", True, "flaky")


@pytest.mark.parametrize("outcome", ["completed", "failed", "blocked"])
def test_a_verdict_on_an_ended_attempt_is_recorded_and_changes_no_state(outcome: str) -> None:
    before = finished(outcome)
    state, events = apply(before, RecordJudge(TASK, verdict()))
    assert events == [ev.JudgeRecorded(**msgspec.structs.asdict(verdict()))]
    assert (state.state, state.attempts) == (before.state, before.attempts), "never a retry"
    assert state.version == before.version + 1 and state.judges == {"jdg_1": verdict()}
    assert decide(state, RecordJudge(TASK, verdict())) == [], "the same verdict again"
    with pytest.raises(IdempotencyConflict, match="judgeId"):
        decide(state, RecordJudge(TASK, verdict(result="pass")))


def test_a_cancelled_attempt_can_be_judged() -> None:
    state = apply(running(), CancelTask(TASK))[0]
    assert apply(state, RecordJudge(TASK, verdict()))[1] != []


@pytest.mark.parametrize("make", [reserved, running])
def test_an_attempt_that_has_not_ended_is_not_judged(make: Callable[[], TaskState]) -> None:
    with pytest.raises(InvalidTransition, match="has not ended"):
        decide(make(), RecordJudge(TASK, verdict()))


def test_a_verdict_needs_the_task_and_its_attempt() -> None:
    with pytest.raises(NotFound, match="attempt att_9"):
        decide(finished("failed"), RecordJudge(TASK, verdict(attempt_id="att_9")))
    with pytest.raises(NotFound, match="task"):
        decide(None, RecordJudge(TASK, verdict()))
