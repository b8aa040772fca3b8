"""The type of a value that really is arbitrary JSON (an OpenAPI schema, an example body)."""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = (
    bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"] | None)
"""A JSON document: ``null``, a boolean, a number, a string, an array or an object."""
JSONObject: TypeAlias = dict[str, JSONValue]
"""A JSON object: string keys, JSON values."""
