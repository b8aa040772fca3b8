"""Test-only crash points (``SVC_FAULTS``): a process kills itself as ``kill -9`` would."""

from __future__ import annotations

import os
import signal


def crash_at(faults: frozenset[str], point: str) -> None:
    """Die like a killed process (server or runner) if the crash point ``point`` is on."""
    if point in faults:
        os.kill(os.getpid(), signal.SIGKILL)
