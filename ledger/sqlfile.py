"""Named SQL blocks loaded once from ``.sql`` files (``-- name: query_name`` headers)."""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str) -> dict[str, str]:
    """Return ``{name: sql}`` for every ``-- name:`` block of ``package/sql/filename``."""
    text = resources.files(package).joinpath("sql", filename).read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    queries = {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}
    if not queries:
        raise ValueError(f"no named queries in {package}/sql/{filename}")
    return queries
