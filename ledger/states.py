"""The SPEC's "states" (SPEC 3, DESIGN 5) and failure kinds: one vocabulary for every layer."""

from __future__ import annotations

from enum import StrEnum


class TaskStatus(StrEnum):
    """The state of a queue task."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


class AttemptStatus(StrEnum):
    """The state of an attempt; ``reserved`` until its runner job exists."""

    RESERVED = "reserved"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


class RunStatus(StrEnum):
    """The status of a core run, its command and its runner-job record."""

    CREATED = "created"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


CommandStatus = RunStatus
"""A command's record carries the status of its run."""


class JobState(StrEnum):
    """What a driver reports of a runner job (``JobStatus.state``)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


class SessionStatus(StrEnum):
    """The state of a session: idle, running a turn, how the last turn ended, or evicted."""

    IDLE = "idle"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"
    EVICTED = "evicted"


class TurnStatus(StrEnum):
    """The status of a session turn; ``reserved`` until its runner job exists."""

    RESERVED = "reserved"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


class SessionFilter(StrEnum):
    """Which sessions a session list shows (``default``: the running and the unread ones)."""

    DEFAULT = "default"
    RUNNING = "running"
    UNREAD = "unread"
    TERMINAL = "terminal"
    IDLE = "idle"
    ALL = "all"


class StorageKind(StrEnum):
    """A session's storage: a volume, none, or a volume that was removed."""

    VOLUME = "volume"
    NONE = "none"
    EVICTED = "evicted"


class FailureKind(StrEnum):
    """Failure kinds the service names itself: SPEC 7 codes plus its own.

    Stored ``failureKind`` fields stay plain text: a backend may name a blocker of its own,
    and a refusal's code (e.g. ``invalid-transition``) can stop a materialisation.
    """

    SECRET_UNAVAILABLE = "secret-unavailable"
    SCHEMA_INVALID = "schema-invalid"
    TENANT_POLICY_DENIED = "tenant-policy-denied"
    REQUIRED_SKILL_UNAVAILABLE = "required-skill-unavailable"
    PROMPT_UNAVAILABLE = "prompt-unavailable"
    PROMPT_TOO_LARGE = "prompt-too-large"
    SESSION_STORE_EVICTED = "session-store-evicted"
    INFRA_FAILED = "infra-failed"
    BUILD_REQUIRED = "build-required"
    BUNDLE_UNAVAILABLE = "bundle-unavailable"
    RUNNER_CANCELLED = "runner-cancelled"
    CAPABILITY_GAP = "capability-gap"
    """SPEC 5.2 rule 7: a shell capability the run needs is missing from the runtime."""
    WORKSPACE_COMMAND_INCONSISTENT = "workspace-command-inconsistent"
    """SPEC 7: the backend command could not spawn because of the workspace's form."""
    WORKSPACE_REFUSED = "workspace-refused"
    """SPEC 8: the checkout would leave the workspace root or overwrite a protected path."""
    RUNNER_LOST = "runner-lost"


BLOCKER_KINDS = frozenset({
    FailureKind.SECRET_UNAVAILABLE, FailureKind.TENANT_POLICY_DENIED,
    FailureKind.PROMPT_UNAVAILABLE, FailureKind.PROMPT_TOO_LARGE,
    FailureKind.REQUIRED_SKILL_UNAVAILABLE, FailureKind.SESSION_STORE_EVICTED,
    FailureKind.BUILD_REQUIRED, FailureKind.SCHEMA_INVALID, FailureKind.BUNDLE_UNAVAILABLE,
    FailureKind.CAPABILITY_GAP, FailureKind.WORKSPACE_REFUSED,
})
"""Failure kinds that block a task (fix the input, then retry) rather than fail it."""

ACTIVE_TURNS = frozenset({TurnStatus.RESERVED, TurnStatus.RUNNING})
"""Turn statuses of a turn in progress (a session runs at most one)."""

TERMINAL_SESSIONS = frozenset({
    SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.BLOCKED,
    SessionStatus.CANCELLED, SessionStatus.EVICTED,
})
"""Session states after which nothing runs until the next turn (or ever, once evicted)."""


def job_state_of_failure(kind: str) -> JobState:
    """How a runner job ends when assembly fails with ``kind``: blocked or failed."""
    return JobState.BLOCKED if kind in BLOCKER_KINDS else JobState.FAILED


def attempt_outcome(job: JobState) -> tuple[AttemptStatus, FailureKind | None]:
    """The attempt outcome of a terminal job state, and the failure kind it implies.

    A runner job cancelled under the attempt (not by a task cancel) fails the attempt.
    """
    if job == JobState.CANCELLED:
        return AttemptStatus.FAILED, FailureKind.RUNNER_CANCELLED
    if job == JobState.RUNNING:
        raise ValueError("a running job has no outcome yet")
    return AttemptStatus(job), None


def task_status_after(outcome: AttemptStatus) -> TaskStatus:
    """The task state an attempt's terminal outcome leaves."""
    if outcome == AttemptStatus.RESERVED:
        raise ValueError("a reserved attempt has no outcome yet")
    return TaskStatus(outcome)


def run_status_of(job: JobState) -> RunStatus:
    """The run status that records a job state."""
    return RunStatus(job)


def turn_status_of(job: JobState) -> TurnStatus:
    """The turn status that records a job state."""
    return TurnStatus(job)


def session_status_after(turn: TurnStatus) -> SessionStatus:
    """The session state a turn's end leaves (a turn still in progress: running)."""
    return SessionStatus.RUNNING if turn in ACTIVE_TURNS else SessionStatus(turn)
