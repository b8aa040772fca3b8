"""The fast path of the common reads (``svc queue list|show|stats|commander|attempts``):
their command lines parsed here, without importing cyclopts, whose import and command tree
were most of a read's start-up (issue 28: ``svc queue list`` in 0.2 s).

It takes only what it reads exactly as cyclopts would: the options of :data:`READS` as
``--name value`` or ``--name=value``, ``--raw``, ``--full``, ``--api``, ``--token``, the
task id, and ``SVC_API_URL``/``SVC_TOKEN``/``SVC_DATA_DIR`` as cyclopts reads them (set,
even empty, means used). Anything else (help, an unknown, repeated or negated option, a
value cyclopts would convert or refuse, ``--watch``) is left to cyclopts, which answers as
it always did; the command's body is the same function either way (:mod:`cli.reads`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from cli import reads
from cli.client import Endpoint
from cli.render import Output
from ledger.states import TaskStatus

Convert = Callable[[str], object]
"""A value's conversion: the value cyclopts would bind, or None to leave it to cyclopts."""


def text(token: str) -> object:
    """A string option: any token but one cyclopts could read as an option (or empty)."""
    return token if token and not token.startswith("-") else None


def count(token: str) -> object:
    """An integer option: plain decimal digits only (what cyclopts reads the same way)."""
    return int(token) if token.isascii() and token.isdigit() and len(token) <= 15 else None


def task_state(token: str) -> object:
    """A :class:`TaskStatus` by its value exactly (other spellings: cyclopts)."""
    return token if token in {state.value for state in TaskStatus} else None


@dataclass(frozen=True)
class Read:
    """A read command the fast path takes: its body, options and positional (if any)."""

    run: Callable[..., int]
    options: dict[str, tuple[str, Convert]] = field(default_factory=dict)
    """``--name`` -> (keyword of :attr:`run`, conversion)."""
    positional: str | None = None
    """Keyword of :attr:`run` of the one positional argument (a task id)."""


QUEUE = ("queue", text)
LIMIT = ("limit", count)
READS = {
    ("queue", "list"): Read(reads.list_tasks, {
        "--queue": QUEUE, "--state": ("state", task_state), "--cursor": ("cursor", text),
        "--limit": LIMIT, "--updated-after": ("updated_after", count)}),
    ("queue", "show"): Read(reads.show_task, positional="task_id"),
    ("queue", "stats"): Read(reads.queue_stats, {"--queue": QUEUE}),
    ("queue", "commander"): Read(reads.commander, {
        "--queue": QUEUE, "--reader-id": ("reader_id", text), "--limit": LIMIT}),
    ("queue", "attempts"): Read(reads.attempts, {"--cursor": ("cursor", count),
                                                 "--limit": LIMIT}, positional="task_id"),
}
"""The command lines the fast path answers, by their two command words."""

ENDPOINT = {"--api": "api", "--token": "token"}
"""The :class:`Endpoint` options (``--data-dir``, hidden, is left to cyclopts)."""
SETTINGS = {"api": "SVC_API_URL", "token": "SVC_TOKEN", "data_dir": "SVC_DATA_DIR"}
"""Each :class:`Endpoint` field's variable, read when its option is not given."""
FLAGS = {"--raw": "raw", "--full": "full"}


def parse(argv: list[str]) -> Callable[[], int] | None:
    """The command ``argv`` names, ready to run, or None when cyclopts must parse it."""
    read = READS.get((argv[0], argv[1])) if len(argv) >= 2 else None
    if read is None:
        return None
    given: dict[str, object] = {}
    positionals: list[str] = []
    words = iter(argv[2:])
    convert: Convert
    for word in words:
        if not word.startswith("-"):
            positionals.append(word)
            continue
        name, equals, value = word.partition("=")
        if name in FLAGS and not equals:
            key, convert = FLAGS[name], _flag
        elif name in read.options or name in ENDPOINT:
            key, convert = read.options.get(name) or (ENDPOINT[name], text)
            value = value if equals else next(words, "")
        else:
            return None
        converted = convert(value)
        if converted is None or key in given:
            return None
        given[key] = converted
    if len(positionals) != (1 if read.positional else 0) or (
            positionals and text(positionals[0]) is None):
        return None
    return _bound(read, given, positionals)


def _flag(_: str) -> object:
    return True


def _bound(read: Read, given: dict[str, object], positionals: list[str]) -> Callable[[], int]:
    """``read`` with the parsed values (and the settings cyclopts would have read)."""
    where = {key: str(given.pop(key)) if key in given else os.environ[variable]
             for key, variable in SETTINGS.items() if key in given or variable in os.environ}
    endpoint = Endpoint(**where)
    output = Output(raw=bool(given.pop("raw", False)), full=bool(given.pop("full", False)))
    keywords = {**given, **({read.positional: positionals[0]} if read.positional else {})}
    return lambda: read.run(endpoint, output, **keywords)


def attempt(argv: list[str]) -> int | None:
    """Run ``argv`` on the fast path and return its exit status, or None when it is not one
    the fast path takes (nothing was done: cyclopts must parse it)."""
    command = parse(argv)
    return None if command is None else command()
