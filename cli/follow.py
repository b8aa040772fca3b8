"""Follow mode: poll a session's lines by ``afterSeq`` until its turn ends, printing each line
once, across outages and server restarts (the position is the client's, not a connection's)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from api import session_wire as sw
from cli import render
from cli.client import ApiOptions, ApiResponse, ApiUnreachable, call
from cli.session_render import line_page, line_text

PAUSE_S = (0.2, 2.0)
"""The first and the longest pause between two polls that found nothing new."""
EXIT_INTERRUPTED = 130


@dataclass
class Pace:
    """An adaptive poll interval: short while lines arrive, doubling while nothing does."""

    pause: float = PAUSE_S[0]
    sleep: Callable[[float], None] = time.sleep

    def busy(self) -> None:
        """Something new arrived: poll again soon."""
        self.pause = PAUSE_S[0]

    def idle(self) -> None:
        """Nothing new: wait, then wait longer next time."""
        self.sleep(self.pause)
        self.pause = min(self.pause * 2, PAUSE_S[1])


def follow_lines(options: ApiOptions, channel: str, path: str, after_seq: int,
                 limit: int | None) -> int:
    """Print the channel's lines after ``after_seq`` as they come until the session no longer
    runs; an unreachable API or a 5xx is waited out (said once on stderr); Ctrl-C ends it."""
    pace, lost = Pace(), False
    try:
        while True:
            response = _poll(options, path, after_seq, limit)
            if response is None or response.status >= 500:
                if not lost:
                    render.warn(f"the API at {options.api} does not answer; still following "
                                f"from --after-seq {after_seq}")
                lost = True
                pace.idle()
                continue
            lost = False
            if not response.ok:
                return render.api_error(response)
            page = response.decoded(sw.LinePage)
            for item in page.items:
                render.out(line_text(channel, item))
            sys.stdout.flush()  # a pipe or a file reads each line as it comes
            after_seq = max(after_seq, page.next_after_seq)
            if page.items:
                pace.busy()
            elif not page.running:
                line_page(page)
                return 0
            else:
                pace.idle()
    except KeyboardInterrupt:
        render.warn(f"stopped; continue with --after-seq {after_seq}")
        return EXIT_INTERRUPTED


def _poll(options: ApiOptions, path: str, after_seq: int,
          limit: int | None) -> ApiResponse | None:
    try:
        return call(options, "GET", path, params={"afterSeq": after_seq, "limit": limit})
    except ApiUnreachable:
        return None
