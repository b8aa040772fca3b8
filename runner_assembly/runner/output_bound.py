"""The bound on what one turn's backend may print (``SVC_OUTPUT_MAX_BYTES``, DESIGN 13).

The backend's masked output reaches the runner's scratch file through a :class:`Bounded`
sink: whole lines are kept while they fit in the bound, less room for one notice line; past
it the sink writes that notice once and drops the rest, counting the lines and bytes it
dropped, while the backend's pipe keeps being drained (its run and outcome are unchanged).
Nothing past the bound reaches the disk, the shipper or the manager.
"""

from __future__ import annotations

from typing import IO

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""``SVC_OUTPUT_MAX_BYTES``'s default: 64 MiB per turn."""
NOTICE_ROOM = 256
"""Bytes of the bound kept for the notice (and the newline that may close a cut line)."""


def notice(max_bytes: int) -> bytes:
    """The one line that marks where a turn's output was cut."""
    return (f"[svc] this turn's output passed its bound of {max_bytes} bytes "
            "(SVC_OUTPUT_MAX_BYTES): the rest is dropped; the trace counts it\n").encode()


class Bounded:
    """A sink keeping at most ``max_bytes`` bytes (its notice included), cut at a line's end;
    what comes after is counted, never written."""

    def __init__(self, sink: IO[bytes], max_bytes: int, *, with_notice: bool = True) -> None:
        """``with_notice``: write the notice line when the cut happens."""
        self.sink = sink
        self.max_bytes = max_bytes
        self.budget = max(max_bytes - NOTICE_ROOM, 0) if with_notice else max_bytes
        self.with_notice = with_notice
        self.kept = 0
        self.dropped_bytes = 0
        self._dropped_newlines = 0
        self._dropped_open = False  # the dropped bytes end inside a line
        self._line_open = False  # the kept bytes end inside a line
        self.cut = False

    @property
    def dropped_lines(self) -> int:
        """Lines dropped, whole or in part (a last one without its newline counts)."""
        return self._dropped_newlines + self._dropped_open

    def write(self, data: bytes) -> None:
        """Keep ``data`` when it fits; else keep its lines that fit and drop the rest."""
        if not data:
            return
        if not self.cut and self.kept + len(data) <= self.budget:
            self._keep(data)
            return
        if not self.cut:
            fits = data.rfind(b"\n", 0, self.budget - self.kept) + 1
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
            self.kept += len(data)
            self._line_open = not data.endswith(b"\n")

    def _begin_cut(self) -> None:
        self.cut = True
        if not self.with_notice:
            return
        self.sink.write((b"\n" if self._line_open else b"") + notice(self.max_bytes))
