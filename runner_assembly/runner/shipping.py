"""Threads of a runner job that keep the manager informed: the line shipper and heartbeats.

The runner writes its masked output and trace to scratch files of its own; the shipper sends
their complete lines in batches numbered 1, 2, … per channel (a resent batch is accepted
once), and at the end the last line without its newline too.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

from runner_assembly.runner.manager_client import ManagerClient, ManagerRefused

MAX_BATCH_LINES = 500
MAX_BATCH_BYTES = 256 * 1024
SHIP_EVERY_S = 0.2


class Shipper:
    """Sends the lines of a job's scratch channel files to the manager."""

    def __init__(self, client: ManagerClient, files: dict[str, Path],
                 sent: Callable[[str], None] | None = None) -> None:
        """``sent(channel)`` is called after a batch is sent, before its number is kept."""
        self.client = client
        self.sent = sent
        self.files = files
        self.offsets = dict.fromkeys(files, 0)
        self.seqs = dict.fromkeys(files, 0)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="shipper")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(SHIP_EVERY_S):
            with contextlib.suppress(ManagerRefused):
                self.ship(final=False)

    def ship(self, *, final: bool) -> None:
        """Send every complete line written so far (all of them when ``final``)."""
        with self._lock:
            for channel, path in self.files.items():
                while self._ship_batch(channel, path, final):
                    pass

    def _ship_batch(self, channel: str, path: Path, final: bool) -> bool:
        try:
            with path.open("rb") as handle:
                handle.seek(self.offsets[channel])
                data = handle.read(MAX_BATCH_BYTES)
                more = bool(handle.read(1))
        except FileNotFoundError:
            return False
        end = len(data) if final and not more else data.rfind(b"\n") + 1
        if end == 0 and len(data) == MAX_BATCH_BYTES:  # a line longer than a batch: cut it
            end = len(data)
        if end == 0:
            return False
        chunk = data[:end]
        pieces = chunk.split(b"\n")
        if chunk.endswith(b"\n"):
            pieces.pop()
        used = end
        if len(pieces) > MAX_BATCH_LINES:
            pieces = pieces[:MAX_BATCH_LINES]
            used = sum(len(piece) + 1 for piece in pieces)
        lines = [piece.decode("utf-8", errors="replace").removesuffix("\r") for piece in pieces]
        self.client.lines(channel, self.seqs[channel] + 1, lines)
        if self.sent is not None:
            self.sent(channel)
        self.seqs[channel] += 1
        self.offsets[channel] += used
        return True

    def finish(self) -> None:
        """Stop the loop and send the rest, the last partial lines included."""
        self._stop.set()
        self._thread.join()
        self.ship(final=True)


class Heartbeats:
    """Renews the job's lease every ``interval`` seconds until stopped."""

    def __init__(self, client: ManagerClient, interval: float) -> None:
        self.client = client
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="heartbeat")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(ManagerRefused):
                self.client.heartbeat()

    def stop(self) -> None:
        """Stop beating."""
        self._stop.set()
