"""Judge run projection: one row per judge verdict on an attempt (SPEC 2.3)."""

from __future__ import annotations

from ledger.events import JudgeRecorded
from ledger.streams import RecordedEntry
from ledger.task import STREAM_TYPE as TASK_STREAM
from projections.projection import Fold, Projection, Rows
from projections.rows import JudgeRunRow


def evolve(_row: JudgeRunRow | None, entry: RecordedEntry) -> JudgeRunRow:
    """The row a recorded verdict makes (a verdict is never changed afterwards)."""
    event = entry.event
    assert isinstance(event, JudgeRecorded)
    return JudgeRunRow(
        task_id=entry.stream_id, judge_id=event.judge_id, attempt_id=event.attempt_id,
        judge=event.judge, result=event.result, failure_kind=event.failure_kind,
        retry_suggested=event.retry_suggested, retry_reason=event.retry_reason,
        summary=event.summary, request=event.request, change_seq=entry.change_seq,
        created_at=entry.recorded_at)


def _judge_key(entry: RecordedEntry, _rows: Rows) -> tuple[str, str]:
    event = entry.event
    assert isinstance(event, JudgeRecorded)
    return (entry.stream_id, event.judge_id)


_RECORDED = frozenset({JudgeRecorded})
JUDGE_RUNS = Projection("judge_run", JudgeRunRow, key=("task_id", "judge_id"), origin=Fold(
    TASK_STREAM, _judge_key, evolve, events=_RECORDED, created_by=_RECORDED))
PROJECTIONS = (JUDGE_RUNS,)
