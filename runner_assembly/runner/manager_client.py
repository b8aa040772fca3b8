"""The runner's side of the runner protocol: one HTTP client to the manager (DESIGN 9).

The same program talks to the local API (local driver) or the manager's Service (pod). Every
request carries the job's bearer token; transient failures (no connection, 5xx) are retried
with the same body, which the manager accepts once (claims by claimant, lines by ``seq``).
Each thread of the runner (its main thread, the heartbeats, the line shipper) keeps one
keep-alive connection: a job's reports do not each open a connection of their own. The
bodies are the API's own message types (:mod:`runner_assembly.contract.messages`), sent and
read with :mod:`runner_assembly.contract.http1` (a report costs the runner less than half
the CPU ``http.client`` spent on it: a fleet's runners share their host with the manager).

A local runner may also be handed the Unix socket of the manager's runner listener
(``SVC_RUNNER_API_SOCKET``: a worker of its own, so a fleet's reports do not queue in front
of callers' requests). It is tried first; when it cannot be reached (a manager restarted
without it) the URL's host and port are, and after any failed exchange the URL is used for
:data:`LISTENER_REST_S` (a listener that accepts but does not answer is not waited on).
"""

from __future__ import annotations

import encodings.idna  # noqa: F401  imported now: a host name is encoded with it later
import random
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

import msgspec

from runner_assembly.contract.http1 import Answer, ProtocolError, read_answer, request_head
from runner_assembly.contract.messages import (
    AssemblyBody,
    Channel,
    ClaimBody,
    ExitBody,
    HeartbeatBody,
    LinePart,
    LinesBody,
    Message,
    StorageSummaryBody,
    Stream,
    ThreadBody,
)

RETRY_FOR_S = 120.0
"""How long a report is retried while the manager cannot be reached (a restart)."""
TIMEOUT_S = 30.0
PAUSE_S = (0.1, 2.0)
"""The first and the longest pause between two tries of a report (jittered, doubling)."""
REUSE_IDLE_S = 2.0
"""A kept connection idle longer than this is closed and a new one opened: the manager
closes idle connections after its keep-alive time (``SVC_HTTP_KEEPALIVE_S``, 5 s by
default), so a heartbeat every 10 s would otherwise find its connection gone."""


LISTENER_CONNECT_S = 5.0
"""How long connecting to the runner listener's socket may take (a full backlog)."""
LISTENER_REST_S = 30.0
"""After a failed exchange, how long reports go to the URL rather than the listener."""


def retry_after(value: str | None) -> float:
    """The seconds a ``Retry-After`` header asks to wait (0 when absent or not a number of
    seconds; capped at a minute)."""
    try:
        return min(max(float(value), 0.0), 60.0) if value else 0.0
    except ValueError:
        return 0.0


def next_pause(pause: float, asked: float, left: float) -> float:
    """The wait before the next try: a random part of ``pause`` (so runners that lost the
    manager together do not come back in lockstep), at least what the manager asked for,
    never past the deadline."""
    return max(0.0, min(max(random.uniform(pause / 2, pause), asked), left))


class ManagerRefused(Exception):
    """The manager refused a report (4xx): e.g. the token of an ended job."""

    def __init__(self, status: int, code: str) -> None:
        super().__init__(f"manager refused the report: HTTP {status} {code}")
        self.status = status
        self.code = code


class Connection:
    """One kept connection to the manager: a request is written in one piece, its answer
    read by its length."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")

    def exchange(self, request: bytes) -> tuple[Answer, bool]:
        """Send ``request`` (head and body); the answer, and whether the manager closes the
        connection after it."""
        self.sock.sendall(request)
        return read_answer(self.reader, "POST")

    def close(self) -> None:
        """Close the connection."""
        self.reader.close()
        self.sock.close()


def listener_socket(path: str, timeout: float) -> socket.socket | None:
    """A connection to the runner listener's Unix socket ``path``; None when nothing listens
    there (missing or refused). Connecting may take :data:`LISTENER_CONNECT_S` at most."""
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.settimeout(min(LISTENER_CONNECT_S, timeout))
    try:
        unix.connect(path)
    except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
        unix.close()
        return None
    except OSError:
        unix.close()
        raise
    unix.settimeout(timeout)
    return unix


class ManagerClient:
    """Reports of one runner job to the manager."""

    def __init__(self, base_url: str, runner_job_id: str, token: str,
                 retry_for_s: float = RETRY_FOR_S, listener: str | None = None) -> None:
        """``listener``: the Unix socket of the manager's runner listener, tried before the
        URL (``http://`` only)."""
        parts = urllib.parse.urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query \
                or parts.fragment:
            raise ValueError("the manager's address must be an http:// or https:// URL with "
                             "a host and no query")  # never send the token anywhere else
        self._https = parts.scheme == "https"
        self._address = (parts.hostname, parts.port or (443 if self._https else 80))
        self._host = parts.netloc.rpartition("@")[2].encode("idna").decode("ascii")
        self._prefix = parts.path
        self._fields = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        # a job id, token or address that cannot be sent is refused now, not retried later
        request_head("POST", f"{self._prefix}/api/v1/runner/jobs/{runner_job_id}/claim",
                     self._host, self._fields, 0)
        self._listener = listener if listener and not self._https else None
        self._listener_rests_until = float("-inf")
        self.job = runner_job_id
        self.token = token
        self.retry_for_s = retry_for_s
        self._local = threading.local()
        self.answered_at = time.monotonic()
        """When the manager last answered a report (from the client's start)."""
        self.lines_taken_at = float("-inf")
        """When (``time.monotonic()``) the manager last took a batch of lines: a batch taken
        under the job's token renews its lease as a heartbeat does."""

    def post(self, path: str, body: Message) -> dict[str, Any]:
        """POST ``body`` to ``path`` (below the base URL); retried until it is answered."""
        data = msgspec.json.encode(body)
        deadline = time.monotonic() + self.retry_for_s
        pause, asked = PAUSE_S[0], 0.0
        while True:
            try:
                status, text, asked = self._exchange(self._prefix + path, data)
                if status < 300:
                    self.answered_at = time.monotonic()
                    value = msgspec.json.decode(text) if text else {}
                    return value if isinstance(value, dict) else {}
                if status < 500:
                    raise ManagerRefused(status, _code(text))
            except (ProtocolError, OSError, ValueError):
                asked = 0.0
                self._listener_rests_until = time.monotonic() + LISTENER_REST_S
            if time.monotonic() > deadline:
                raise ManagerRefused(0, "manager-unreachable")
            time.sleep(next_pause(pause, asked, deadline - time.monotonic()))
            pause = min(pause * 2, PAUSE_S[1])

    def _exchange(self, target: str, data: bytes) -> tuple[int, bytes, float]:
        """One request on this thread's connection: its status and body. A kept connection
        the manager has closed meanwhile (a cap on connections, a restart) is opened again
        at once."""
        request = request_head("POST", target, self._host, self._fields, len(data)) + data
        kept: Connection | None = getattr(self._local, "connection", None)
        if kept is not None and \
                time.monotonic() - getattr(self._local, "used", 0.0) > REUSE_IDLE_S:
            self._drop()
            kept = None
        if kept is not None:
            try:
                return self._send(kept, request)
            except (ProtocolError, OSError):
                pass
        return self._send(self._open(), request)

    def _send(self, connection: Connection, request: bytes) -> tuple[int, bytes, float]:
        try:
            answer, closes = connection.exchange(request)
        except BaseException:  # whatever the answer left unread: never used again
            self._drop()
            raise
        if closes:
            self._drop()
        self._local.used = time.monotonic()
        return answer.status, answer.body, retry_after(answer.headers.get("retry-after"))

    def _open(self) -> Connection:
        """A new connection for this thread: to the listener's socket unless it rests or
        nothing listens there, else to the URL's host and port."""
        sock = None
        if self._listener is not None and time.monotonic() >= self._listener_rests_until:
            sock = listener_socket(self._listener, TIMEOUT_S)
        if sock is None:
            sock = socket.create_connection(self._address, timeout=TIMEOUT_S)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._https:
                import ssl

                sock = ssl.create_default_context().wrap_socket(
                    sock, server_hostname=self._address[0])
        connection = Connection(sock)
        self._local.connection = connection
        return connection

    def _drop(self) -> None:
        connection: Connection | None = getattr(self._local, "connection", None)
        self._local.connection = None
        if connection is not None:
            connection.close()

    def _job(self, message: str, body: Message) -> dict[str, Any]:
        return self.post(f"/api/v1/runner/jobs/{self.job}/{message}", body)

    def claim(self, claimant: str, startup: Mapping[str, object] | None = None) -> bool:
        """Claim the job's start, with this runner's startup event; False: another runner
        has it, exit without starting."""
        body = ClaimBody(claimant=claimant, startup=dict(startup) if startup is not None
                         else None)
        return bool(self._job("claim", body).get("start"))

    def heartbeat(self) -> None:
        """Renew the job's lease."""
        self._job("heartbeat", HeartbeatBody())

    def lines(self, channel: str, seq: int, lines: Sequence[str | LinePart],
              stream: Stream = "stdout") -> None:
        """Send batch number ``seq`` of a channel's (and stream's) lines."""
        self._job("lines", LinesBody(channel=cast(Channel, channel), seq=seq, lines=list(lines),
                                     stream=stream))
        self.lines_taken_at = time.monotonic()

    def assembly(self, event: Mapping[str, object]) -> None:
        """Send the bounded assembly event."""
        self._job("assembly", AssemblyBody(assembly=dict(event)))

    def thread(self, thread_id: str, mode: Literal["start", "resume"]) -> None:
        """Report the thread the backend started or resumed."""
        self._job("thread", ThreadBody(thread_id=thread_id, mode=mode))

    def storage(self, session_id: str, summary: StorageSummaryBody) -> None:
        """Write the session volume summary back (SPEC 4.2)."""
        self.post(f"/api/v1/sessions/{session_id}/storage/refresh", summary)

    def exit(self, report: ExitBody) -> None:
        """Report how the job ended."""
        self._job("exit", report)


def _code(body: bytes) -> str:
    try:
        return str(msgspec.json.decode(body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "refused"
