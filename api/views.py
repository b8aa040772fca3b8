"""Conversions from projection rows and query results to wire types (one place)."""

from __future__ import annotations

from typing import Any

import msgspec

from api import wire
from ledger.states import AttemptStatus, TaskStatus
from projections.commander import PHASE
from projections.queries import CommanderResult, StatsResult, TaskPage
from projections.task_summary import SESSION_PATH, TaskSummaryRow

_ITEM_FIELDS = tuple(f for f in wire.TaskItem.__struct_fields__ if f != "supervisor")
_RETRY = 'svc queue retry {task} --idempotency-key <new-key> --reason "<why>"'
RECOVERY = {
    TaskStatus.PENDING: "svc queue dispatch {task}",
    TaskStatus.RUNNING: "svc queue refresh {task}", TaskStatus.FAILED: _RETRY,
    TaskStatus.BLOCKED: _RETRY, TaskStatus.COMPLETED: "none", TaskStatus.CANCELLED: "none",
}
Budgets = dict[str, str]


def supervisor(task_id: str, queue: str, state: TaskStatus, change_seq: int,
               attempt: dict[str, Any] | None, budgets: Budgets) -> wire.Supervisor:
    """Phase, last activity (changeSeq and id), the queue's timeout budget, what to run next."""
    recovery = RECOVERY[state].format(task=task_id)
    return wire.Supervisor(
        phase=PHASE[state], last_activity_seq=change_seq,
        last_activity_id=attempt["attemptId"] if attempt else task_id,
        timeout_budget=budgets.get(queue), recovery=recovery)


def task_detail(row: TaskSummaryRow, contract: dict[str, Any], budgets: Budgets,
                work_ready: dict[str, Any] | None = None) -> wire.TaskDetail:
    """The task detail of a summary row and its contract."""
    sup = supervisor(row.task_id, row.queue, row.state, row.change_seq, row.latest_attempt,
                     budgets)
    return wire.TaskDetail(**msgspec.structs.asdict(row), contract=contract, supervisor=sup,
                           work_ready=work_ready)


def task_list(page: TaskPage, budgets: Budgets) -> wire.TaskList:
    """A list page."""
    items = [
        wire.TaskItem(**{k: row[k] for k in _ITEM_FIELDS},
                      supervisor=supervisor(row["task_id"], row["queue"], row["state"],
                                            row["change_seq"], row["latest_attempt"], budgets))
        for row in page.rows
    ]
    return wire.TaskList(items=items, next_cursor=page.next_cursor, change_seq=page.high_water)


def attempt(row: dict[str, Any], budgets: Budgets, queue: str) -> wire.Attempt:
    """One attempt of the history."""
    started, finished = row["started_at"], row["finished_at"]
    duration = (int((finished - started).total_seconds() * 1000)
                if started is not None and finished is not None else None)
    reserved = row["state"] == AttemptStatus.RESERVED
    sup = supervisor(row["task_id"], queue,
                     TaskStatus.PENDING if reserved else TaskStatus(row["state"]),
                     row["change_seq"], {"attemptId": row["attempt_id"],
                                         "sessionId": row["session_id"]}, budgets)
    if reserved:
        sup = msgspec.structs.replace(
            sup, phase="reserved",
            recovery=("retry with the same --idempotency-key to resume"
                      if row["idempotency_key"] else f"svc queue dispatch {row['task_id']}"))
    return wire.Attempt(**row, session_path=SESSION_PATH.format(row["session_id"]),
                        duration_ms=duration, supervisor=sup)


def queue_stats(queue: str | None, result: StatsResult) -> wire.QueueStats:
    """The stats answer."""
    rows = [wire.StatsRow(q, lane, TaskStatus(state), profile, count)
            for q, lane, state, profile, count in result.rows]
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


def _commander_item(item: dict[str, Any], budgets: Budgets) -> wire.CommanderItem:
    sup = supervisor(item["task_id"], item["queue"], item["state"], item["change_seq"],
                     item["latest_attempt"], budgets)
    return wire.CommanderItem(
        task_id=item["task_id"], queue=item["queue"], lane=item["lane"], title=item["title"],
        state=item["state"], version=item["version"], unread=item["unread"],
        session_path=item["session_path"], supervisor=sup,
    )


def plan(command: str, task_id: str | None, before: Any, after: Any,
         events: list[Any], **extra: Any) -> wire.DryRun:
    """The dry-run answer: what the command would append, and the state it would leave."""
    from ledger.events import event_type_of

    body: dict[str, Any] = {
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
