"""Several writes sent as one statement: one round trip for a batch's append, head and
projections (data-modifying ``WITH`` clauses, each with its parameters renumbered)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from ledger.database import DbConnection

Statement = tuple[str, Sequence[object]]
"""A SQL statement (``$n`` parameters) and its arguments."""

_PARAMETER = re.compile(r"\$(\d+)")


def _shift(text: str, by: int) -> str:
    """``text`` with every ``$n`` parameter renumbered ``$(n + by)``."""
    return _PARAMETER.sub(lambda match: f"${int(match[1]) + by}", text)


@lru_cache(maxsize=256)
def _joined(texts: tuple[str, ...], counts: tuple[int, ...]) -> str:
    parts, offset = [], 0
    for index, (text, count) in enumerate(zip(texts, counts, strict=True)):
        parts.append(f"w{index} AS ({_shift(text, offset)})")
        offset += count
    return "WITH " + ", ".join(parts) + " SELECT"


def joined(statements: Sequence[Statement]) -> Statement:
    """One statement doing what ``statements`` do. They must touch different rows: all
    parts see one snapshot and none sees another's writes."""
    if len(statements) == 1:
        return statements[0]
    texts = tuple(text for text, _ in statements)
    arguments = [argument for _, args in statements for argument in args]
    return _joined(texts, tuple(len(args) for _, args in statements)), arguments


async def execute_together(conn: DbConnection, statements: Sequence[Statement]) -> None:
    """Run ``statements`` in one round trip (nothing when there are none)."""
    if statements:
        text, arguments = joined(statements)
        await conn.execute(text, *arguments)
