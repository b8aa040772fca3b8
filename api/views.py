"""Conversions from projection rows and query results to wire types (one place)."""

from __future__ import annotations

from typing import Any

import msgspec

from api import wire
from projections.queries import CommanderResult, StatsResult, TaskPage
from projections.task_summary import TaskSummaryRow

_ITEM_FIELDS = tuple(wire.TaskItem.__struct_fields__)


def task_detail(row: TaskSummaryRow, contract: dict[str, Any]) -> wire.TaskDetail:
    """The task detail of a summary row and its contract."""
    return wire.TaskDetail(**msgspec.structs.asdict(row), contract=contract)


def task_list(page: TaskPage) -> wire.TaskList:
    """A list page."""
    items = [wire.TaskItem(**{k: row[k] for k in _ITEM_FIELDS}) for row in page.rows]
    return wire.TaskList(items=items, next_cursor=page.next_cursor, change_seq=page.high_water)


def queue_stats(queue: str | None, result: StatsResult) -> wire.QueueStats:
    """The stats answer."""
    rows = [wire.StatsRow(q, lane, state, profile, count)
            for q, lane, state, profile, count in result.rows]
    return wire.QueueStats(
        queue=queue, total=sum(result.by_state.values()), by_state=result.by_state,
        by_lane=result.by_lane, by_backend_profile=result.by_profile, rows=rows,
        truncated=result.truncated, change_seq=result.high_water,
    )


def commander(queue: str | None, reader_id: str | None,
              result: CommanderResult) -> wire.CommanderView:
    """The commander answer."""
    items = [_commander_item(item) for item in result.items]
    return wire.CommanderView(queue=queue, reader_id=reader_id, by_state=result.stats.by_state,
                              items=items, change_seq=result.stats.high_water)


def _commander_item(item: dict[str, Any]) -> wire.CommanderItem:
    supervisor = wire.Supervisor(phase=item["phase"], last_activity_seq=item["change_seq"],
                                 timeout_budget=None, recovery=item["recovery"])
    return wire.CommanderItem(
        task_id=item["task_id"], queue=item["queue"], lane=item["lane"], title=item["title"],
        state=item["state"], version=item["version"], unread=item["unread"],
        session_path=item["session_path"], supervisor=supervisor,
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
