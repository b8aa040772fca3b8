"""The task stream: commands, the decision state, and the pure ``decide``/``evolve`` pair."""

from __future__ import annotations

from typing import Any

import msgspec

from ledger.addressed import Addressed
from ledger.errors import IdempotencyConflict, InvalidTransition, NotFound, TaskNotRetryable
from ledger.events import (
    TASK_CHANGING_EVENTS,
    AttemptEnd,
    AttemptFinished,
    AttemptMaterializationFailed,
    AttemptMaterialized,
    AttemptReserved,
    JudgeRecorded,
    JudgeVerdict,
    NewTask,
    TaskCancelled,
    TaskEvent,
    TaskReadCursorAdvanced,
    TaskSubmitted,
)
from ledger.states import BLOCKER_KINDS, AttemptStatus, TaskStatus, task_status_after

STREAM_TYPE = "task"

CANCELLABLE = frozenset({TaskStatus.PENDING, TaskStatus.RUNNING, TaskStatus.FAILED,
                         TaskStatus.BLOCKED})
RETRYABLE = frozenset({TaskStatus.FAILED, TaskStatus.BLOCKED})
OUTCOMES = frozenset({AttemptStatus.COMPLETED, AttemptStatus.FAILED, AttemptStatus.BLOCKED})


class SubmitTask(NewTask, Addressed, frozen=True):
    """Create a task from a validated, redacted contract."""

    @property
    def creates_stream(self) -> bool:
        """A fresh task id has no stream to load (a clash fails on the unique key); a task id
        derived from an idempotency key may name a task submitted before."""
        return self.idempotency_key is None


class _OnTask(msgspec.Struct, Addressed, frozen=True):
    task_id: str


class CancelTask(_OnTask, frozen=True):
    """Cancel a task by hand."""

    reason: str | None = None


class MarkTaskRead(_OnTask, frozen=True):
    """Advance a reader's cursor to the task's current version."""

    reader_id: str


class AttemptIds(msgspec.Struct, frozen=True):
    """Identities fixed when an attempt is reserved (generated before ``decide``)."""

    attempt_id: str
    run_id: str
    command_id: str
    runner_job_id: str
    session_id: str
    backend_profile: str


class DispatchTask(_OnTask, frozen=True):
    """Reserve the first attempt of a pending task (``named`` when the caller chose its id)."""

    ids: AttemptIds
    named: bool = False


class RetryTask(_OnTask, frozen=True):
    """Reserve a new attempt of a failed or blocked task under an idempotency key."""

    idempotency_key: str
    reason: str
    ids: AttemptIds


class _OnAttempt(_OnTask, frozen=True):
    attempt_id: str


class MaterializeAttempt(_OnAttempt, frozen=True):
    """Record that the attempt's runner job exists."""


class FailMaterialization(_OnAttempt, frozen=True):
    """Record why the attempt's runner job could not be created."""

    failure_kind: str
    failure_message: str


class FinishAttempt(_OnTask, frozen=True):
    """Write the core run's terminal state back to the attempt and the task."""

    end: AttemptEnd

    @property
    def attempt_id(self) -> str:
        return self.end.attempt_id


class RecordJudge(_OnTask, frozen=True):
    """Record a judge's verdict on an ended attempt; it never retries (SPEC 4.3 rule 6.10)."""

    verdict: JudgeVerdict


TaskCommand = (SubmitTask | CancelTask | MarkTaskRead | DispatchTask | RetryTask
               | MaterializeAttempt | FailMaterialization | FinishAttempt | RecordJudge)
JUDGED = frozenset({AttemptStatus.COMPLETED, AttemptStatus.FAILED, AttemptStatus.BLOCKED,
                    AttemptStatus.CANCELLED})
"""Attempt states a judge may judge: the attempt has ended."""


class AttemptState(msgspec.Struct, frozen=True):
    """One attempt as ``decide`` sees it."""

    attempt_id: str
    retry_index: int
    state: AttemptStatus
    idempotency_key: str | None
    reason: str | None
    failure_kind: str | None = None
    ids: AttemptIds | None = None
    """The identities the reservation fixed (run, command, runner job, session, profile)."""


class TaskState(msgspec.Struct, frozen=True):
    """What ``decide`` needs to know about one task stream."""

    task_id: str
    state: TaskStatus
    version: int
    cursors: dict[str, int] = {}
    attempts: tuple[AttemptState, ...] = ()
    idempotency_key: str | None = None
    """The key the task was submitted under, if any."""
    payload_hash: str = ""
    """The hash of the submitted contract, compared when the key is used again."""
    judges: dict[str, JudgeVerdict] = {}
    """The verdicts recorded on the task's attempts, by judge id."""

    def attempt(self, attempt_id: str) -> AttemptState | None:
        """The attempt with this id, if any."""
        return next((a for a in self.attempts if a.attempt_id == attempt_id), None)

    @property
    def latest(self) -> AttemptState | None:
        """The newest attempt."""
        return self.attempts[-1] if self.attempts else None

    def in_flight(self) -> AttemptState | None:
        """A reserved attempt whose runner job is still being created (no failure yet)."""
        latest = self.latest
        if latest and latest.state == AttemptStatus.RESERVED and latest.failure_kind is None:
            return latest
        return None


def decide(state: TaskState | None, command: TaskCommand) -> list[TaskEvent]:
    """Return the events a command produces on the task, or raise a ``DomainError``."""
    if isinstance(command, SubmitTask):
        if state is not None:
            return _submit_again(state, command)
        return [TaskSubmitted(**msgspec.structs.asdict(command))]
    if state is None:
        raise NotFound(f"task {command.task_id} not found", taskId=command.task_id)
    if isinstance(command, CancelTask):
        if state.state not in CANCELLABLE:
            raise InvalidTransition(
                f"cannot cancel a {state.state} task", taskId=state.task_id, state=state.state
            )
        return [TaskCancelled(reason=command.reason)]
    if isinstance(command, MarkTaskRead):
        if state.cursors.get(command.reader_id, 0) >= state.version:
            return []
        return [TaskReadCursorAdvanced(reader_id=command.reader_id, version=state.version)]
    if isinstance(command, DispatchTask):
        return _dispatch(state, command)
    if isinstance(command, RetryTask):
        return _retry(state, command)
    if isinstance(command, RecordJudge):
        return _judge(state, command.verdict)
    return _progress(state, command)


def _judge(state: TaskState, verdict: JudgeVerdict) -> list[TaskEvent]:
    """A verdict on an ended attempt; the same judge id again is the original record (same
    verdict) or a conflict (another one)."""
    recorded = state.judges.get(verdict.judge_id)
    if recorded is not None:
        if recorded != verdict:
            raise IdempotencyConflict("judgeId already used with a different verdict",
                                      taskId=state.task_id, judgeId=verdict.judge_id)
        return []
    attempt = state.attempt(verdict.attempt_id)
    if attempt is None:
        raise NotFound(f"attempt {verdict.attempt_id} not found", taskId=state.task_id,
                       attemptId=verdict.attempt_id)
    if attempt.state not in JUDGED:
        raise InvalidTransition(f"cannot judge a {attempt.state} attempt; it has not ended",
                                taskId=state.task_id, attemptId=attempt.attempt_id,
                                state=attempt.state)
    return [JudgeRecorded(**msgspec.structs.asdict(verdict))]


def _submit_again(state: TaskState, command: SubmitTask) -> list[TaskEvent]:
    """A submit naming an existing task: with its idempotency key and the same contract it is
    the original task (nothing new); with another contract a conflict (DESIGN 10)."""
    key = command.idempotency_key
    if key is None or state.idempotency_key != key:
        raise InvalidTransition("task already exists", taskId=command.task_id)
    if state.payload_hash != command.payload_hash:
        raise IdempotencyConflict("idempotency key already used with a different body",
                                  taskId=state.task_id)
    return []


def _reserve(state: TaskState, ids: AttemptIds, key: str | None,
             reason: str | None) -> AttemptReserved:
    latest = state.latest
    return AttemptReserved(
        attempt_id=ids.attempt_id, retry_index=len(state.attempts), run_id=ids.run_id,
        command_id=ids.command_id, runner_job_id=ids.runner_job_id, session_id=ids.session_id,
        backend_profile=ids.backend_profile, idempotency_key=key, reason=reason,
        previous_attempt_id=latest.attempt_id if latest else None,
    )


def _dispatch(state: TaskState, command: DispatchTask) -> list[TaskEvent]:
    if command.named and state.attempt(command.ids.attempt_id) is not None:
        return []  # the same attemptId again: the original attempt, nothing new
    reserved = state.latest if state.state == TaskStatus.PENDING else None
    if reserved is not None and reserved.state == AttemptStatus.RESERVED:
        if command.named:
            raise InvalidTransition(f"attempt {reserved.attempt_id} is already reserved",
                                    taskId=state.task_id, attemptId=reserved.attempt_id)
        return []  # resume the reserved attempt
    if state.state != TaskStatus.PENDING:
        hint = "; retry it instead" if state.state in RETRYABLE else ""
        raise InvalidTransition(f"cannot dispatch a {state.state} task{hint}",
                                taskId=state.task_id, state=state.state)
    return [_reserve(state, command.ids, None, None)]


def used_key(state: TaskState, key: str) -> AttemptState | None:
    """The attempt reserved under an idempotency key, if the key was used."""
    return next((a for a in state.attempts if a.idempotency_key == key), None)


def _retry(state: TaskState, command: RetryTask) -> list[TaskEvent]:
    original = used_key(state, command.idempotency_key)
    if original is not None:  # before any state check (SPEC 4.3 rule 6.3)
        if original.reason != command.reason:
            raise IdempotencyConflict(
                "idempotency key already used with a different reason",
                taskId=state.task_id, attemptId=original.attempt_id)
        return []
    if state.state not in RETRYABLE:
        raise TaskNotRetryable(f"cannot retry a {state.state} task",
                               taskId=state.task_id, state=state.state)
    in_flight = state.in_flight()
    if in_flight is not None:
        raise InvalidTransition(f"attempt {in_flight.attempt_id} is still being materialized",
                                taskId=state.task_id, attemptId=in_flight.attempt_id)
    return [_reserve(state, command.ids, command.idempotency_key, command.reason)]


def _progress(
    state: TaskState, command: MaterializeAttempt | FailMaterialization | FinishAttempt
) -> list[TaskEvent]:
    attempt = state.attempt(command.attempt_id)
    if attempt is None:
        raise NotFound(f"attempt {command.attempt_id} not found", taskId=state.task_id,
                       attemptId=command.attempt_id)
    if isinstance(command, MaterializeAttempt):
        reserved = attempt.state == AttemptStatus.RESERVED
        return [AttemptMaterialized(attempt.attempt_id)] if reserved else []
    if isinstance(command, FailMaterialization):
        if attempt.state != AttemptStatus.RESERVED:
            return []
        attempt_state = after_materialization_failure(state.state, command.failure_kind)
        return [AttemptMaterializationFailed(attempt.attempt_id, command.failure_kind,
                                             command.failure_message, attempt_state)]
    if attempt.state != AttemptStatus.RUNNING:
        return []
    if command.end.outcome not in OUTCOMES:
        raise InvalidTransition(f"unknown outcome {command.end.outcome}")
    return [AttemptFinished(**msgspec.structs.asdict(command.end))]


def after_materialization_failure(task_state: TaskStatus, kind: str) -> AttemptStatus:
    """The attempt state ``decide`` records when a runner job could not be created.

    On dispatch (the task is pending) a blocker blocks the attempt (and so the task); any
    other failure leaves the attempt reserved so that dispatching again resumes it. On retry
    the attempt stays reserved and the task keeps its state (SPEC 4.3 rules 6.8, 6.9).
    """
    if task_state == TaskStatus.PENDING and kind in BLOCKER_KINDS:
        return AttemptStatus.BLOCKED
    return AttemptStatus.RESERVED


OPEN_ATTEMPT = frozenset({AttemptStatus.RESERVED, AttemptStatus.RUNNING})
"""Attempt states a cancel closes."""


def task_state_after(task_state: TaskStatus, event: TaskEvent) -> TaskStatus:
    """The task's state after one of its events: the rule every task fold applies."""
    match event:
        case TaskSubmitted():
            return TaskStatus.PENDING
        case TaskCancelled():
            return TaskStatus.CANCELLED
        case AttemptMaterialized():
            return TaskStatus.RUNNING
        case AttemptMaterializationFailed(attempt_state=attempt_state):
            return TaskStatus.BLOCKED if attempt_state == AttemptStatus.BLOCKED else task_state
        case AttemptFinished(outcome=outcome):
            return task_status_after(outcome)
        case _:
            return task_state


def attempt_state_after(attempt_state: AttemptStatus | None,
                        event: TaskEvent) -> AttemptStatus | None:
    """The state of the attempt an event concerns (a cancel: the task's latest attempt)
    after the event: the rule every attempt fold applies."""
    match event:
        case AttemptReserved():
            return AttemptStatus.RESERVED
        case AttemptMaterialized():
            return AttemptStatus.RUNNING
        case AttemptMaterializationFailed(attempt_state=failed_state):
            return failed_state
        case AttemptFinished(outcome=outcome):
            return outcome
        case TaskCancelled() if attempt_state in OPEN_ATTEMPT:
            return AttemptStatus.CANCELLED
        case _:
            return attempt_state


def evolve(state: TaskState | None, event: TaskEvent) -> TaskState:
    """Fold one event into the decision state."""
    if isinstance(event, TaskSubmitted):
        return TaskState(task_id=event.task_id, state=task_state_after(TaskStatus.PENDING, event),
                         version=1, idempotency_key=event.idempotency_key,
                         payload_hash=event.payload_hash)
    assert state is not None, "event before task-submitted"
    if isinstance(event, TaskReadCursorAdvanced):
        return msgspec.structs.replace(state, cursors={**state.cursors,
                                                       event.reader_id: event.version})
    assert isinstance(event, TASK_CHANGING_EVENTS)
    if isinstance(event, JudgeRecorded):
        verdict = JudgeVerdict(**msgspec.structs.asdict(event))
        return msgspec.structs.replace(state, version=state.version + 1,
                                       judges={**state.judges, event.judge_id: verdict})
    attempts = state.attempts
    if isinstance(event, AttemptReserved):
        ids = AttemptIds(event.attempt_id, event.run_id, event.command_id,
                         event.runner_job_id, event.session_id, event.backend_profile)
        attempts = (*attempts, AttemptState(
            event.attempt_id, event.retry_index, AttemptStatus.RESERVED,
            event.idempotency_key, event.reason, ids=ids))
    concerned = state.latest if isinstance(event, TaskCancelled) \
        else state.attempt(getattr(event, "attempt_id", ""))
    if concerned is not None:
        changes: dict[str, Any] = {"state": attempt_state_after(concerned.state, event)}
        if isinstance(event, AttemptMaterialized | AttemptMaterializationFailed
                      | AttemptFinished):
            changes["failure_kind"] = getattr(event, "failure_kind", None)
        attempts = tuple(msgspec.structs.replace(a, **changes)
                         if a.attempt_id == concerned.attempt_id else a for a in attempts)
    return msgspec.structs.replace(state, version=state.version + 1, attempts=attempts,
                                   state=task_state_after(state.state, event))
