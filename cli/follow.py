"""Follow mode: one poll loop for everything the CLI follows (a session's lines by
``afterSeq``, a task by ``changeSeq``), printing each new thing once, across outages and
server restarts (the position is the client's, not a connection's), until it ends."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from api import session_wire as sw
from api import wire
from cli import render
from cli.client import ApiResponse, ApiUnreachable, call
from cli.options import ApiOptions
from cli.session_render import line_page, line_text

PAUSE_S = (0.2, 2.0)
"""The first and the longest pause between two polls that found nothing new."""
EXIT_INTERRUPTED = 130
TASK_ENDS = frozenset({"completed", "cancelled", "failed", "blocked"})
"""The task states a watch ends at: nothing changes them any more without a person (a
retry, a cancel) or a judge, so waiting on would wait for someone else."""


@dataclass
class Pace:
    """An adaptive poll interval: short while things arrive, doubling while nothing does."""

    pause: float = PAUSE_S[0]
    sleep: Callable[[float], None] = time.sleep

    def busy(self) -> None:
        """Something new arrived: poll again soon."""
        self.pause = PAUSE_S[0]

    def idle(self) -> None:
        """Nothing new: wait, then wait longer next time."""
        self.sleep(self.pause)
        self.pause = min(self.pause * 2, PAUSE_S[1])


class Seen(Enum):
    """What one answer brought."""

    NEW = "new"
    NOTHING = "nothing"
    END = "end"


class Feed(Protocol):
    """Something followed: how to ask for what is new, print it, and say where it is."""

    def poll(self) -> ApiResponse:
        """Ask the API for what follows the current position (may raise ApiUnreachable)."""
        ...

    def take(self, response: ApiResponse) -> Seen:
        """Print what is new in a 2xx answer, move the position past it, say what it was."""
        ...

    def position(self) -> str:
        """The current position, as the user would resume from it."""
        ...


def follow(options: ApiOptions, feed: Feed) -> int:
    """Poll ``feed`` until it ends (exit 0) or the API refuses (exit 1); an unreachable API
    or a 5xx is waited out, said once on stderr; Ctrl-C ends it with exit 130."""
    pace, lost = Pace(), False
    try:
        while True:
            response = _answer(feed)
            if response is None or response.status >= 500:
                if not lost:
                    render.warn(f"the API at {options.api} does not answer; still following "
                                f"from {feed.position()}")
                lost = True
                pace.idle()
                continue
            lost = False
            if not response.ok:
                return render.api_error(response)
            seen = feed.take(response)
            sys.stdout.flush()  # a pipe or a file reads each line as it comes
            if seen is Seen.END:
                return 0
            if seen is Seen.NEW:
                pace.busy()
            else:
                pace.idle()
    except KeyboardInterrupt:
        render.warn(f"stopped; continue from {feed.position()}")
        return EXIT_INTERRUPTED


def _answer(feed: Feed) -> ApiResponse | None:
    try:
        return feed.poll()
    except ApiUnreachable:
        return None


@dataclass
class Lines:
    """A session channel's lines after ``after_seq``, until the session no longer runs."""

    options: ApiOptions
    channel: str
    path: str
    after_seq: int
    limit: int | None
    raw: bool = False

    def poll(self) -> ApiResponse:
        return call(self.options, "GET", self.path,
                    params={"afterSeq": self.after_seq, "limit": self.limit})

    def take(self, response: ApiResponse) -> Seen:
        page = response.decoded(sw.LinePage)
        self.show(page)
        self.after_seq = max(self.after_seq, page.next_after_seq)
        if page.items:
            return Seen.NEW
        if page.running:
            return Seen.NOTHING
        if not self.raw:
            line_page(page)
        return Seen.END

    def position(self) -> str:
        return f"--after-seq {self.after_seq}"

    def show(self, page: sw.LinePage) -> None:
        """Print a page's lines: as text, or (``--raw``) one JSON object a line."""
        for item in page.items:
            if self.raw:
                render.json_line(item)
            else:
                render.out(line_text(self.channel, item))


@dataclass
class Task:
    """One task: each version it reaches (a higher ``changeSeq``), until a state of
    :data:`TASK_ENDS`. Versions reached between two polls show as the latest of them."""

    options: ApiOptions
    path: str
    output: render.OutputOptions
    change_seq: int = 0

    def poll(self) -> ApiResponse:
        return call(self.options, "GET", self.path)

    def take(self, response: ApiResponse) -> Seen:
        task = response.decoded(wire.TaskDetail)
        new = task.change_seq > self.change_seq
        if new:
            self.change_seq = task.change_seq
            if self.output.raw:
                print(response.text.strip())
            elif self.output.full:
                render.full(response.data)
            else:
                render.out(f"{render.iso(task.updated_at)}  changeSeq {task.change_seq}  "
                           f"{render.task_line(task)}")
        if task.state in TASK_ENDS:
            if not self.output.raw:
                render.out(f"(end: {task.task_id} is {task.state}; "
                           f"svc queue show {task.task_id} for the details)")
            return Seen.END
        return Seen.NEW if new else Seen.NOTHING

    def position(self) -> str:
        return f"changeSeq {self.change_seq}"
