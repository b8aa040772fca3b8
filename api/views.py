"""Conversions from projection rows and query results to wire types (one place)."""

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


def _task_session_path(latest_attempt: JsonObject | None) -> str | None:
    return session_path(latest_attempt["sessionId"]) if latest_attempt else None


def latest_attempt(stored: JsonObject | None) -> JsonObject | None:
    """The ``latestAttempt`` answer of a stored summary: ``sessionPath`` computed here (a
    projection holds no HTTP path) and placed right after ``sessionId``."""
    if stored is None:
        return None
    shown: JsonObject = {}
    for name, value in stored.items():
        if name == "sessionPath":
            continue
        shown[name] = value
        if name == "sessionId":
            shown["sessionPath"] = session_path(value)
    return shown


def supervisor(task_id: str, queue: str, state: TaskStatus, change_seq: int,
               last_attempt_id: str | None, budgets: Budgets) -> wire.Supervisor:
    """Phase, last activity (changeSeq and id), the queue's timeout budget, what to run next."""
    recovery = RECOVERY[state].format(task=task_id)
    return wire.Supervisor(
        phase=PHASE[state], last_activity_seq=change_seq,
        last_activity_id=last_attempt_id or task_id,
        timeout_budget=budgets.get(queue), recovery=recovery)


def _attempt_id(latest_attempt: JsonObject | None) -> str | None:
    return latest_attempt["attemptId"] if latest_attempt else None


def task_detail(row: TaskSummaryRow, contract: JsonObject, budgets: Budgets,
                work_ready: JsonObject | None = None) -> wire.TaskDetail:
    """The task detail of a summary row and its contract."""
    sup = supervisor(row.task_id, row.queue, row.state, row.change_seq,
                     _attempt_id(row.latest_attempt), budgets)
    fields = msgspec.structs.asdict(row)
    fields["latest_attempt"] = latest_attempt(row.latest_attempt)
    del fields["latest_started_at"]
    return wire.TaskDetail(**fields, session_path=_task_session_path(row.latest_attempt),
                           contract=contract, supervisor=sup, work_ready=work_ready)


def task_list(page: TaskPage, budgets: Budgets) -> wire.TaskList:
    """A list page."""
    items = [
        wire.TaskItem(**{**msgspec.structs.asdict(row),
                         "latest_attempt": latest_attempt(row.latest_attempt)},
                      session_path=_task_session_path(row.latest_attempt),
                      supervisor=supervisor(row.task_id, row.queue, row.state, row.change_seq,
                                            _attempt_id(row.latest_attempt), budgets))
        for row in page.rows
    ]
    return wire.TaskList(items=items, next_cursor=page.next_cursor, change_seq=page.high_water)


def attempt(row: AttemptRow, budgets: Budgets, queue: str,
            judges: Sequence[JudgeRunRow] = ()) -> wire.Attempt:
    """One attempt of the history, with the judge runs recorded on it."""
    started, finished = row.started_at, row.finished_at
    duration = (int((finished - started).total_seconds() * 1000)
                if started is not None and finished is not None else None)
    reserved = row.state == AttemptStatus.RESERVED
    sup = supervisor(row.task_id, queue,
                     TaskStatus.PENDING if reserved else TaskStatus(row.state), row.change_seq,
                     row.attempt_id, budgets)
    if reserved:
        sup = msgspec.structs.replace(
            sup, phase="reserved",
            recovery=("retry with the same --idempotency-key to resume"
                      if row.idempotency_key else f"svc queue dispatch {row.task_id}"))
    output = wire.OutputRef(session_id=row.session_id, runner_job_id=row.runner_job_id,
                            path=f"{session_path(row.session_id)}/output")
    return wire.Attempt(**msgspec.structs.asdict(row), session_path=session_path(row.session_id),
                        duration_ms=duration, supervisor=sup, output_ref=output,
                        judge_runs=[judge_run(j) for j in judges
                                    if j.attempt_id == row.attempt_id])


def judge_run(row: JudgeRunRow) -> wire.JudgeRun:
    """A recorded judge run, linked to its attempt by (taskId, attemptId)."""
    return wire.JudgeRun(**msgspec.structs.asdict(row))


def queue_stats(queue: str | None, result: StatsResult) -> wire.QueueStats:
    """The stats answer."""
    rows = [wire.StatsRow(**msgspec.structs.asdict(r)) for r in result.rows]
    return wire.QueueStats(
        queue=queue, total=sum(result.by_state.values()), by_state=result.by_state,
        by_lane=result.by_lane, by_backend_profile=result.by_profile, rows=rows,
        truncated=result.truncated, change_seq=result.high_water,
    )


def commander(queue: str | None, reader_id: str | None, result: CommanderResult,
              budgets: Budgets) -> wire.CommanderView:
    """The commander answer."""
    items = [_commander_item(item, budgets) for item in result.items]
    return wire.CommanderView(queue=queue, reader_id=reader_id, by_state=result.stats.by_state,
                              items=items, change_seq=result.stats.high_water)


def _commander_item(item: CommanderRow, budgets: Budgets) -> wire.CommanderItem:
    sup = supervisor(item.task_id, item.queue, item.state, item.change_seq,
                     _attempt_id(item.latest_attempt), budgets)
    return wire.CommanderItem(
        task_id=item.task_id, queue=item.queue, lane=item.lane, title=item.title,
        state=item.state, version=item.version, unread=item.unread,
        session_path=_task_session_path(item.latest_attempt), supervisor=sup,
        failure_kind=item.latest_attempt.get("failureKind") if item.latest_attempt else None,
    )


def session_item(row: SessionHead) -> sw.SessionItem:
    """A session of a list."""
    return sw.SessionItem(**msgspec.structs.asdict(row))


def session_detail(row: SessionView, turns: list[TurnFields], output_last_seq: int,
                   trace_last_seq: int, reader_id: str) -> sw.SessionDetail:
    """A session with its storage, recent turns and line heads."""
    fields = msgspec.structs.asdict(row)
    fields["storage"] = sw.Storage(**msgspec.structs.asdict(row.storage))
    return sw.SessionDetail(
        **fields, recent_turns=[sw.Turn(**msgspec.structs.asdict(t)) for t in turns],
        output_last_seq=output_last_seq, trace_last_seq=trace_last_seq, reader_id=reader_id,
        session_path=session_path(row.session_id))


def runner_job(row: RunView) -> wire.RunnerJob:
    """The runner-job view of a run."""
    return wire.RunnerJob(**msgspec.structs.asdict(row))


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
