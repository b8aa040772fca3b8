"""Files of a job directory, written atomically: the job file, the token, the runner's pid."""

from __future__ import annotations

import os
from pathlib import Path


def _temporary(path: Path) -> Path:
    """A name of its own next to ``path``: two writers never collide."""
    return path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` so readers see the old file or the whole new one."""
    temporary = _temporary(path)
    temporary.write_bytes(data)
    os.replace(temporary, path)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only, atomically (a reader never sees it half)."""
    temporary = _temporary(path)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)
