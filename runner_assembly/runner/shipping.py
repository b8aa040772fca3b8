"""Threads of a runner job that keep the manager informed: the line shipper and heartbeats.

The runner writes its masked output, the backend's masked errors and its trace to scratch
files of its own; the shipper sends their complete lines in batches numbered 1, 2, … per
channel and stream (a resent batch is accepted once), and at the end the last line without
its newline too. A line longer than a protocol line goes in numbered parts
(:mod:`runner_assembly.runner.line_parts`), never cut.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from runner_assembly.contract.messages import MAX_LINE_BYTES, LinePart, Stream
from runner_assembly.runner.line_parts import line_items
from runner_assembly.runner.manager_client import ManagerClient, ManagerRefused

MAX_BATCH_LINES = 500
MAX_BATCH_BYTES = 256 * 1024
SHIP_EVERY_S = 0.2
"""The shortest time between two rounds: output coming fast goes in batches."""
LOOK_EVERY_S = 1.0
"""How often the shipper looks at its files when no doorbell rang (a line written by
anything that does not ring it); without a doorbell it looks every :data:`SHIP_EVERY_S`."""
SCAN_BYTES = 1024 * 1024
"""How much of a line longer than a batch is read at a time while looking for its end."""


class Source(NamedTuple):
    """Where a scratch file's lines go: a session channel, and the backend's stream."""

    channel: str
    stream: Stream = "stdout"


class Shipper:
    """Sends the lines of a job's scratch files to the manager."""

    def __init__(self, client: ManagerClient, files: dict[Source, Path],
                 sent: Callable[[str], None] | None = None,
                 written: threading.Event | None = None) -> None:
        """``sent(channel)`` is called after a batch is sent, before its number is kept;
        ``written`` is the doorbell its files' writers ring: the shipper sleeps until it
        rings (or :data:`LOOK_EVERY_S` passed) instead of waking five times a second."""
        self.client = client
        self._doorbell = written or threading.Event()
        self._look_every_s = LOOK_EVERY_S if written is not None else SHIP_EVERY_S
        self.sent = sent
        self.files = files
        self.offsets = dict.fromkeys(files, 0)
        self.seqs = dict.fromkeys(files, 0)
        self._long: dict[Source, tuple[list[LinePart], int]] = {}
        """The parts of a long line not sent yet, and the offset after the line."""
        self._scanned = dict.fromkeys(files, 0)
        """How far a long line being written is known to have no newline."""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="shipper")
        self._thread.start()

    def _loop(self) -> None:
        last = float("-inf")
        while not self._stop.is_set():
            self._doorbell.wait(self._look_every_s)
            early = SHIP_EVERY_S - (time.monotonic() - last)
            if early > 0 and self._stop.wait(early):  # soon after a round: gather a batch
                return
            self._doorbell.clear()  # a line written from now on rings for the next round
            with contextlib.suppress(ManagerRefused):
                self.ship(final=False)
            last = time.monotonic()

    def ship(self, *, final: bool) -> None:
        """Send every complete line written so far (all of them when ``final``)."""
        with self._lock:
            for source, path in self.files.items():
                while self._ship_batch(source, path, final):
                    pass

    def _ship_batch(self, source: Source, path: Path, final: bool) -> bool:
        if source in self._long:
            return self._ship_parts(source)
        try:
            written = path.stat().st_size - self.offsets[source]
            if written <= 0:
                return False  # nothing new: one system call, no open and read
            with path.open("rb") as handle:
                handle.seek(self.offsets[source])
                # what was written, not a whole batch's buffer: a buffer of 256 KiB is mapped
                # and unmapped at each read, and each unmapping interrupts every core
                data = handle.read(min(written, MAX_BATCH_BYTES))
                more = bool(handle.read(1))
        except FileNotFoundError:
            return False
        end = len(data) if final and not more else data.rfind(b"\n") + 1
        if end == 0 and len(data) == MAX_BATCH_BYTES:  # a line longer than a batch
            return self._take_long(source, path, final)
        if end == 0:
            return final and more  # at the end, a last line still growing: read it again
        items: list[str | LinePart] = []
        used = 0
        while used < end:
            stop = data.find(b"\n", used, end)
            stop = end if stop < 0 else stop
            line = line_items(data[used:stop])
            if items and len(items) + len(line) > MAX_BATCH_LINES:
                break
            items += line
            used = min(stop + 1, end)
        self._send(source, items)
        self.offsets[source] += used
        return True

    def _take_long(self, source: Source, path: Path, final: bool) -> bool:
        """Read a line longer than a batch once it is complete (or the job has ended) and
        send its first parts; False while it is still being written."""
        offset = self.offsets[source]
        with path.open("rb") as handle:
            handle.seek(max(self._scanned[source], offset))
            end, newline = handle.tell(), -1
            while newline < 0 and (chunk := handle.read(SCAN_BYTES)):
                newline = chunk.find(b"\n")
                end += newline if newline >= 0 else len(chunk)
            if newline < 0 and not final:
                self._scanned[source] = end
                return False
            handle.seek(offset)
            line = handle.read(end - offset)
        after = end + 1 if newline >= 0 else end
        parts = [item for item in line_items(line) if isinstance(item, LinePart)]
        self._long[source] = (parts, after)
        return self._ship_parts(source)

    def _ship_parts(self, source: Source) -> bool:
        """Send the next parts of the long line in hand (as many as a batch holds)."""
        parts, after = self._long[source]
        batch = parts[:max(MAX_BATCH_BYTES // MAX_LINE_BYTES - 1, 1)]
        self._send(source, list(batch))
        if len(batch) < len(parts):
            self._long[source] = (parts[len(batch):], after)
        else:
            del self._long[source]
            self.offsets[source] = after
        return True

    def _send(self, source: Source, items: list[str | LinePart]) -> None:
        self.client.lines(source.channel, self.seqs[source] + 1, items, source.stream)
        if self.sent is not None:
            self.sent(source.channel)
        self.seqs[source] += 1

    def finish(self) -> None:
        """Stop the loop and send the rest, the last partial lines included."""
        self._stop.set()
        self._doorbell.set()  # wake the loop to see the stop
        self._thread.join()
        self.ship(final=True)


class Heartbeats:
    """Renews the job's lease every ``interval`` seconds until stopped; a beat is left out
    when the manager took a batch of lines within the interval, which renewed the lease
    already (a job printing steadily sends one report a second, not two).

    A beat refused for the job's token (it has ended), or failing while the manager has not
    answered anything for ``patience_s``, tells ``lost`` why: the manager can no longer take
    this job's reports."""

    def __init__(self, client: ManagerClient, interval: float,
                 patience_s: float = float("inf"),
                 lost: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.interval = interval
        self.patience_s = patience_s
        self.lost = lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="heartbeat")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if time.monotonic() - self.client.lines_taken_at < self.interval:
                continue
            try:
                self.client.heartbeat()
            except ManagerRefused as refused:
                if (why := self._hopeless(refused)) is not None and self.lost is not None:
                    self.lost(why)
                    return

    def _hopeless(self, refused: ManagerRefused) -> str | None:
        """Why the job cannot go on after ``refused`` (None: it may, try the next beat)."""
        if self._stop.is_set():
            return None  # the job is ending: its exit may already have been taken
        if refused.status == 401:
            return "the manager refuses the job's token: the job has ended"
        silent = time.monotonic() - self.client.answered_at
        if refused.status == 0 and silent > self.patience_s:
            return (f"no answer from the manager for {int(silent)} s, past the "
                    f"{int(self.patience_s)} s after which it ends the job as lost")
        return None

    def stop(self) -> None:
        """Stop beating."""
        self._stop.set()
