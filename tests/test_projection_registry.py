"""The projection registry: declarations match the migrated schema; generated SQL is safe."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import msgspec
import pytest

from projections.projection import Fold, Projection, quote
from projections.registry import REGISTRY, TABLES


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(database_url)
    yield connection
    await connection.close()


async def test_every_declaration_matches_its_migrated_table(conn: asyncpg.Connection) -> None:
    for projection in REGISTRY:
        columns = [r["column_name"] for r in await conn.fetch(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position",
            projection.table)]
        assert tuple(columns) == projection.columns, projection.table
        key = [r["attname"] for r in await conn.fetch(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
            " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
            " WHERE i.indrelid = $1::regclass AND i.indisprimary"
            " ORDER BY array_position(i.indkey::int2[], a.attnum)", projection.table)]
        assert tuple(key) == projection.key, projection.table


def test_tables_are_listed_once_and_identifiers_are_checked() -> None:
    assert len(set(TABLES)) == len(TABLES) == 14  # 13 and api_key (issue 25)
    assert quote("task_summary") == '"task_summary"'
    with pytest.raises(ValueError, match="not a projection identifier"):
        quote('x"; DROP TABLE ledger; --')


class _Odd(msgspec.Struct, frozen=True):
    a: str
    b: int


def test_a_key_outside_the_columns_is_refused() -> None:
    with pytest.raises(ValueError, match="is not among its columns"):
        Projection("odd", _Odd, key=("c",), origin=Fold("task", lambda e, r: None,
                                                        lambda row, e: row))


def test_a_composite_key_loads_by_unnest() -> None:
    projection = Projection("odd", _Odd, key=("a", "b"), origin=Fold(
        "task", lambda e, r: None, lambda row, e: row))
    assert projection.key_of(_Odd("x", 1)) == ("x", 1)
    assert 'WHERE ("a", "b") IN (SELECT * FROM unnest($1::text[], $2::bigint[]))' in (
        projection.load_sql)
