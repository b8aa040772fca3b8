"""Wire types: small camelCase msgspec Structs, separate from events and projection rows
(each answer type stands alone; ``api.views`` maps rows onto it field by field)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from ledger.states import AttemptStatus, RunStatus, TaskStatus
from projections.rows import JsonObject
from runner_assembly.assembly import model
from runner_assembly.contract.messages import IDENTIFIER_PATTERN as IDENTIFIER_PATTERN
from runner_assembly.contract.messages import Identifier as Identifier

QUEUE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$"
QueueName = Annotated[str, Meta(min_length=1, max_length=128, pattern=QUEUE_PATTERN)]
Title = Annotated[str, Meta(min_length=1, max_length=300)]
Prompt = Annotated[str, Meta(min_length=1, max_length=65536)]
Reason = Annotated[str, Meta(min_length=1, max_length=1000)]
Priority = Annotated[int, Meta(ge=0, le=100)]
BackendProfile = Literal["profile-1", "profile-2", "profile-3", "profile-4"]
FailureKindName = Annotated[str, Meta(min_length=1, max_length=64,
                                       pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")]
TaskStateName = Literal["pending", "running", "completed", "failed", "blocked", "cancelled"]


class Camel(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True):
    """Base of request bodies: camelCase names, unknown fields refused."""


class TaskPayload(Camel, frozen=True):
    """``payload`` of a submitted task; ``threadId`` resumes that thread of the session."""

    prompt: Prompt
    thread_id: Annotated[str, Meta(min_length=1, max_length=128,
                                   pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")] | None = None


ReferenceKind = Literal["issue", "change-request", "repository", "commit", "document",
                        "external"]


class TaskReference(Camel, frozen=True, omit_defaults=True):
    """An explicit reference of a task (SPEC 2.3): its kind, a ``url`` or an ``id`` (at least
    one), and an optional title."""

    kind: ReferenceKind
    url: Annotated[str, Meta(min_length=1, max_length=2048)] | None = None
    id: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    title: Title | None = None

    def __post_init__(self) -> None:
        if self.url is None and self.id is None:
            raise ValueError("a reference needs a url or an id")


URL_OR_ID_SCHEMA = {"anyOf": [
    {"required": ["url"], "properties": {"url": {"type": "string"}}},
    {"required": ["id"], "properties": {"id": {"type": "string"}}}]}
"""A reference names a ``url`` or an ``id``, as the document says (decoding checks it)."""
Reference = Annotated[TaskReference, Meta(extra_json_schema=URL_OR_ID_SCHEMA)]


class SubmitBody(Camel, frozen=True):
    """Body of ``POST /api/v1/queue/tasks``."""

    tenant_id: Identifier
    project_id: Identifier
    queue: QueueName
    title: Title
    payload: TaskPayload
    priority: Priority = 50
    backend_profile: BackendProfile | None = None
    workspace_ref: model.WorkspaceRef | None = None
    resource_bundle_ref: model.ResourceBundleRef | None = None
    session_ref: model.SessionRef | None = None
    execution_policy: model.ExecutionPolicy | None = None
    references: Annotated[list[Reference], Meta(max_length=64)] | None = None
    metadata: JsonObject | None = None
    provider_id: Identifier | None = None
    """The provider of the run policy (SPEC 2.7), carried into the runner job plan."""


class CancelBody(Camel, frozen=True):
    """Body of ``POST …/cancel`` (may be empty)."""

    reason: Reason | None = None


class ReadBody(Camel, frozen=True):
    """Body of ``POST …/read``."""

    reader_id: Identifier


class DispatchBody(Camel, frozen=True):
    """Body of ``POST …/dispatch`` (may be empty)."""

    attempt_id: Identifier | None = None
    transient_env: model.TransientEnv | None = None
    dry_run: bool = False


class RunnerJobBody(Camel, frozen=True):
    """Body of ``POST /api/v1/runs/{runId}/runner-job`` (may be empty)."""

    transient_env: model.TransientEnv | None = None
    dry_run: bool = False


class RetryBody(Camel, frozen=True):
    """Body of ``POST …/retry``: exactly these three fields (SPEC 2.4)."""

    idempotency_key: Identifier
    reason: Reason
    dry_run: bool = False


class Supervisor(msgspec.Struct, rename="camel"):
    """The compact supervisor of SPEC 4.3 rule 8: phase, last activity, budget, recovery."""

    phase: str
    last_activity_seq: int
    last_activity_id: str
    timeout_budget: str | None
    recovery: str


class Answer(msgspec.Struct, rename="camel", frozen=True):
    """Base of the answers built from projection rows: camelCase names. Each subclass states
    ``kw_only`` itself (msgspec does not inherit it)."""


class TokenUsage(Answer, kw_only=True, frozen=True):
    """Token counts a backend reported (docs/backends.md), or their sum in the stats."""

    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_output_tokens: int


class LatestAttempt(Answer, kw_only=True, frozen=True):
    """A task's latest attempt in brief (``latestAttempt``), with its session's path."""

    attempt_id: str
    retry_index: int
    state: AttemptStatus
    run_id: str
    command_id: str
    runner_job_id: str
    session_id: str
    session_path: str
    failure_kind: str | None
    failure_message: str | None
    usage: TokenUsage | None
    """The token usage its job reported; null when none (not yet ended, or not reported)."""


class TaskItem(Answer, kw_only=True, frozen=True):
    """A task as it appears in lists."""

    task_id: str
    tenant_id: str
    project_id: str
    queue: str
    lane: str
    title: str
    priority: int
    state: TaskStatus
    backend_profile: str | None
    summary: str
    version: int
    change_seq: int
    latest_attempt: LatestAttempt | None
    session_path: str | None
    created_at: datetime
    updated_at: datetime
    supervisor: Supervisor


class TaskDetail(TaskItem, kw_only=True, frozen=True):
    """The full task detail: the list item plus the submitted contract."""

    payload_hash: str
    creator: str
    contract: JsonObject
    work_ready: JsonObject | None = None
    attempt_count: int = 0
    """Statistic fields (SPEC 2.3): attempts so far; the latest ended attempt's run time."""
    last_duration_ms: int | None = None


class Attempt(msgspec.Struct, rename="camel", kw_only=True):
    """One attempt of the formal attempt history (SPEC 2.2)."""

    attempt_id: str
    task_id: str
    retry_index: int
    state: AttemptStatus
    idempotency_key: str | None
    reason: str | None
    previous_attempt_id: str | None
    run_id: str
    command_id: str
    runner_job_id: str
    session_id: str
    session_path: str
    backend_profile: str
    failure_kind: str | None
    failure_message: str | None
    exit_code: int | None
    change_seq: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    duration_ms: int | None
    supervisor: Supervisor
    usage: TokenUsage | None
    """The token usage its job reported; null when none (not yet ended, or not reported)."""
    output_ref: OutputRef | None = None
    judge_runs: list[JudgeRun] = msgspec.field(default_factory=list)


class OutputRef(msgspec.Struct, rename="camel", kw_only=True):
    """A bounded reference to an attempt's output (SPEC 2.3): where to read it, never the
    output itself."""

    session_id: str
    runner_job_id: str
    path: str


JudgeResult = Literal["pass", "fail", "inconclusive"]


class JudgeBody(Camel, frozen=True):
    """Body of ``POST …/attempts/{attemptId}/judge``: a judge's verdict on an ended attempt.
    It is recorded only; a suggested retry is never carried out (SPEC 4.3 rule 6.10)."""

    judge: Identifier
    request: Annotated[JsonObject, Meta(max_length=64)]
    result: JudgeResult
    failure_kind: FailureKindName | None = None
    retry_suggested: bool = False
    retry_reason: Reason | None = None
    summary: Reason | None = None
    judge_id: Identifier | None = None
    dry_run: bool = False


class JudgeRun(Answer, kw_only=True, frozen=True):
    """A recorded judge run (SPEC 2.3), linked to its attempt by (taskId, attemptId)."""

    task_id: str
    judge_id: str
    attempt_id: str
    judge: str
    result: str
    failure_kind: str | None
    retry_suggested: bool
    retry_reason: str | None
    summary: str | None
    request: JsonObject
    change_seq: int
    created_at: datetime


class AttemptList(msgspec.Struct, rename="camel"):
    """A page of the attempt history, oldest first."""

    items: list[Attempt]
    next_cursor: str | None
    change_seq: int


class TaskList(msgspec.Struct, rename="camel"):
    """A page of tasks with the changeSeq high-water mark to poll from."""

    items: list[TaskItem]
    next_cursor: str | None
    change_seq: int


class StatsRow(Answer, kw_only=True, frozen=True):
    """One counter of the queue stats."""

    queue: str
    lane: str
    state: TaskStatus
    backend_profile: str | None
    count: int


class QueueStats(msgspec.Struct, rename="camel"):
    """Task counts by queue, lane, state and backend profile."""

    queue: str | None
    total: int
    by_state: dict[str, int]
    by_lane: dict[str, int]
    by_backend_profile: dict[str, int]
    rows: list[StatsRow]
    truncated: bool
    change_seq: int
    tokens_by_queue: dict[str, TokenUsage] = msgspec.field(default_factory=dict)
    tokens_by_backend_profile: dict[str, TokenUsage] = msgspec.field(default_factory=dict)
    """Token usage summed over the ended attempts that reported some, per queue and per the
    backend profile they ran on."""


class CommanderItem(Answer, kw_only=True, frozen=True):
    """A task in the commander view, most urgent first."""

    task_id: str
    queue: str
    lane: str
    title: str
    state: TaskStatus
    version: int
    unread: bool | None
    session_path: str | None
    supervisor: Supervisor
    failure_kind: str | None = None
    """The latest attempt's failure classification (SPEC 4.3 rule 8), if any."""


class CommanderView(msgspec.Struct, rename="camel"):
    """The commander aggregate: counts by state and the tasks needing attention."""

    queue: str | None
    reader_id: str | None
    by_state: dict[str, int]
    items: list[CommanderItem]
    change_seq: int


class RunnerJob(Answer, kw_only=True, frozen=True):
    """A run's runner job: its value-free plan, status and the runner's assembly event."""

    run_id: str
    task_id: str
    attempt_id: str
    attempt_state: AttemptStatus | None
    runner_job_id: str
    session_id: str
    backend_profile: str
    driver: str | None
    status: RunStatus
    exit_code: int | None
    failure_kind: str | None
    failure_message: str | None
    plan: JsonObject | None
    assembly: JsonObject | None
    runner_startup: JsonObject | None = None
    """The runner's startup event: its work-ready capability summary (SPEC 2.11, 6)."""
    values_printed: bool = False
    change_seq: int


class DryRun(msgspec.Struct, rename="camel"):
    """Answer of every mutation called with ``dryRun``: a plan, nothing changed."""

    mutation: bool
    plan: JsonObject


class Live(msgspec.Struct, kw_only=True):
    """Liveness: the process answers (nothing else is asked)."""

    status: str
    version: str


class Health(msgspec.Struct, rename="camel", kw_only=True):
    """Liveness and readiness answer, with the work-ready capability summary."""

    status: str
    version: str
    database: str
    change_seq: int
    work_ready: JsonObject
    migrations: str | None = None
    sandbox: str | None = None
    """How local backends are confined: ``bwrap`` or ``off`` (None with Kubernetes)."""
    backend_network: str | None = None
    """The backends' network: ``pasta`` (their own namespace, no host loopback service but
    ``SVC_BACKEND_LOOPBACK_PORTS``), ``host`` (unsandboxed), ``proxy`` (Kubernetes: a
    namespace with only a loopback, out through the runner's egress proxy) or ``pod``
    (Kubernetes, unsandboxed: the pod's network)."""


class ErrorBody(msgspec.Struct):
    """The error itself: a stable kebab-case code, one line of message, details."""

    code: str
    message: str
    details: JsonObject


class ErrorEnvelope(msgspec.Struct):
    """Every failure answers with this (DESIGN.md 5)."""

    error: ErrorBody


MAX_BATCH = 500
"""The most tasks one batch submit takes (DESIGN 10)."""


class BatchItem(Camel, frozen=True):
    """One task of a batch submit, under its own idempotency key."""

    idempotency_key: Identifier
    task: SubmitBody


class BatchSubmitBody(Camel, frozen=True):
    """Body of ``POST /api/v1/queue/tasks/batch``: 1 to 500 tasks, stored all or none."""

    items: Annotated[list[BatchItem], Meta(min_length=1, max_length=MAX_BATCH)]


class BatchKey(Camel, frozen=True):
    """An item of a batch as read before its task is checked (the task is decoded on its
    own, through the submit's gate)."""

    idempotency_key: Identifier
    task: msgspec.Raw


class BatchEnvelope(Camel, frozen=True):
    """A batch as read before its items are checked one by one (each names its index)."""

    items: Annotated[list[msgspec.Raw], Meta(min_length=1, max_length=MAX_BATCH)]


class BatchSubmitResult(msgspec.Struct, rename="camel"):
    """Answer of a batch submit: each item's task detail, in the order sent."""

    items: list[TaskDetail]
