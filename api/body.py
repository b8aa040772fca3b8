"""Strict decoding of JSON request bodies and query values into wire Structs."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from litestar import Request

from ledger.errors import InvalidRequest

T = TypeVar("T")
MAX_DEPTH = 32
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def _decoder(kind: type[T]) -> msgspec.json.Decoder[T]:
    if kind not in _decoders:
        _decoders[kind] = msgspec.json.Decoder(kind)
    return _decoders[kind]


def decode(raw: bytes, kind: type[T], *, empty_ok: bool) -> T:
    """Decode ``raw`` into ``kind`` or raise ``invalid-request`` naming the problem."""
    if not raw.strip():
        if empty_ok:
            raw = b"{}"
        else:
            raise InvalidRequest("a JSON object body is required")
    try:
        value = _decoder(kind).decode(raw)
    except msgspec.ValidationError as error:
        raise InvalidRequest(f"invalid body: {error}") from None
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise InvalidRequest("body is not valid JSON") from None
    check_strings(msgspec.to_builtins(value))
    return value


def convert(value: Any, kind: type[T]) -> T:
    """Convert decoded JSON into ``kind`` or raise ``invalid-request`` naming the problem."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as error:
        raise InvalidRequest(f"invalid body: {error}") from None


async def read_body(request: Request[Any, Any, Any], kind: type[T], *, empty_ok: bool = False) -> T:
    """Read and strictly decode the request body."""
    return decode(await request.body(), kind, empty_ok=empty_ok)


def check_strings(value: Any, depth: int = 0) -> None:
    """Refuse NUL characters anywhere (Postgres text cannot hold them) and deep nesting."""
    if depth > MAX_DEPTH:
        raise InvalidRequest(f"body nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidRequest("strings must not contain NUL characters")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_strings(key, depth + 1)
            check_strings(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            check_strings(item, depth + 1)
