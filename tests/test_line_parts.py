"""A line is never cut silently (issue 27 item 6): up to 64 KiB it is shipped whole, a longer
one in numbered parts, cut between UTF-8 characters, that concatenate to it -- also a line
longer than a batch, shipped once it is complete, in batches of its own; each scratch file
is shipped as its channel's stream."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from runner_assembly.contract.messages import MAX_LINE_BYTES, LinePart
from runner_assembly.runner.line_parts import line_items
from runner_assembly.runner.manager_client import ManagerClient
from runner_assembly.runner.shipping import Shipper, Source


class Recorder:
    """Stands for the manager: the batches it was sent."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, int, list[Any], str]] = []

    def lines(self, channel: str, seq: int, lines: list[Any], stream: str = "stdout") -> None:
        self.batches.append((channel, seq, list(lines), stream))


def test_a_line_is_whole_up_to_64_kib_then_in_parts_between_characters() -> None:
    whole = "x" * MAX_LINE_BYTES
    assert line_items(whole.encode() + b"\r") == [whole]
    text = "é" * 40_000  # 80,000 bytes: two parts, none ending inside a character
    parts = line_items(text.encode())
    assert all(isinstance(part, LinePart) for part in parts)
    pieces = cast(list[LinePart], parts)
    assert [(part.part, part.parts) for part in pieces] == [(1, 2), (2, 2)]
    assert all(len(part.text.encode()) <= MAX_LINE_BYTES for part in pieces)
    assert "".join(part.text for part in pieces) == text


def test_a_line_longer_than_a_batch_ships_once_complete_in_numbered_parts(
    tmp_path: Path
) -> None:
    output, errors = tmp_path / "stdout.log", tmp_path / "stderr.log"
    long = "".join(chr(ord("a") + n % 26) for n in range(700 * 1024))
    output.write_text("before\n" + long[:300_000])
    errors.write_text("an error\n")
    recorder = Recorder()
    shipper = Shipper(cast(ManagerClient, recorder),
                      {Source("output"): output, Source("output", "stderr"): errors})
    shipper.ship(final=False)
    sent = [line for _, _, lines, _ in recorder.batches for line in lines]
    assert "before" in sent and not any(isinstance(line, LinePart) for line in sent), \
        "nothing of a line still being written"
    with output.open("a") as handle:
        handle.write(long[300_000:] + "\nafter\nlast without newline")
    shipper.finish()
    stdout = [batch for batch in recorder.batches if batch[3] == "stdout"]
    assert [seq for _, seq, _, _ in stdout] == list(range(1, len(stdout) + 1))
    lines = [line for _, _, batch, _ in stdout for line in batch]
    parts = [line for line in lines if isinstance(line, LinePart)]
    assert [(part.part, part.parts) for part in parts] == [(n, 11) for n in range(1, 12)]
    assert "".join(part.text for part in parts) == long
    assert [line for line in lines if isinstance(line, str)] == [
        "before", "after", "last without newline"]
    assert lines.index("after") == lines.index(parts[-1]) + 1
    assert [(batch[0], batch[2], batch[3]) for batch in recorder.batches
            if batch[3] == "stderr"] == [("output", ["an error"], "stderr")]
