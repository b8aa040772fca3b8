"""Repeated log lines held back: the same warning or error (same logger, level, message and
exception: its type and text) is written at most once per :data:`REPEAT_WINDOW_S`; the next
line written for it says how many were held back meanwhile (``repeated``). With the database
down, a loop that fails every second writes one line a minute, not sixty."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

REPEAT_WINDOW_S = 60.0
"""At most one line per message key in this many seconds."""
MAX_KEYS = 1024
"""Message keys remembered at most (the ones whose window ended are forgotten first)."""

Key = tuple[str, int, str, str]


class RepeatLimiter(logging.Filter):
    """A handler filter that holds back repeats of warnings and errors (lower levels pass:
    the access lines of failed requests are each their own)."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._seen: dict[Key, list[float]] = {}  # key -> [window start, held back]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        """Pass the record unless it repeats one written less than a window ago; a passing
        record carries ``repeated``, the number held back since the last one written."""
        if record.levelno < logging.WARNING:
            return True
        error = _error_of(record)
        key = (record.name, record.levelno, record.getMessage(), error)
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self.window_s:
                seen[1] += 1
                return False
            if seen is not None and seen[1]:
                record.repeated = int(seen[1])
            if seen is None and len(self._seen) >= MAX_KEYS:
                self._forget_ended(now)
            self._seen[key] = [now, 0]
        return True

    def _forget_ended(self, now: float) -> None:
        """Forget the keys whose window ended (all of them if none has)."""
        ended = [key for key, (start, _) in self._seen.items() if now - start >= self.window_s]
        for key in ended or list(self._seen):
            del self._seen[key]


def _error_of(record: logging.LogRecord) -> str:
    """The record's exception as a key: its type and the start of its text ('' if none)."""
    if not record.exc_info or record.exc_info[1] is None:
        return ""
    error = record.exc_info[1]
    return f"{type(error).__name__}: {str(error)[:200]}"
