"""The ``Location`` of a 201: the URL of what the request created.

A route that creates declares ``after_request=Located(template)``; the template is the
documented path of the created resource (``/api/v1/queue/tasks/{taskId}``), each ``{name}``
filled from the field of that name in the answer. :func:`api.openapi.complete` documents
the header from the same object.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import quote

import msgspec
from litestar import Response
from litestar.status_codes import HTTP_201_CREATED

PLACEHOLDER = re.compile(r"\{([A-Za-z]+)\}")


@dataclass(frozen=True)
class Located:
    """The ``after_request`` hook adding ``Location`` to a route's 201 answers."""

    template: str

    async def __call__(self, response: Response[Any]) -> Response[Any]:
        """``response``, with ``Location`` when it is a 201."""
        if response.status_code == HTTP_201_CREATED:
            response.headers["Location"] = self.url(self._fields(response.content))
        return response

    def url(self, answer: dict[str, Any]) -> str:
        """The template filled from ``answer``'s fields (each escaped as a path segment)."""
        return PLACEHOLDER.sub(lambda found: quote(str(answer[found[1]]), safe=""),
                               self.template)

    @cached_property
    def _names(self) -> tuple[str, ...]:
        return tuple(PLACEHOLDER.findall(self.template))

    @cached_property
    def _decoder(self) -> msgspec.json.Decoder[Any]:
        """Reads only the template's fields of an encoded answer (the rest is skipped, not
        built: an answer is a whole task's details)."""
        wanted = msgspec.defstruct("Wanted", [(name, Any) for name in self._names])
        return msgspec.json.Decoder(wanted)

    def _fields(self, content: object) -> dict[str, Any]:
        """The template's fields by JSON name: of a struct, or of the bytes a route encoded
        itself."""
        if isinstance(content, bytes | bytearray | memoryview):
            found = self._decoder.decode(content)
            return {name: getattr(found, name) for name in self._names}
        return dict(msgspec.to_builtins(content))
