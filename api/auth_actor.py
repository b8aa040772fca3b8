"""The ledger writer the API's services use: every entry a request makes names the
request's principal as its actor (DESIGN 12); the service's own loops keep their names."""

from __future__ import annotations

from collections.abc import Sequence

from api.auth_principal import acting_as
from ledger.streams import Command
from ledger.writer import Outcome, Writer


class ActingWriter:
    """A :class:`ledger.writer.Writer` in front of another, recording the acting principal
    (``api.auth_principal.ACTING``) instead of the actor its callers name."""

    def __init__(self, inner: Writer) -> None:
        self.inner = inner

    async def start(self) -> None:
        """Start the writer behind."""
        await self.inner.start()

    async def close(self) -> None:
        """Close the writer behind."""
        await self.inner.close()

    async def execute(self, command: Command, actor: str) -> Outcome:
        """Execute ``command`` as the acting principal (else ``actor``)."""
        return await self.inner.execute(command, acting_as(actor))

    async def execute_all(self, commands: Sequence[Command], actor: str, *,
                          atomic: bool = False) -> list[Outcome]:
        """Execute ``commands`` in order as the acting principal (else ``actor``)."""
        return await self.inner.execute_all(commands, acting_as(actor), atomic=atomic)

    async def plan(self, command: Command) -> Outcome:
        """Decide without appending."""
        return await self.inner.plan(command)

    async def plan_all(self, commands: Sequence[Command]) -> list[Outcome]:
        """Decide ``commands`` in order without appending."""
        return await self.inner.plan_all(commands)
