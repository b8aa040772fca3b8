"""JSON files a runner job writes for itself, written atomically."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path


def read_json(path: Path) -> dict[str, object] | None:
    """A JSON file's content, or None when it does not exist (yet)."""
    try:
        value = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def write_json_atomically(path: Path, value: object) -> None:
    """Write JSON so readers see the old file or the whole new one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    temporary.write_text(json.dumps(value))  # a name of its own: two writers never collide
    os.replace(temporary, path)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only, atomically (a reader never sees it half)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)
