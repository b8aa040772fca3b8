"""Commands addressed to one stream by one of their own fields."""

from __future__ import annotations

from typing import ClassVar


class Addressed:
    """Mixin for a command whose stream id is the value of its field named ``stream_key``."""

    __slots__ = ()
    stream_key: ClassVar[str]

    @property
    def stream_id(self) -> str:
        """The id of the stream the command is addressed to."""
        value: str = getattr(self, self.stream_key)
        return value
