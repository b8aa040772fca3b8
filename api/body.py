"""Strict decoding of JSON request bodies and query values into wire Structs."""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from litestar import Request
from litestar.datastructures import State
from litestar.exceptions import ClientException, InternalServerException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.types import Empty, Receive, Scope
from litestar.utils.scope.state import ScopeState

from ledger.errors import DomainError, InvalidRequest
from ledger.redaction import holds_credential

T = TypeVar("T")
MAX_DEPTH = 32
THREAD_BODY_BYTES = 16 * 1024
"""Bodies larger than this are decoded and scanned in a worker thread, off the event loop."""
Gate = Callable[[object, Any], None]
"""An entry's validation gate: the decoded JSON and the app's ``gate_policy`` state (the
operator's fetch allow-list, :class:`runner_assembly.contract.jobfile.FetchAllow`)."""
RUNTIME_KEY_PATHS = frozenset({"$.transientEnv.LAB_API_KEY"})
"""The one place a key may be sent (SPEC 5.2 rule 8): the owner-scoped runtime key reaches
the job through its per-job secret and is never stored, so its shape is not refused."""


class CredentialInRequest(DomainError):
    """A string in the request body holds a credential; send a secret reference instead."""
_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def _decoder(kind: type[T]) -> msgspec.json.Decoder[T]:
    if kind not in _decoders:
        _decoders[kind] = msgspec.json.Decoder(kind)
    return _decoders[kind]


def decode(raw: bytes, kind: type[T], *, empty_ok: bool, gate: Gate | None = None,
           policy: object = None) -> T:
    """Decode ``raw`` into ``kind`` or raise ``invalid-request`` naming the problem.

    Every string is checked (:func:`check_strings`) before anything else looks at it; with a
    ``gate``, the body is decoded as plain JSON first, passed to the gate, then converted.
    """
    if not raw.strip():
        if empty_ok:
            raw = b"{}"
        else:
            raise InvalidRequest("a JSON object body is required")
    if gate is None:
        try:
            value = _decoder(kind).decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError,
                UnicodeDecodeError):
            value = convert(_parse(raw, object), kind)
        check_strings(msgspec.to_builtins(value))
        return value
    document = _parse(raw, object)
    check_strings(document)
    gate(document, policy)
    return convert(document, kind)


def _parse(raw: bytes, kind: type[T]) -> T:
    try:
        return _decoder(kind).decode(raw)
    except msgspec.ValidationError as error:
        raise InvalidRequest(f"invalid body: {error}") from None
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        raise InvalidRequest("body is not valid JSON") from None


def convert(value: object, kind: type[T]) -> T:
    """Convert decoded JSON into ``kind`` or raise ``invalid-request`` naming the problem.

    A JSON number with a zero fraction (``43.0``, ``1e2``) is an integer in JSON Schema, so
    an integer field takes it; nothing else of the body is touched.
    """
    for _ in range(MAX_INTEGRAL_FIXES):
        try:
            return msgspec.convert(value, kind)
        except msgspec.ValidationError as error:
            fixed = _integral_float_as_int(value, str(error))
            if fixed is None:
                raise InvalidRequest(f"invalid body: {error}") from None
            value = fixed
    raise InvalidRequest("invalid body: too many integers written as fractions")


MAX_INTEGRAL_FIXES = 64
_FLOAT_FOR_INT = re.compile(
    r"^Expected `int(?: \| null)?`, got `float` - at `\$((?:\.\w+|\[\d+\])*)`$")
"""msgspec's refusal of a float where an integer (or an optional one) goes."""
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]")


def _integral_float_as_int(document: object, error: str) -> object | None:
    """``document`` with the integral float the error points at made an int, else None."""
    match = _FLOAT_FOR_INT.match(error)
    if match is None:
        return None
    steps: list[str | int] = [name if name else int(index)
                              for name, index in _STEP.findall(match.group(1))]
    return _replace(document, steps)


def _replace(node: object, steps: list[str | int]) -> object | None:
    if not steps:
        return int(node) if isinstance(node, float) and node.is_integer() else None
    step, rest = steps[0], steps[1:]
    if isinstance(step, str) and isinstance(node, dict) and step in node:
        child = _replace(node[step], rest)
        return None if child is None else {**node, step: child}
    if isinstance(step, int) and isinstance(node, list) and step < len(node):
        child = _replace(node[step], rest)
        return None if child is None else [*node[:step], child, *node[step + 1:]]
    return None


async def read_body(request: Request[object, object, State], kind: type[T], *,
                    empty_ok: bool = False, gate: Gate | None = None) -> T:
    """Read and strictly decode the request body (every JSON body of the API passes here);
    a large one is decoded and scanned in a worker thread."""
    raw = await body_bytes(request)
    policy = request.app.state.get("gate_policy") if gate is not None else None
    if len(raw) > THREAD_BODY_BYTES:
        return await asyncio.to_thread(decode, raw, kind, empty_ok=empty_ok, gate=gate,
                                       policy=policy)
    return decode(raw, kind, empty_ok=empty_ok, gate=gate, policy=policy)


async def body_bytes(request: Request[object, object, State]) -> bytes:
    """The request body, read from ASGI ``receive`` under the limits of ``request.body()``
    (:func:`receive_body`). It is kept where ``body()`` looks first, so that answers it
    afterwards. (``body()`` builds every header into a multidict for the length and reads
    through an async generator: ~15 µs a request.)"""
    state = ScopeState.from_scope(request.scope)
    if state.body is not Empty:
        return state.body
    body = await receive_body(request.scope, request.receive,
                              request.route_handler.resolve_request_max_body_size())
    request.is_connected = False
    state.body = body
    return body


async def receive_body(scope: Scope, receive: Receive, limit: int | None) -> bytes:
    """A request's body as Litestar's ``request.body()`` reads it: 413 when the announced
    or the received size passes ``limit`` (None: no limit), 400 for a bad
    ``Content-Length``, 500 when the client leaves midway."""
    most = limit or math.inf
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                announced = int(value.decode("latin-1"))
            except ValueError:
                raise ClientException(
                    f"Invalid content-length: {value.decode('latin-1')!r}") from None
            if announced > most:
                raise RequestEntityTooLarge
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] == "http.request":
            chunk = event["body"]
            if chunk:
                size += len(chunk)
                if size > most:
                    raise RequestEntityTooLarge
                chunks.append(chunk)
            if not event.get("more_body", False):
                break
        elif event["type"] == "http.disconnect":
            raise InternalServerException("client disconnected prematurely")
    return b"".join(chunks)


def check_strings(value: object, depth: int = 0, path: str = "$", *,
                  scan: bool | None = None) -> None:
    """Refuse NUL characters anywhere (Postgres text cannot hold them), deep nesting, and
    any string holding a high-confidence credential (``credential-in-request``, naming the
    JSON path, never the value).

    One RE2 search over every string of the body, joined by newlines, decides whether the
    strings are searched one by one (``scan``) to name the path: a credential in one string
    is in the joined text too (the patterns have no ``^``/``$`` anchors, and a newline is
    no word character), so only a body that may hold one pays a search per string. The same
    walk finds NULs and deep nesting, so a clean body is walked once: only a body with
    something to refuse is walked again to name the path and the first problem."""
    if scan is None:
        strings: list[str] = []
        too_deep = _strings(value, depth, strings)
        joined = "\n".join(strings)
        scan = holds_credential(joined)
        if not (scan or too_deep or "\x00" in joined):
            return
    if depth > MAX_DEPTH:
        raise InvalidRequest(f"body nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidRequest("strings must not contain NUL characters")
        if scan and path not in RUNTIME_KEY_PATHS and holds_credential(value):
            raise CredentialInRequest(
                f"{path} holds a credential; pass secrets by reference (secretRef)",
                path=path)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_strings(key, depth + 1, f"{path} (a key)", scan=scan)
            check_strings(item, depth + 1, _member(path, str(key)), scan=scan)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_strings(item, depth + 1, f"{path}[{index}]", scan=scan)


def _strings(value: object, depth: int, into: list[str]) -> bool:
    """Every string (keys too) of ``value`` down to the nesting limit, into ``into``; True
    when something lies deeper than the limit."""
    if depth > MAX_DEPTH:
        return True
    if isinstance(value, str):
        into.append(value)
        return False
    too_deep = False
    if isinstance(value, dict):
        for key, item in value.items():
            too_deep = _strings(key, depth + 1, into) | _strings(item, depth + 1, into) \
                or too_deep
    elif isinstance(value, list):
        for item in value:
            too_deep = _strings(item, depth + 1, into) or too_deep
    return too_deep


def _member(path: str, key: str) -> str:
    """``$.a.b``, or ``$["a b"]`` for a key that is not a plain name."""
    if key.isidentifier() and key.isascii():
        return f"{path}.{key}"
    if holds_credential(key):
        return f"{path}[?]"
    return f"{path}[{msgspec.json.encode(key).decode()}]"


def decode_runner_body(raw: bytes, kind: type[T], *, empty_ok: bool = False) -> T:
    """Decode a runner's report strictly. No credential scan: a runner sends lines masked by
    value, and the manager redacts them by pattern as it stores them."""
    if not raw.strip():
        if not empty_ok:
            raise InvalidRequest("a JSON object body is required")
        raw = b"{}"
    for _ in range(MAX_INTEGRAL_FIXES):  # as convert(): 80.0 is an integer in JSON Schema
        try:
            return _parse(raw, kind)
        except InvalidRequest as refused:
            said = str(refused).removeprefix("invalid body: ")
            fixed = (_integral_float_as_int(msgspec.json.decode(raw), said)
                     if _FLOAT_FOR_INT.match(said) else None)
            if fixed is None:
                raise
            raw = msgspec.json.encode(fixed)
    raise InvalidRequest("invalid body: too many integers written as fractions")
