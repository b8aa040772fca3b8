"""The type of a value that really is arbitrary JSON (a schema, an example body, a report)."""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = (
    bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None)
"""Any JSON document: ``null``, a boolean, a number, a string, an array or an object."""
JSONObject: TypeAlias = dict[str, JSONValue]
"""A JSON object: string keys, JSON values."""
