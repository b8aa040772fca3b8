"""Read cursor projection: per reader and task, the task version the reader has seen."""

from __future__ import annotations

import msgspec

from ledger.events import TaskReadCursorAdvanced
from ledger.streams import RecordedEntry
from ledger.task import STREAM_TYPE as TASK_STREAM
from projections.projection import Fold, Projection, Rows


class ReadCursorRow(msgspec.Struct, frozen=True):
    """A row of ``read_cursor``."""

    reader_id: str
    task_id: str
    version: int
    change_seq: int


def evolve(entry: RecordedEntry) -> ReadCursorRow | None:
    """The cursor row an entry sets, if any."""
    event = entry.event
    if type(event) is TaskReadCursorAdvanced:
        assert isinstance(event, TaskReadCursorAdvanced)
        return ReadCursorRow(event.reader_id, entry.stream_id, event.version, entry.change_seq)
    return None


def _cursor_key(entry: RecordedEntry, _rows: Rows) -> tuple[str, str]:
    event = entry.event
    assert isinstance(event, TaskReadCursorAdvanced)
    return (event.reader_id, entry.stream_id)


def _evolve(_row: ReadCursorRow | None, entry: RecordedEntry) -> ReadCursorRow | None:
    return evolve(entry)


_ADVANCED = frozenset({TaskReadCursorAdvanced})
CURSORS = Projection("read_cursor", ReadCursorRow, key=("reader_id", "task_id"), origin=Fold(
    TASK_STREAM, _cursor_key, _evolve, events=_ADVANCED, created_by=_ADVANCED))
PROJECTIONS = (CURSORS,)
