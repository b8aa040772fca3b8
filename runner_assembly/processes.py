"""Whether a process exists, asked without a signal (kill 0): the local driver's job check and
the metrics directory's owner check."""

from __future__ import annotations

import os


def process_exists(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
