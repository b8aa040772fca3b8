"""A line as the runner ships it: whole up to :data:`MAX_LINE_BYTES`, else in numbered parts.

A line is never cut silently: one longer than a line of the runner protocol is sent as
``{"text", "part", "parts"}`` items whose texts, concatenated in order, are the line (each
part cut between two UTF-8 characters).
"""

from __future__ import annotations

from runner_assembly.contract.messages import MAX_LINE_BYTES, LinePart


def line_items(raw: bytes, limit: int = MAX_LINE_BYTES) -> list[str | LinePart]:
    """The protocol items of one line's bytes (without its newline; a ``\\r`` before it is
    dropped): the line itself, or its parts of at most ``limit`` bytes each."""
    raw = raw.removesuffix(b"\r")
    if len(raw) <= limit:
        return [_text(raw)]
    pieces: list[bytes] = []
    start = 0
    while start < len(raw):
        end = min(start + limit, len(raw))
        while start < end < len(raw) and raw[end] & 0xC0 == 0x80:  # inside a character
            end -= 1
        if end == start:  # no character boundary in reach (not UTF-8): cut where it is
            end = min(start + limit, len(raw))
        pieces.append(raw[start:end])
        start = end
    return [LinePart(text=_text(piece), part=number, parts=len(pieces))
            for number, piece in enumerate(pieces, 1)]


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")
