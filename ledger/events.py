"""Event types of the task stream: frozen, tagged msgspec Structs stored forever.

Schema evolution: new fields get defaults; a field's type or a tag never changes; a changed
meaning gets a new event type.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from ledger.states import AttemptStatus, RunStatus, StorageKind, TurnStatus


class TaskPlace(msgspec.Struct, frozen=True):
    """Which task, where it queues and how urgent it is: the fields every task record starts
    with."""

    task_id: str
    tenant_id: str
    project_id: str
    queue: str
    lane: str
    title: str
    priority: int


class NewTask(TaskPlace, frozen=True):
    """What a new task is made of: shared by the submit command and its event."""

    backend_profile: str | None
    contract: dict[str, Any]
    payload_hash: str
    creator: str
    idempotency_key: str | None = None
    """The submitter's ``Idempotency-Key`` (DESIGN 10); the task id derives from it."""


class TaskSubmitted(NewTask, frozen=True, tag="task-submitted", tag_field="type"):
    """A task entered a queue; ``contract`` is the redacted submitted body."""


class ReadUpTo(msgspec.Struct, frozen=True):
    """A reader has seen a stream up to its version ``version``."""

    reader_id: str
    version: int


class CancelledFor(msgspec.Struct, frozen=True):
    """A cancel and its optional reason."""

    reason: str | None = None


class TaskReadCursorAdvanced(ReadUpTo, frozen=True, tag="task-read-cursor-advanced",
                             tag_field="type"):
    """A reader has seen the task up to ``version``."""


class TaskCancelled(CancelledFor, frozen=True, tag="task-cancelled", tag_field="type"):
    """The task was cancelled by hand."""


class AttemptReserved(msgspec.Struct, frozen=True, tag="task-attempt-reserved", tag_field="type"):
    """Dispatch or retry fixed an attempt's identities; no runner job exists yet."""

    attempt_id: str
    retry_index: int
    run_id: str
    command_id: str
    runner_job_id: str
    session_id: str
    backend_profile: str
    idempotency_key: str | None = None
    reason: str | None = None
    previous_attempt_id: str | None = None


class AttemptMaterialized(
    msgspec.Struct, frozen=True, tag="task-attempt-materialized", tag_field="type"
):
    """The attempt's runner job exists: the attempt and the task are running."""

    attempt_id: str


class AttemptMaterializationFailed(
    msgspec.Struct, frozen=True, tag="task-attempt-materialization-failed", tag_field="type"
):
    """Creating the runner job failed; the reason stays on the reserved attempt."""

    attempt_id: str
    failure_kind: str
    failure_message: str
    attempt_state: AttemptStatus = AttemptStatus.RESERVED
    """``blocked`` when a blocker stopped a dispatch; else the attempt stays reserved."""


class TokenUsage(msgspec.Struct, frozen=True):
    """The token usage a backend reported (docs/backends.md), as its runner sent it."""

    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_output_tokens: int


class AttemptEnd(msgspec.Struct, frozen=True):
    """How an attempt ended: shared by the finish command and its event."""

    attempt_id: str
    outcome: AttemptStatus
    failure_kind: str | None = None
    failure_message: str | None = None
    exit_code: int | None = None
    started_at: str | msgspec.UnsetType = msgspec.UNSET
    finished_at: str | msgspec.UnsetType = msgspec.UNSET
    """When the backend started and ended (ISO 8601), as its job reported it; unset (and
    not encoded, so older events encode as before) when the job reported no times."""
    usage: TokenUsage | msgspec.UnsetType = msgspec.UNSET
    """The backend's token usage, as its job reported it; unset (not encoded) when none."""


def reported_time(value: str | msgspec.UnsetType) -> datetime | None:
    """A time an :class:`AttemptEnd` carries (ISO 8601, validated when the job reported it)."""
    return datetime.fromisoformat(value) if isinstance(value, str) else None


class AttemptFinished(AttemptEnd, frozen=True, tag="task-attempt-finished", tag_field="type"):
    """Refresh wrote the core run's terminal state back to the attempt and the task."""


class JudgeVerdict(msgspec.Struct, frozen=True):
    """A judge's verdict on one attempt (SPEC 2.3 "judge run"): what it was asked, what it
    found, the failure kind it assigns, and whether it suggests a retry. A record only: a
    suggestion never retries (SPEC 4.3 rule 6.10)."""

    judge_id: str
    attempt_id: str
    judge: str
    request: dict[str, Any]
    result: str
    failure_kind: str | None = None
    retry_suggested: bool = False
    retry_reason: str | None = None
    summary: str | None = None


class JudgeRecorded(JudgeVerdict, frozen=True, tag="task-judge-recorded", tag_field="type"):
    """A judge's verdict on an attempt of the task was recorded."""


TaskEvent = (TaskSubmitted | TaskReadCursorAdvanced | TaskCancelled | AttemptReserved
             | AttemptMaterialized | AttemptMaterializationFailed | AttemptFinished
             | JudgeRecorded)


class RunIdentity(msgspec.Struct, frozen=True):
    """A core run's identities: its task, attempt, command, runner job, session, profile."""

    run_id: str
    task_id: str
    attempt_id: str
    command_id: str
    runner_job_id: str
    session_id: str
    conversation_id: str
    backend_profile: str


class NewRun(RunIdentity, frozen=True):
    """A core run, its command and its runner job identity: command and event share it."""

    resource_bundle_ref: dict[str, Any] | None = None
    prompt_sha256: str = ""
    prompt_bytes: int = 0
    base: dict[str, Any] | None = None
    """The redacted run base of a run the session API created (no task)."""


class RunCreated(NewRun, frozen=True, tag="run-created", tag_field="type"):
    """A core run, its command and its runner job identity, for one attempt."""


class RunnerJobCreated(msgspec.Struct, frozen=True, tag="runner-job-created", tag_field="type"):
    """The driver created (or adopted) the runner job."""

    runner_job_id: str
    driver: str
    handle: str
    plan: dict[str, Any] | None = None


class RunAssembled(msgspec.Struct, frozen=True, tag="run-assembled", tag_field="type"):
    """The runner's bounded assembly event (SPEC 6): names, paths, hashes; never values."""

    assembly: dict[str, Any]


class RunnerStarted(msgspec.Struct, frozen=True, tag="runner-started", tag_field="type"):
    """The runner's startup event (SPEC 6): its bounded work-ready capability summary
    (SPEC 2.11): version, tool names and versions, dependency policy, never values."""

    capability: dict[str, Any]


class RunEnd(msgspec.Struct, frozen=True):
    """How a core run ended: shared by the finish command and its event."""

    status: RunStatus
    exit_code: int | None = None
    failure_kind: str | None = None
    failure_message: str | None = None


class RunFinished(RunEnd, frozen=True, tag="run-finished", tag_field="type"):
    """The core run reached a terminal status."""


RunEvent = RunCreated | RunnerJobCreated | RunAssembled | RunFinished | RunnerStarted


class SessionFacts(msgspec.Struct, frozen=True):
    """What a new session is made of: shared by the open command and its event."""

    session_id: str
    conversation_id: str
    backend_profile: str
    storage_kind: StorageKind
    pvc_name: str | None
    ttl_seconds: int
    expires_at: str
    creator: str
    run_id: str | None = None
    """The session's own run (created with it through the session API), if any."""
    tenant_id: str = ""
    """The tenant whose live sessions it counts toward (``SVC_MAX_SESSIONS_PER_TENANT``):
    its task's, or the caller's (``""`` before DESIGN 12's principals)."""


class SessionOpened(SessionFacts, frozen=True, tag="session-opened", tag_field="type"):
    """A session exists: its identity, profile and storage (``volume`` or ``none``)."""


class TurnFacts(msgspec.Struct, frozen=True):
    """A turn's identities, fixed before its runner job exists."""

    run_id: str
    command_id: str
    runner_job_id: str
    thread_id: str | None
    expires_at: str
    task_id: str | None = None
    prompt_sha256: str = ""
    prompt_bytes: int = 0


class SessionTurnReserved(TurnFacts, frozen=True, tag="session-turn-reserved",
                          tag_field="type"):
    """A command (turn) of a run in this session has fixed identities; no job yet."""


class SessionTurnStarted(
    msgspec.Struct, frozen=True, tag="session-turn-started", tag_field="type"
):
    """The turn's runner job exists."""

    runner_job_id: str
    driver: str
    handle: str


class TurnEnd(msgspec.Struct, frozen=True):
    """How a turn ended: shared by the finish command and its event."""

    runner_job_id: str
    status: TurnStatus
    thread_id: str | None = None
    failure_kind: str | None = None
    failure_message: str | None = None
    exit_code: int | None = None


class SessionTurnFinished(TurnEnd, frozen=True, tag="session-turn-finished", tag_field="type"):
    """The turn ended; ``thread_id`` is the thread the backend started or resumed."""


class VolumeSummary(msgspec.Struct, frozen=True):
    """The runner's summary of a session volume (the manager never looks inside)."""

    pvc_name: str | None
    pvc_phase: str | None
    size_bytes: int
    files_count: int
    sha256: str
    updated_at: str


class SessionStorageRefreshed(VolumeSummary, frozen=True, tag="session-storage-refreshed",
                              tag_field="type"):
    """A runner's volume summary was recorded."""


class SessionEvicted(msgspec.Struct, frozen=True, tag="session-evicted", tag_field="type"):
    """The session volume was removed; no command can run in the session any more."""

    reason: str


class SessionCancelled(CancelledFor, frozen=True, tag="session-cancelled", tag_field="type"):
    """Conversation control cancelled the session's active turn."""


class SessionRead(ReadUpTo, frozen=True, tag="session-read", tag_field="type"):
    """A reader has seen the session up to its version ``version``."""


SessionEvent = (SessionOpened | SessionTurnReserved | SessionTurnStarted | SessionTurnFinished
                | SessionStorageRefreshed | SessionEvicted | SessionCancelled | SessionRead)

class JobToken(msgspec.Struct, frozen=True):
    """A runner job's token as the ledger knows it (its sha256 only; the value is never
    stored): the issue command and its event share it."""

    runner_job_id: str
    session_id: str
    run_id: str
    token_sha256: str
    at: str
    task_id: str = ""
    attempt_id: str = ""


class JobTokenIssued(JobToken, frozen=True, tag="job-token-issued", tag_field="type"):
    """A runner job's bearer token was issued. Every token issued for a job stays valid for
    that job until the job ends."""


class JobClaimed(msgspec.Struct, frozen=True, tag="job-claimed", tag_field="type"):
    """The first runner that claimed the job's start: only it starts the backend."""

    claimant: str
    at: str
    startup: dict[str, object] | None = None
    """The claimant's startup event: its work-ready capability summary (SPEC 2.11, 6),
    bounded to those fields."""


class JobHeartbeat(msgspec.Struct, frozen=True, tag="job-heartbeat", tag_field="type"):
    """The claimed runner is alive (its lease is renewed)."""

    at: str


class JobAssemblyReported(msgspec.Struct, frozen=True, tag="job-assembly-reported",
                          tag_field="type"):
    """The runner's bounded assembly event (names, paths, hashes; never values)."""

    assembly: dict[str, Any]


class JobThreadReported(msgspec.Struct, frozen=True, tag="job-thread-reported",
                        tag_field="type"):
    """The thread the backend started (``start``) or resumed (``resume``)."""

    thread_id: str
    mode: str


class JobExit(msgspec.Struct, frozen=True):
    """How a runner job ended, as its runner reports it: command and event share it."""

    state: str
    exit_code: int | None = None
    failure_kind: str | None = None
    failure_message: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    """When the backend (or, when none ran, the runner's work) started and ended (ISO 8601)."""
    usage: TokenUsage | msgspec.UnsetType = msgspec.UNSET
    """The backend's token usage; unset (not encoded, so older events encode as before)
    when the runner reported none."""


class JobExited(JobExit, frozen=True, tag="job-exited", tag_field="type"):
    """The runner reported its exit (recorded once)."""


class JobEnded(msgspec.Struct, frozen=True, tag="job-ended", tag_field="type"):
    """The manager closed the job (finished, cancelled or its lease expired): its tokens are
    refused from now on."""

    reason: str


RunnerJobEvent = (JobTokenIssued | JobClaimed | JobHeartbeat | JobAssemblyReported
                  | JobThreadReported | JobExited | JobEnded)

class ApiKeyFacts(msgspec.Struct, frozen=True):
    """An API key as the ledger knows it (DESIGN 12): its sha256 and a display prefix,
    never the key; the issue command and its event share it."""

    key_id: str
    key_sha256: str
    prefix: str
    tenant: str
    """The key's tenant, or ``*`` for every tenant (admins)."""
    roles: list[str]
    projects: list[str] = msgspec.field(default_factory=list)
    """The projects the key is limited to (empty: every project of its tenant)."""
    expires_at: str | None = None
    """When the key stops being accepted (ISO 8601), or never."""


class KeyIssued(ApiKeyFacts, frozen=True, tag="key-issued", tag_field="type"):
    """An API key was issued (the key itself was shown once, to its creator)."""


class KeyRevoked(msgspec.Struct, frozen=True, tag="key-revoked", tag_field="type"):
    """An API key was revoked: it is refused from now on."""

    reason: str | None = None


ApiKeyEvent = KeyIssued | KeyRevoked

LedgerEvent = TaskEvent | RunEvent | SessionEvent | RunnerJobEvent | ApiKeyEvent
"""Any stored event, of any stream."""

TASK_CHANGING_EVENTS: tuple[type[msgspec.Struct], ...] = (
    TaskSubmitted, TaskCancelled, AttemptReserved, AttemptMaterialized,
    AttemptMaterializationFailed, AttemptFinished, JudgeRecorded,
)
"""Events that change the task itself (bump ``version``); a read changes only a cursor."""

EVENT_TYPES: dict[type[msgspec.Struct], str] = {
    kind: kind.__struct_config__.tag
    for kind in (*TaskEvent.__args__, *RunEvent.__args__, *SessionEvent.__args__,
                 *RunnerJobEvent.__args__, *ApiKeyEvent.__args__)
}

event_encoder = msgspec.json.Encoder()
task_event_decoder = msgspec.json.Decoder(TaskEvent)
run_event_decoder = msgspec.json.Decoder(RunEvent)
session_event_decoder = msgspec.json.Decoder(SessionEvent)
runner_job_event_decoder = msgspec.json.Decoder(RunnerJobEvent)
api_key_event_decoder = msgspec.json.Decoder(ApiKeyEvent)


def event_type_of(event: msgspec.Struct) -> str:
    """The stored tag of an event."""
    return EVENT_TYPES[type(event)]
