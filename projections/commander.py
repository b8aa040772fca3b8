"""Commander view projection: per task, how urgently it needs a person, and what to do next."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from ledger.states import TaskStatus
from projections.projection import Derived, Projection
from projections.task_summary import TASKS, TaskSummaryRow

# Lower ranks come first: blocked and failed tasks need a decision, then live work.
ATTENTION = {TaskStatus.BLOCKED: 0, TaskStatus.FAILED: 1, TaskStatus.RUNNING: 2,
             TaskStatus.PENDING: 3, TaskStatus.COMPLETED: 4, TaskStatus.CANCELLED: 5}
PHASE = {
    TaskStatus.PENDING: "awaiting-dispatch", TaskStatus.RUNNING: "executing",
    TaskStatus.BLOCKED: "blocked", TaskStatus.FAILED: "failed", TaskStatus.COMPLETED: "done",
    TaskStatus.CANCELLED: "cancelled",
}
RECOVERY = {
    TaskStatus.PENDING: "dispatch", TaskStatus.RUNNING: "refresh", TaskStatus.BLOCKED: "retry",
    TaskStatus.FAILED: "retry", TaskStatus.COMPLETED: "none", TaskStatus.CANCELLED: "none",
}


class CommanderRow(msgspec.Struct, frozen=True):
    """A row of ``commander_view``."""

    task_id: str
    queue: str
    attention: int
    change_seq: int
    phase: str
    recovery: str
    tenant_id: str = ""
    project_id: str = ""


def derive(row: TaskSummaryRow) -> CommanderRow:
    """The commander entry of a task summary row."""
    return CommanderRow(
        task_id=row.task_id, queue=row.queue, attention=ATTENTION[row.state],
        change_seq=row.change_seq, phase=PHASE[row.state], recovery=RECOVERY[row.state],
        tenant_id=row.tenant_id, project_id=row.project_id,
    )


def _derive(_before: TaskSummaryRow | None, after: TaskSummaryRow) -> Iterator[CommanderRow]:
    yield derive(after)


COMMANDER = Projection("commander_view", CommanderRow, key=("task_id",),
                       origin=Derived(TASKS, _derive))
PROJECTIONS = (COMMANDER,)
