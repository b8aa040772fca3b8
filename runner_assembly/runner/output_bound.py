"""The bound on what one turn's backend may print (``SVC_OUTPUT_MAX_BYTES``, DESIGN 13).

The backend's masked output reaches the runner's scratch file through a :class:`Bounded`
sink: whole lines are kept while they fit in the bound, less room for one notice line; past
it the sink writes that notice once and drops the rest, counting the lines and bytes it
dropped, while the backend's pipe keeps being drained (its run and outcome are unchanged).
Nothing past the bound reaches the disk, the shipper or the manager. The backend's output and
errors share one bound (a :class:`Tally` of the bytes both kept).
"""

from __future__ import annotations

import threading
from typing import IO

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""``SVC_OUTPUT_MAX_BYTES``'s default: 64 MiB per turn."""
NOTICE_ROOM = 256
"""Bytes of the bound kept for the notice (and the newline that may close a cut line)."""


def notice(max_bytes: int) -> bytes:
    """The one line that marks where a turn's output was cut."""
    return (f"[svc] this turn's output passed its bound of {max_bytes} bytes "
            "(SVC_OUTPUT_MAX_BYTES): the rest is dropped; the trace counts it\n").encode()


class Tally:
    """The bytes kept by the sinks that share one bound (each write under its lock)."""

    def __init__(self) -> None:
        self.kept = 0
        self.lock = threading.Lock()


class Bounded:
    """A sink keeping at most ``max_bytes`` bytes (its notice included), cut at a line's end;
    what comes after is counted, never written."""

    def __init__(self, sink: IO[bytes], max_bytes: int, *, with_notice: bool = True,
                 tally: Tally | None = None) -> None:
        """``with_notice``: write the notice line when the cut happens; ``tally``: the count
        this sink shares with others under the same bound (the room for one notice is kept
        then, whichever sink reaches the bound)."""
        self.sink = sink
        self.max_bytes = max_bytes
        shared = tally is not None
        self.budget = max(max_bytes - NOTICE_ROOM, 0) if with_notice or shared else max_bytes
        self.with_notice = with_notice
        self.tally = tally if tally is not None else Tally()
        self.dropped_bytes = 0
        self._dropped_newlines = 0
        self._dropped_open = False  # the dropped bytes end inside a line
        self._line_open = False  # the kept bytes end inside a line
        self.cut = False

    @property
    def dropped_lines(self) -> int:
        """Lines dropped, whole or in part (a last one without its newline counts)."""
        return self._dropped_newlines + self._dropped_open

    @property
    def kept(self) -> int:
        """Bytes kept under this bound (by every sink sharing it)."""
        return self.tally.kept

    def write(self, data: bytes) -> None:
        """Keep ``data`` when it fits; else keep its lines that fit and drop the rest."""
        if data:
            with self.tally.lock:
                self._write(data)

    def _write(self, data: bytes) -> None:
        if not self.cut and self.kept + len(data) <= self.budget:
            self._keep(data)
            return
        if not self.cut:
            fits = data.rfind(b"\n", 0, max(self.budget - self.kept, 0)) + 1
            self._keep(data[:fits])
            self._begin_cut()
            data = data[fits:]
        self.dropped_bytes += len(data)
        self._dropped_newlines += data.count(b"\n")
        if data:
            self._dropped_open = not data.endswith(b"\n")

    def flush(self) -> None:
        """Flush the sink."""
        self.sink.flush()

    def _keep(self, data: bytes) -> None:
        if data:
            self.sink.write(data)
            self.tally.kept += len(data)
            self._line_open = not data.endswith(b"\n")

    def _begin_cut(self) -> None:
        self.cut = True
        if not self.with_notice:
            return
        self.sink.write((b"\n" if self._line_open else b"") + notice(self.max_bytes))
