"""The one fold that drives both the live projection update and the replay.

It knows no projection by name: it offers each entry to the registry's folded projections
of the entry's stream, then derives the derived ones from their sources' changed rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ledger.streams import RecordedEntry
from projections.projection import Derived, Fold, Projection, Rows
from projections.registry import REGISTRY

Needed = dict[str, set[Any]]
Route = tuple[tuple[Projection[Any], Fold[Any]], ...]
Step = tuple[Fold[Any], dict[Any, Any], dict[Any, Any]]

_FOLDED = tuple((p, p.origin) for p in REGISTRY if isinstance(p.origin, Fold))
_DERIVED = tuple((p, p.origin) for p in REGISTRY if isinstance(p.origin, Derived))
_routes: dict[tuple[str, type], Route] = {}


def _route(entry: RecordedEntry) -> Route:
    """The folded projections (in registry order) that take an entry of this kind."""
    kind = (entry.stream_type, type(entry.event))
    route = _routes.get(kind)
    if route is None:
        route = _routes[kind] = tuple(
            (p, how) for p, how in _FOLDED
            if how.stream == kind[0] and (how.events is None or kind[1] in how.events))
    return route


def fold(current: Rows, entries: Iterable[RecordedEntry]) -> Rows:
    """Fold entries over the current rows (which it does not modify); return changed rows."""
    changes = Rows()
    working = current.copy()
    steps: dict[tuple[str, type], list[Step]] = {}
    for entry in entries:
        kind = (entry.stream_type, type(entry.event))
        entry_steps = steps.get(kind)
        if entry_steps is None:
            entry_steps = steps[kind] = [(how, working.of(p), changes.of(p))
                                         for p, how in _route(entry)]
        for how, rows, changed in entry_steps:
            key = how.key_of(entry, working)
            if key is None:
                continue
            before = rows.get(key)
            after = how.evolve(before, entry)
            if after is not None and after is not before:
                rows[key] = changed[key] = after
    for projection, derived in _DERIVED:
        before_rows = current.of(derived.source)
        derived_rows = [row for key, after in changes.of(derived.source).items()
                        for row in derived.derive(before_rows.get(key), after)]
        changes.put_all(projection, derived_rows)
    return changes


def needed_rows(entries: Iterable[RecordedEntry], loaded: Rows) -> Needed:
    """Keys of the rows to load before folding, per table: rows the entries change but do
    not create. Given the rows loaded so far, keys that depend on them are found too (the
    attempt a cancel closes is the latest attempt of the loaded task row).
    """
    created: dict[str, set[Any]] = {}
    needed: Needed = {}
    for entry in entries:
        for projection, how in _route(entry):
            key = how.key_of(entry, loaded)
            if key is None:
                continue
            made = created.setdefault(projection.table, set())
            if type(entry.event) in how.created_by:
                made.add(key)
            elif key not in made:
                needed.setdefault(projection.table, set()).add(key)
    return needed
