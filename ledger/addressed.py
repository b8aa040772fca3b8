"""Commands addressed to one stream by their first field."""

from __future__ import annotations

from typing import ClassVar


class Addressed:
    """Mixin for a command Struct whose first field is the id of the stream it addresses
    (``task_id``, ``run_id``, ``session_id``, ``runner_job_id``)."""

    __slots__ = ()
    __struct_fields__: ClassVar[tuple[str, ...]]

    @property
    def stream_id(self) -> str:
        """The id of the stream the command is addressed to."""
        value: str = getattr(self, self.__struct_fields__[0])
        return value
