"""A batch's writes sent as one statement: the ledger head's move first (``a``), then every
write (data-modifying ``WITH`` clauses, each with its parameters renumbered), which runs after
it and only when it moved; one round trip, and with no transaction around it, one commit."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

Statement = tuple[str, Sequence[object]]
"""A SQL statement (``$n`` parameters) and its arguments."""

SEQ_SHIFT = "(SELECT shift FROM a)"
"""In a :func:`sequenced` statement: what a projection row adds to its ``change_seq``."""

_PARAMETER = re.compile(r"\$(\d+)")
_ARRAY_PARAMETER = re.compile(r"\$(\d+)::(?:\w+\[\]|json\b)")


def _shift(text: str, by: int) -> str:
    """``text`` with every ``$n`` parameter renumbered ``$(n + by)``."""
    return _PARAMETER.sub(lambda match: f"${int(match[1]) + by}", text)


def _gated(text: str) -> str:
    """``text`` with each array parameter ``$n::t[]`` (or JSON one, ``$n::json``) read
    through the head part ``a``: after it, and NULL (``unnest`` and ``json_to_recordset``
    yield no row) when it returned none. Every parameter must be such an array or JSON."""
    gated, found = _ARRAY_PARAMETER.subn(lambda m: f"(SELECT {m[0]} FROM a)", text)
    if found != len(_PARAMETER.findall(text)):
        raise ValueError("a sequenced write takes only array parameters ($n::type[]) "
                         "or JSON ones ($n::json)")
    return gated


@lru_cache(maxsize=256)
def _sequenced(head: str, head_count: int, texts: tuple[str, ...],
               counts: tuple[int, ...]) -> str:
    parts, offset = [f"a AS MATERIALIZED ({head})"], head_count
    for index, (text, count) in enumerate(zip(texts, counts, strict=True)):
        parts.append(f"w{index} AS ({_shift(_gated(text), offset)})")
        offset += count
    return "WITH " + ", ".join(parts) + " SELECT * FROM a"


def sequenced(head: Statement, statements: Sequence[Statement]) -> Statement:
    """One statement: ``head`` (a query returning at most one row, which locks and moves the
    ledger head) runs first as ``a``; ``statements`` (writes fed by array or JSON parameters, which
    may read ``a``) run after it, and only when it returned its row, which the statement
    answers. Every row lock is taken after the head's, so writers lock in one order. The
    parts see one snapshot and none sees another's writes: they must touch different rows."""
    texts = tuple(text for text, _ in statements)
    counts = tuple(len(args) for _, args in statements)
    arguments = [*head[1], *(argument for _, args in statements for argument in args)]
    return _sequenced(head[0], len(head[1]), texts, counts), arguments
