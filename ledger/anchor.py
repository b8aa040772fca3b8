"""Anchors of the hash chain: ``changeSeq:hash`` of the head, kept outside the database, and
the check that the history up to an anchor still hashes to it (DESIGN 8).

A role that can rewrite the ledger can also recompute every hash after the rewrite, so the
chain alone proves nothing against its owner; an anchor taken earlier and kept elsewhere does:
a rewritten entry at or before the anchor changes the hash stored at the anchor's changeSeq.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ledger import store
from ledger.database import DbConnection
from ledger.errors import InvalidRequest

_ANCHOR = re.compile(r"([0-9]{1,19}):([0-9a-f]{64})")


@dataclass(frozen=True)
class Anchor:
    """A point of the chain: its changeSeq and the entry's hash there."""

    change_seq: int
    hash: bytes

    def __str__(self) -> str:
        return f"{self.change_seq}:{self.hash.hex()}"


def parse_anchor(text: str) -> Anchor:
    """``SEQ:HASH`` (64 hex digits) as an anchor, or ``invalid-request``."""
    match = _ANCHOR.fullmatch(text.strip())
    if match is None:
        raise InvalidRequest("an anchor is SEQ:HASH, as `svc ledger anchor` prints it")
    return Anchor(int(match[1]), bytes.fromhex(match[2]))


async def head_anchor(conn: DbConnection) -> Anchor:
    """The anchor of the current head."""
    head = await store.read_head(conn)
    return Anchor(head.last_seq, head.last_hash)


async def anchor_error(conn: DbConnection, anchor: Anchor) -> str | None:
    """Why the stored history no longer reaches ``anchor``, or None when it does.

    Run it with the chain verification (``svc ledger replay --verify``): that proves every
    stored hash is computed from its entry and its predecessor; this proves the hash at the
    anchor is still the one recorded outside.
    """
    if anchor.change_seq == 0:
        return None
    stored = await store.hash_at(conn, anchor.change_seq)
    if stored is None:
        return f"anchor {anchor.change_seq}: no such changeSeq (the history was cut)"
    if stored != anchor.hash:
        return (f"anchor {anchor.change_seq}: the history up to it was rewritten "
                f"(hash {stored.hex()[:16]}…, anchored {anchor.hash.hex()[:16]}…)")
    return None
