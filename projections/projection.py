"""The projection description: one per table, from which its writer, replay and diff derive."""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import cached_property
from operator import attrgetter
from typing import Any, Generic, TypeVar, Union, cast, get_args, get_origin, get_type_hints

import asyncpg
import msgspec

from ledger.streams import RecordedEntry
from ledger.together import SEQ_SHIFT

R = TypeVar("R", bound=msgspec.Struct)

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
_ENCODED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SQL_TYPES: dict[type, str] = {str: "text", int: "bigint", bool: "boolean",
                               float: "double precision", datetime: "timestamptz"}
_json = msgspec.json.Encoder()
_json_decoder = msgspec.json.Decoder()


class Merge(StrEnum):
    """What an upsert does with a row whose key is already stored."""

    REPLACE = "replace"  # the folded row replaces the stored one
    KEEP = "keep"  # the first row stays (insert-only tables)
    ADD = "add"  # the row holds deltas: non-key columns are added to the stored ones


def quote(name: str, shape: re.Pattern[str] = _IDENTIFIER) -> str:
    """A declared identifier, quoted for SQL: a lower-case name (tables and columns), or
    with ``shape`` :data:`_ENCODED_NAME` a field's encoded JSON name (possibly camelCase)."""
    if not shape.fullmatch(name):
        raise ValueError(f"not a projection identifier: {name!r}")
    return f'"{name}"'


def json_text(value: object) -> str | None:
    """The JSON text stored for a value (None stays NULL)."""
    return None if value is None else _json.encode(value).decode()


SEQ_COLUMN = "change_seq"
"""The column holding the changeSeq of the entry that last changed a row (where a table has
one): the writer shifts it when Postgres numbers a batch (``Projection.upsert_sql``)."""

def _column_type(annotation: Any) -> tuple[str, bool]:
    """The SQL element type of a row field and whether it is stored as JSON."""
    if get_origin(annotation) in (Union, types.UnionType):
        (annotation,) = [a for a in get_args(annotation) if a is not type(None)]
    base = get_origin(annotation) or annotation
    if base in (dict, list) or annotation is Any:
        return "json", True
    if isinstance(base, type) and issubclass(base, str):  # a StrEnum of the vocabulary
        return "text", False
    return _SQL_TYPES[base], False


KeyOf = Callable[[RecordedEntry, "Rows"], Hashable | None]
Evolve = Callable[[R | None, RecordedEntry], R | None]
Derive = Callable[[Any | None, Any], Iterable[R]]


@dataclass(frozen=True)
class Fold(Generic[R]):
    """How a projection folds from the ledger: which entries, which row each one changes.

    ``key_of`` names the row an entry changes (None: the entry leaves this projection
    alone). It may read other projections' rows: while loading, the rows loaded so far;
    while folding, the working rows (those listed earlier already hold this entry). Entries
    of a type in ``created_by`` make their row from nothing, so it is never loaded first.
    """

    stream: str
    key_of: KeyOf
    evolve: Evolve[R]
    events: frozenset[type] | None = None
    created_by: frozenset[type] = frozenset()


@dataclass(frozen=True)
class Derived(Generic[R]):
    """How a projection derives from another one's rows, never from the ledger.

    ``derive(before, after)`` gets a source row as it was before a fold (None when the fold
    created it) and after; it yields this projection's rows (for ``Merge.ADD``, deltas).
    """

    source: Projection[Any]
    derive: Derive[R]


@dataclass(frozen=True)
class Projection(Generic[R]):
    """One projection table: its row type (field order is column order), key, merge rule,
    and how its rows come about: folded from the ledger or derived from another projection.
    """

    table: str
    row_type: type[R]
    key: tuple[str, ...]
    origin: Fold[R] | Derived[R]
    merge: Merge = Merge.REPLACE
    _types: dict[str, tuple[str, bool]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        hints = get_type_hints(self.row_type)
        types_ = {name: _column_type(hints[name]) for name in self.row_type.__struct_fields__}
        for name in (self.table, *types_):
            quote(name)
        if not self.key or any(k not in types_ for k in self.key):
            raise ValueError(f"{self.table}: key {self.key} is not among its columns")
        config = self.row_type.__struct_config__
        if config.omit_defaults or config.array_like:  # the writer reads rows by field name
            raise ValueError(f"{self.table}: a row type must encode every field by name")
        object.__setattr__(self, "_types", types_)

    @property
    def columns(self) -> tuple[str, ...]:
        """Column names in storage order."""
        return tuple(self.row_type.__struct_fields__)

    @cached_property
    def _json_indexes(self) -> tuple[int, ...]:
        return tuple(i for i, name in enumerate(self.columns) if self._types[name][1])

    @cached_property
    def added(self) -> tuple[str, ...]:
        """The non-key columns (for ``Merge.ADD``, the summed ones)."""
        return tuple(c for c in self.columns if c not in self.key)

    @cached_property
    def key_of(self) -> Callable[[R], Hashable]:
        """A row's key: the column value, or a tuple of them for a composite key."""
        return attrgetter(*self.key)

    def to_tuple(self, row: R) -> tuple[object, ...]:
        """A row as stored: JSON columns as text."""
        values = msgspec.structs.astuple(row)
        if not self._json_indexes:
            return values
        stored = list(values)
        for index in self._json_indexes:
            stored[index] = json_text(stored[index])
        return tuple(stored)

    def from_record(self, record: asyncpg.Record) -> R:
        """Decode a stored record (JSON columns selected as text) into the row type."""
        values = {name: record[name] for name in self.columns}
        for index in self._json_indexes:
            name = self.columns[index]
            values[name] = _json_decoder.decode(values[name]) if values[name] else None
        return self.row_type(**values)

    def is_empty(self, row: R) -> bool:
        """True for a delta row that changes nothing (``Merge.ADD`` only)."""
        return self.merge is Merge.ADD and not any(getattr(row, c) for c in self.added)

    def add(self, old: R | None, delta: R) -> R:
        """Sum a delta into a row of the same key (``Merge.ADD``)."""
        if old is None:
            return delta
        return msgspec.structs.replace(
            old, **{c: getattr(old, c) + getattr(delta, c) for c in self.added})

    def encoded(self, rows: Sequence[R]) -> str:
        """The rows as :attr:`upsert_sql`'s one parameter: a JSON array of the rows as
        msgspec encodes them (one C call; typed arrays cost asyncpg checks per element)."""
        return _json.encode(rows).decode()

    # SQL, generated once from the declaration (identifiers only, never values).

    def _selected(self, prefix: str = "") -> str:
        return ", ".join(
            f"{prefix}{quote(c)}::text AS {quote(c)}" if self._types[c][1] else prefix + quote(c)
            for c in self.columns)

    def _array_params(self, names: Iterable[str], start: int = 1) -> str:
        return ", ".join(f"${i}::{self._types[name][0]}[]"
                         for i, name in enumerate(names, start))

    @cached_property
    def load_sql(self) -> str:
        """Select the stored rows of the given keys (one array parameter per key column)."""
        table, keys = quote(self.table), ", ".join(quote(k) for k in self.key)
        if len(self.key) == 1:
            return (f"SELECT {self._selected()} FROM {table} "
                    f"WHERE {keys} = ANY({self._array_params(self.key)})")
        return (f"SELECT {self._selected()} FROM {table} WHERE ({keys}) IN "
                f"(SELECT * FROM unnest({self._array_params(self.key)}))")

    @cached_property
    def upsert_sql(self) -> str:
        """Insert rows given as per-column arrays; on a stored key apply the merge rule. For
        the ledger writer's one statement (``ledger.together.sequenced``) only."""
        table = quote(self.table)
        names = ", ".join(quote(c) for c in self.columns)
        keys = ", ".join(quote(k) for k in self.key)
        if self.merge is Merge.KEEP or not self.added:
            action = "NOTHING"
        elif self.merge is Merge.ADD:
            action = "UPDATE SET " + ", ".join(
                f"{quote(c)} = {table}.{quote(c)} + EXCLUDED.{quote(c)}" for c in self.added)
        else:
            action = "UPDATE SET " + ", ".join(
                f"{quote(c)} = EXCLUDED.{quote(c)}" for c in self.added)
        return (f"INSERT INTO {table} ({names}) SELECT {self._shifted} FROM "
                f"json_to_recordset($1::json) AS u({self._recordset}) "
                f"ON CONFLICT ({keys}) DO {action}")

    @property
    def _recordset(self) -> str:
        """The column definitions that read :meth:`encoded` rows: each column under the name
        msgspec encodes its field with (a row type may rename fields, e.g. to camelCase)."""
        return ", ".join(f"{quote(e, _ENCODED_NAME)} {self._types[c][0]}"
                         for c, e in zip(self.columns, self._encoded_names, strict=True))

    @cached_property
    def _encoded_names(self) -> tuple[str, ...]:
        return tuple(self.row_type.__struct_encode_fields__)

    @property
    def _shifted(self) -> str:
        """The select list of :attr:`upsert_sql`: a ``change_seq`` column moves with the
        batch's entries when Postgres numbered them (``ledger.together.SEQ_SHIFT``)."""
        return ", ".join(f"u.{quote(e, _ENCODED_NAME)} + {SEQ_SHIFT}" if c == SEQ_COLUMN
                         else f"u.{quote(e, _ENCODED_NAME)}"
                         for c, e in zip(self.columns, self._encoded_names, strict=True))

    @property
    def _kept(self) -> str:
        """Rows that count: an added table drops rows whose deltas summed to zero."""
        if self.merge is not Merge.ADD:
            return ""
        return " WHERE NOT (" + " AND ".join(f"{quote(c)} = 0" for c in self.added) + ")"

    @cached_property
    def scratch_sql(self) -> str:
        """Create the index-free temporary table that shadows the live one."""
        table = quote(self.table)
        return (f"CREATE TEMP TABLE {table} (LIKE public.{table} INCLUDING DEFAULTS) "
                "ON COMMIT DROP")

    @cached_property
    def diff_sql(self) -> str:
        """Keys of rows that differ between the live table and its rebuilt shadow.

        JSON columns are compared as text: live and rebuilt values are encoded by the same
        code from the same events, so equal values have equal text.
        """
        table, selected = quote(self.table), self._selected()
        key = ", ".join(quote(k) for k in self.key)
        return (f"WITH live AS (SELECT {selected} FROM public.{table}{self._kept}), "
                f"rebuilt AS (SELECT {selected} FROM pg_temp.{table}{self._kept}) "
                f"SELECT concat_ws('/', {key}) AS key FROM ((TABLE live EXCEPT ALL TABLE "
                "rebuilt) UNION ALL (TABLE rebuilt EXCEPT ALL TABLE live)) d")

    @cached_property
    def replace_sql(self) -> str:
        """Replace the live table's rows with the rebuilt ones."""
        table = quote(self.table)
        names = ", ".join(quote(c) for c in self.columns)
        return (f"DELETE FROM public.{table}; INSERT INTO public.{table} ({names}) "
                f"SELECT {names} FROM pg_temp.{table}{self._kept}")


class Rows:
    """Rows per projection, keyed by row key: loaded current rows or folded changes."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[Hashable, object]] = {}

    def copy(self) -> Rows:
        """A copy whose tables can change without changing these."""
        copied = Rows()
        copied._tables = {table: dict(rows) for table, rows in self._tables.items()}
        return copied

    def of(self, projection: Projection[R]) -> dict[Hashable, R]:
        """The (mutable) rows of one projection."""
        return cast(dict[Hashable, R], self._tables.setdefault(projection.table, {}))

    def put(self, projection: Projection[R], row: R) -> None:
        """Set a row (an added projection sums it into the row of the same key)."""
        rows, key = self.of(projection), projection.key_of(row)
        if projection.merge is Merge.ADD:
            rows[key] = projection.add(rows.get(key), row)
        else:
            rows[key] = row

    def put_all(self, projection: Projection[R], rows: Iterable[R]) -> None:
        """Put rows; an added projection's deltas are summed per key first."""
        if projection.merge is not Merge.ADD:
            target, key_of = self.of(projection), projection.key_of
            for row in rows:
                target[key_of(row)] = row
            return
        sums: dict[Hashable, tuple[R, Any]] = {}
        added, key_of, values_of = projection.added, projection.key_of, attrgetter(
            *projection.added)
        for row in rows:
            key = key_of(row)
            first = sums.get(key)
            if first is None:
                sums[key] = (row, values_of(row))
            elif len(added) == 1:
                sums[key] = (first[0], first[1] + values_of(row))
            else:
                sums[key] = (first[0], tuple(a + b for a, b in zip(
                    first[1], values_of(row), strict=True)))
        for row, total in sums.values():
            totals = (total,) if len(added) == 1 else total
            self.put(projection, msgspec.structs.replace(
                row, **dict(zip(added, totals, strict=True))))

    def merge(self, projection: Projection[R], other: Rows) -> None:
        """Put every row of ``projection`` that ``other`` holds."""
        self.put_all(projection, other.of(projection).values())

    def rows(self, projection: Projection[R]) -> list[R]:
        """The rows to write (deltas that sum to nothing are left out)."""
        return [r for r in self.of(projection).values() if not projection.is_empty(r)]
