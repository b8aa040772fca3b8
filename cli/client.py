"""The CLI's HTTP client for the API (one request per command over :mod:`cli.http1`: no
heavy imports on the way to the first request), and the shared ``--api`` and ``--token``
options. The credential sent is ``--token``, else ``SVC_TOKEN``, else the key in
``${SVC_DATA_DIR:-.svc}/admin.key`` when that file exists (DESIGN 12); it is never printed.

No cyclopts here (its import is most of a client command's start-up): the options that
parse ``--api``/``--token`` live in :mod:`cli.options` (``ApiOptions``), which builds on
:class:`Endpoint`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast
from urllib.parse import urlencode

import msgspec

from cli import http1

DEFAULT_API = "http://127.0.0.1:8080"
ADMIN_KEY_FILE = "admin.key"
DEFAULT_DATA_DIR = ".svc"
TIMEOUT_S = 30.0
REPLAYED_HEADER = "idempotent-replayed"
REQUEST_ID_HEADER = "x-request-id"
T = TypeVar("T")
Param = str | int | bool | None


@dataclass
class Endpoint:
    """Where the API is and which key to send; the commands' ``--api``/``--token`` options
    (:class:`cli.options.ApiOptions`) are one."""

    api: str = DEFAULT_API
    token: str | None = None
    data_dir: str = DEFAULT_DATA_DIR

    def credential(self) -> str | None:
        """The API key to send: ``--token``/``SVC_TOKEN``, else the data directory's
        ``admin.key``, else none."""
        if self.token and self.token.strip():
            return self.token.strip()
        path = Path(self.data_dir or DEFAULT_DATA_DIR) / ADMIN_KEY_FILE
        try:
            key = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return key or None


@dataclass(frozen=True)
class ApiResponse:
    """An API answer: status, decoded JSON and the raw text (printed unchanged by ``--raw``)."""

    status: int
    data: object
    text: str
    replayed: bool = False
    """The API answered an idempotent replay (header ``Idempotent-Replayed: true``)."""
    request: str = ""
    """What was asked: the method and the URL (named on an error line)."""
    request_id: str | None = None
    """The answer's ``X-Request-Id`` (the server logs under it), if it sent one."""
    content_type: str = ""

    @property
    def ok(self) -> bool:
        """True for a 2xx answer that is JSON (or empty): anything else is reported."""
        return 200 <= self.status < 300 and not self.not_json

    @property
    def not_json(self) -> bool:
        """The answer has a body that is not JSON (an HTML page of a proxy, say)."""
        return self.data is None and bool(self.text.strip())

    @property
    def error_code(self) -> str | None:
        """The envelope's ``error.code`` of a refusal, if any."""
        error = self.data.get("error") if isinstance(self.data, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        return code if isinstance(code, str) else None

    def decoded(self, kind: type[T]) -> T:
        """The answer decoded into a wire type."""
        return decoder_for(kind).decode(self.text)


_decoders: dict[type, msgspec.json.Decoder[object]] = {}


def decoder_for(kind: type[T]) -> msgspec.json.Decoder[T]:
    """The one JSON decoder of a wire type, built on first use."""
    found = _decoders.get(kind)
    if found is None:
        found = _decoders[kind] = msgspec.json.Decoder(kind)
    return cast("msgspec.json.Decoder[T]", found)


class ApiUnreachable(Exception):
    """The API did not answer."""


def call(options: Endpoint, method: str, path: str, *, params: dict[str, Param] | None = None,
         body: bytes | None = None, headers: dict[str, str] | None = None) -> ApiResponse:
    """Send one request to the API; ``params`` with None values are left out."""
    query = urlencode({k: _query_value(v) for k, v in (params or {}).items() if v is not None})
    base = base_url(options.api)
    target = path + (f"?{query}" if query else "")
    credential = options.credential()
    headers = {**({"content-type": "application/json"} if body is not None else {}),
               **({"authorization": f"Bearer {credential}"} if credential else {}),
               **(headers or {})}
    try:
        answer = http1.request(base, method, target,
                               body=body, headers=headers, timeout=TIMEOUT_S)
    except (OSError, http1.ProtocolError, ValueError) as error:
        raise ApiUnreachable(
            f"cannot reach the API at {base} ({type(error).__name__}); is "
            "`svc serve` running there? (--api or SVC_API_URL name another address)") from None
    try:
        data = msgspec.json.decode(answer.body) if answer.body else None
    except msgspec.DecodeError:
        data = None
    replayed = answer.headers.get(REPLAYED_HEADER, "").lower() == "true"
    return ApiResponse(answer.status, data, answer.body.decode("utf-8", errors="replace"),
                       replayed, f"{method} {base}{target}",
                       answer.headers.get(REQUEST_ID_HEADER),
                       answer.headers.get("content-type", ""))


def base_url(api: str) -> str:
    """The API's base URL; ``host:port`` alone means plain HTTP there."""
    api = api.strip().rstrip("/")
    return api if "://" in api else f"http://{api}"


def _query_value(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
