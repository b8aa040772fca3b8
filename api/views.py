"""Conversions from projection rows and query results to wire types (one place): each
answer is built field by field, so a row's column reaches the wire only when mapped here."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from api import session_wire as sw
from api import wire
from ledger.states import AttemptStatus, TaskStatus
from projections.attempt_summary import AttemptRow
from projections.commander import PHASE
from projections.queries import CommanderResult, StatsResult, TaskPage
from projections.rows import (
    CommanderRow,
    JsonObject,
    JudgeRunRow,
    RunView,
    SessionHead,
    SessionView,
    StatsCounter,
    StorageFields,
    TaskItemRow,
    TurnFields,
)
from projections.task_summary import TaskSummaryRow

SESSION_PATH = "/api/v1/sessions/{}"
_RETRY = 'svc queue retry {task} --idempotency-key <new-key> --reason "<why>"'
RECOVERY = {
    TaskStatus.PENDING: "svc queue dispatch {task}",
    TaskStatus.RUNNING: "svc queue refresh {task}", TaskStatus.FAILED: _RETRY,
    TaskStatus.BLOCKED: _RETRY, TaskStatus.COMPLETED: "none", TaskStatus.CANCELLED: "none",
}
Budgets = dict[str, str]


def session_path(session_id: str) -> str:
    """Where a session lives in the API."""
    return SESSION_PATH.format(session_id)


def latest_attempt(stored: JsonObject | None) -> wire.LatestAttempt | None:
    """The ``latestAttempt`` answer of a stored summary's JSON object, with ``sessionPath``
    computed here (a projection holds no HTTP path)."""
    if stored is None:
        return None
    session_id = stored["sessionId"]
    return wire.LatestAttempt(
        attempt_id=stored["attemptId"], retry_index=stored["retryIndex"],
        state=AttemptStatus(stored["state"]), run_id=stored["runId"],
        command_id=stored["commandId"], runner_job_id=stored["runnerJobId"],
        session_id=session_id, session_path=session_path(session_id),
        failure_kind=stored["failureKind"], failure_message=stored["failureMessage"],
        usage=msgspec.convert(stored["usage"], wire.TokenUsage) if stored.get("usage")
        else None)


def supervisor(task_id: str, queue: str, state: TaskStatus, change_seq: int,
               last_attempt_id: str | None, budgets: Budgets) -> wire.Supervisor:
    """Phase, last activity (changeSeq and id), the queue's timeout budget, what to run next."""
    recovery = RECOVERY[state].format(task=task_id)
    return wire.Supervisor(
        phase=PHASE[state], last_activity_seq=change_seq,
        last_activity_id=last_attempt_id or task_id,
        timeout_budget=budgets.get(queue), recovery=recovery)


def _attempt_id(latest: wire.LatestAttempt | None) -> str | None:
    return latest.attempt_id if latest else None


def _task_item(row: TaskItemRow | TaskSummaryRow, budgets: Budgets) -> wire.TaskItem:
    """The list fields of a task, from a list row or a summary row."""
    latest = latest_attempt(row.latest_attempt)
    return wire.TaskItem(
        task_id=row.task_id, tenant_id=row.tenant_id, project_id=row.project_id,
        queue=row.queue, lane=row.lane, title=row.title, priority=row.priority,
        state=row.state, backend_profile=row.backend_profile, summary=row.summary,
        version=row.version, change_seq=row.change_seq, latest_attempt=latest,
        session_path=latest.session_path if latest else None,
        created_at=row.created_at, updated_at=row.updated_at,
        supervisor=supervisor(row.task_id, row.queue, row.state, row.change_seq,
                              _attempt_id(latest), budgets))


def task_detail(row: TaskSummaryRow, contract: JsonObject, budgets: Budgets,
                work_ready: JsonObject | None = None) -> wire.TaskDetail:
    """The task detail of a summary row and its contract."""
    return wire.TaskDetail(
        **msgspec.structs.asdict(_task_item(row, budgets)),
        payload_hash=row.payload_hash, creator=row.creator, contract=contract,
        work_ready=work_ready, attempt_count=row.attempt_count,
        last_duration_ms=row.last_duration_ms)


def task_list(page: TaskPage, budgets: Budgets) -> wire.TaskList:
    """A list page."""
    return wire.TaskList(items=[_task_item(row, budgets) for row in page.rows],
                         next_cursor=page.next_cursor, change_seq=page.high_water)


def _attempt_supervisor(row: AttemptRow, budgets: Budgets, queue: str) -> wire.Supervisor:
    """An attempt's supervisor: a reserved attempt's phase is ``reserved``, and its recovery
    resumes it."""
    reserved = row.state == AttemptStatus.RESERVED
    sup = supervisor(row.task_id, queue,
                     TaskStatus.PENDING if reserved else TaskStatus(row.state), row.change_seq,
                     row.attempt_id, budgets)
    if not reserved:
        return sup
    return msgspec.structs.replace(
        sup, phase="reserved",
        recovery=("retry with the same --idempotency-key to resume"
                  if row.idempotency_key else f"svc queue dispatch {row.task_id}"))


def attempt(row: AttemptRow, budgets: Budgets, queue: str,
            judges: Sequence[JudgeRunRow] = ()) -> wire.Attempt:
    """One attempt of the history, with the judge runs recorded on it."""
    started, finished = row.started_at, row.finished_at
    duration = (int((finished - started).total_seconds() * 1000)
                if started is not None and finished is not None else None)
    path = session_path(row.session_id)
    return wire.Attempt(
        attempt_id=row.attempt_id, task_id=row.task_id, retry_index=row.retry_index,
        state=row.state, idempotency_key=row.idempotency_key, reason=row.reason,
        previous_attempt_id=row.previous_attempt_id, run_id=row.run_id,
        command_id=row.command_id, runner_job_id=row.runner_job_id,
        session_id=row.session_id, session_path=path, backend_profile=row.backend_profile,
        failure_kind=row.failure_kind, failure_message=row.failure_message,
        exit_code=row.exit_code, change_seq=row.change_seq, created_at=row.created_at,
        started_at=started, finished_at=finished, updated_at=row.updated_at,
        duration_ms=duration, supervisor=_attempt_supervisor(row, budgets, queue),
        usage=attempt_usage(row),
        output_ref=wire.OutputRef(session_id=row.session_id, runner_job_id=row.runner_job_id,
                                  path=f"{path}/output"),
        judge_runs=[judge_run(j) for j in judges if j.attempt_id == row.attempt_id])


def attempt_usage(row: AttemptRow) -> wire.TokenUsage | None:
    """The attempt's token usage, or None when its job reported none."""
    if row.input_tokens is None:
        return None
    return wire.TokenUsage(input_tokens=row.input_tokens,
                           cached_input_tokens=row.cached_input_tokens or 0,
                           output_tokens=row.output_tokens or 0,
                           reasoning_output_tokens=row.reasoning_output_tokens or 0)


def judge_run(row: JudgeRunRow) -> wire.JudgeRun:
    """A recorded judge run, linked to its attempt by (taskId, attemptId)."""
    return wire.JudgeRun(
        task_id=row.task_id, judge_id=row.judge_id, attempt_id=row.attempt_id,
        judge=row.judge, result=row.result, failure_kind=row.failure_kind,
        retry_suggested=row.retry_suggested, retry_reason=row.retry_reason,
        summary=row.summary, request=row.request, change_seq=row.change_seq,
        created_at=row.created_at)


def _stats_row(row: StatsCounter) -> wire.StatsRow:
    return wire.StatsRow(queue=row.queue, lane=row.lane, state=row.state,
                         backend_profile=row.backend_profile, count=row.count)


def queue_stats(queue: str | None, result: StatsResult) -> wire.QueueStats:
    """The stats answer."""
    return wire.QueueStats(
        queue=queue, total=sum(result.by_state.values()), by_state=result.by_state,
        by_lane=result.by_lane, by_backend_profile=result.by_profile,
        rows=[_stats_row(r) for r in result.rows], truncated=result.truncated,
        change_seq=result.high_water,
        tokens_by_queue=_tokens(result.tokens_by_queue),
        tokens_by_backend_profile=_tokens(result.tokens_by_profile),
    )


def _tokens(sums: dict[str, tuple[int, int, int, int]]) -> dict[str, wire.TokenUsage]:
    return {name: wire.TokenUsage(input_tokens=counts[0], cached_input_tokens=counts[1],
                                  output_tokens=counts[2], reasoning_output_tokens=counts[3])
            for name, counts in sums.items()}


def commander(queue: str | None, reader_id: str | None, result: CommanderResult,
              budgets: Budgets) -> wire.CommanderView:
    """The commander answer."""
    items = [_commander_item(item, budgets) for item in result.items]
    return wire.CommanderView(queue=queue, reader_id=reader_id, by_state=result.stats.by_state,
                              items=items, change_seq=result.stats.high_water)


def _commander_item(item: CommanderRow, budgets: Budgets) -> wire.CommanderItem:
    latest = latest_attempt(item.latest_attempt)
    sup = supervisor(item.task_id, item.queue, item.state, item.change_seq,
                     _attempt_id(latest), budgets)
    return wire.CommanderItem(
        task_id=item.task_id, queue=item.queue, lane=item.lane, title=item.title,
        state=item.state, version=item.version, unread=item.unread,
        session_path=latest.session_path if latest else None, supervisor=sup,
        failure_kind=latest.failure_kind if latest else None,
    )


def session_item(row: SessionHead) -> sw.SessionItem:
    """A session of a list."""
    return sw.SessionItem(
        session_id=row.session_id, conversation_id=row.conversation_id,
        thread_id=row.thread_id, backend_profile=row.backend_profile, state=row.state,
        unread=row.unread, storage_kind=row.storage_kind, latest_run_id=row.latest_run_id,
        latest_task_id=row.latest_task_id, turns=row.turns, failure_kind=row.failure_kind,
        version=row.version, change_seq=row.change_seq, expires_at=row.expires_at,
        updated_at=row.updated_at)


def _storage(row: StorageFields) -> sw.Storage:
    return sw.Storage(
        storage_kind=row.storage_kind, pvc_name=row.pvc_name, pvc_phase=row.pvc_phase,
        storage_size_bytes=row.storage_size_bytes,
        storage_files_count=row.storage_files_count, storage_sha256=row.storage_sha256,
        storage_updated_at=row.storage_updated_at, expires_at=row.expires_at)


def _turn(row: TurnFields) -> sw.Turn:
    return sw.Turn(
        run_id=row.run_id, command_id=row.command_id, runner_job_id=row.runner_job_id,
        task_id=row.task_id, thread_id=row.thread_id, resumed=row.resumed, status=row.status,
        failure_kind=row.failure_kind, exit_code=row.exit_code, created_at=row.created_at,
        finished_at=row.finished_at)


def session_detail(row: SessionView, turns: list[TurnFields], output_last_seq: int,
                   trace_last_seq: int, reader_id: str) -> sw.SessionDetail:
    """A session with its storage, recent turns and line heads."""
    return sw.SessionDetail(
        **msgspec.structs.asdict(session_item(row)), run_id=row.run_id,
        storage=_storage(row.storage), recent_turns=[_turn(t) for t in turns],
        output_last_seq=output_last_seq, trace_last_seq=trace_last_seq, reader_id=reader_id,
        session_path=session_path(row.session_id))


def runner_job(row: RunView) -> wire.RunnerJob:
    """The runner-job view of a run."""
    return wire.RunnerJob(
        run_id=row.run_id, task_id=row.task_id, attempt_id=row.attempt_id,
        attempt_state=row.attempt_state, runner_job_id=row.runner_job_id,
        session_id=row.session_id, backend_profile=row.backend_profile, driver=row.driver,
        status=row.status, exit_code=row.exit_code, failure_kind=row.failure_kind,
        failure_message=row.failure_message, plan=row.plan, assembly=row.assembly,
        runner_startup=row.runner_startup, change_seq=row.change_seq)


def plan(command: str, task_id: str | None, before: object, after: object,
         events: Sequence[msgspec.Struct], **extra: object) -> wire.DryRun:
    """The dry-run answer: what the command would append, and the state it would leave."""
    from ledger.events import event_type_of

    body: JsonObject = {
        "command": command,
        "taskId": task_id,
        "stateBefore": getattr(before, "state", None),
        "stateAfter": getattr(after, "state", None),
        "versionBefore": getattr(before, "version", None),
        "versionAfter": getattr(after, "version", None),
        "events": [event_type_of(e) for e in events],
        **extra,
    }
    return wire.DryRun(mutation=False, plan=body)
