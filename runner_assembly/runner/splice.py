"""Two connected sockets joined both ways until both sides are done (standard library only:
the sandbox's egress relay imports it too, :mod:`runner_assembly.runner.egress_relay`)."""

from __future__ import annotations

import contextlib
import select
import socket

CHUNK = 65536


def splice(first: socket.socket, second: socket.socket, pending: bytes = b"") -> None:
    """Copy what each socket receives to the other (``pending`` first, to ``second``); a
    side that ends its sending ends the other's receiving (half-close); return once both
    have, or on an error; both sockets closed."""
    peer = {first.fileno(): second, second.fileno(): first}
    open_ends = {first.fileno(): first, second.fileno(): second}
    try:
        if pending:
            second.sendall(pending)
        while open_ends:
            readable, _, _ = select.select(list(open_ends.values()), [], [])
            for source in readable:
                data = source.recv(CHUNK)
                target = peer[source.fileno()]
                if data:
                    target.sendall(data)
                    continue
                del open_ends[source.fileno()]
                with contextlib.suppress(OSError):
                    target.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        first.close()
        second.close()
