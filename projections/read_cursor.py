"""Read cursor projection: per reader and task, the task version the reader has seen."""

from __future__ import annotations

import msgspec

from ledger.events import TaskReadCursorAdvanced
from ledger.streams import RecordedEntry
from projections.projection import Projection


class ReadCursorRow(msgspec.Struct, frozen=True):
    """A row of ``read_cursor``."""

    reader_id: str
    task_id: str
    version: int
    change_seq: int


CURSORS = Projection("read_cursor", ReadCursorRow, key=("reader_id", "task_id"))
PROJECTIONS = (CURSORS,)


def evolve(entry: RecordedEntry) -> ReadCursorRow | None:
    """The cursor row an entry sets, if any."""
    event = entry.event
    if type(event) is TaskReadCursorAdvanced:
        assert isinstance(event, TaskReadCursorAdvanced)
        return ReadCursorRow(event.reader_id, entry.stream_id, event.version, entry.change_seq)
    return None
