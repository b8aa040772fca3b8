"""The fast path of the common reads (issue 28: ``svc queue list`` in 0.2 s): they load no
cyclopts, answer exactly as the cyclopts commands do, and leave every other command line
(help, errors, other spellings) to cyclopts."""

from __future__ import annotations

import re

import pytest

from cli import fast
from cli.completion import command_words
from cli.main import build, parsed
from tests.test_cli import submit
from tests.test_cli_startup import heavy_among, imported_modules

READS = [("queue", "list"), ("queue", "list", "--state", "pending", "--limit", "1"),
         ("queue", "show", "{task}"), ("queue", "stats", "--queue", "main"),
         ("queue", "commander", "--reader-id", "me"), ("queue", "attempts", "{task}")]


async def test_the_common_reads_load_no_cyclopts(served_api: str) -> None:
    task_id = submit(served_api)
    for args in READS:
        line = [word.format(task=task_id) for word in args]
        result, modules = imported_modules(*line, api=served_api)
        assert result.returncode == 0, result.stdout + result.stderr[-2000:]
        assert "cli.fast" in modules and "cli.http1" in modules, "the measure saw the call"
        assert not {m for m in modules if m.split(".")[0] in ("cyclopts", "attrs", "attr")}, \
            line
        assert heavy_among(modules) == set(), line
        assert "runner_assembly.assembly.fetch_policy" not in modules, line
    result, modules = imported_modules("queue", "list", "--help", api=served_api)
    assert result.returncode == 0 and "Usage: svc queue list" in result.stdout
    assert "cyclopts" in modules, "help is cyclopts' own"


def _normalized(text: str) -> str:
    """Output with each answer's request id left out (every request has its own)."""
    return re.sub(r"request id [^\]\s]+", "request id <id>", text)


async def test_the_fast_path_prints_what_cyclopts_prints(
        served_api: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    task_id = submit(served_api)
    lines = [*READS, ("queue", "list", "--queue=main", "--full"),
             ("queue", "list", "--updated-after", "0", "--raw", "--cursor", "x"),
             ("queue", "list", "--limit", "0"), ("queue", "show", "--raw", "{task}"),
             ("queue", "show", "{task}", "--full"), ("queue", "show", "tsk_missing"),
             ("queue", "stats", "--raw"), ("queue", "commander", "--limit", "5", "--full"),
             ("queue", "attempts", "{task}", "--cursor", "0", "--limit", "2", "--raw"),
             ("queue", "list", "--token", "not-a-key"),
             ("queue", "list", "--api", "127.0.0.1:9")]
    monkeypatch.setenv("SVC_API_URL", served_api)
    statuses = {}
    for args in lines:
        argv = [word.format(task=task_id) for word in args]
        assert fast.parse(argv) is not None, argv
        answers = []
        for run in (fast.attempt, parsed):
            status = run(argv)
            out, err = capsys.readouterr()
            answers.append((status, out, _normalized(err)))
        assert answers[0] == answers[1], argv
        assert answers[0][1] or answers[0][2], argv
        statuses[args[-1]] = answers[0][0]
    assert (statuses["{task}"], statuses["tsk_missing"], statuses["not-a-key"],
            statuses["127.0.0.1:9"]) == (0, 1, 1, 3)


@pytest.mark.parametrize("argv", [
    [], ["queue"], ["--version"], ["--help"], ["queue", "submit", "--json-stdin"],
    ["queue", "list", "--help"], ["queue", "list", "-h"], ["queue", "list", "--bogus"],
    ["queue", "list", "--state", "PENDING"], ["queue", "list", "--state", "late"],
    ["queue", "list", "--limit", "0x10"], ["queue", "list", "--limit", "-1"],
    ["queue", "list", "--limit", "2.5"], ["queue", "list", "--limit"],
    ["queue", "list", "--queue", "a", "--queue", "b"], ["queue", "list", "--queue="],
    ["queue", "list", "--raw=true"], ["queue", "list", "--no-raw"], ["queue", "list", "x"],
    ["queue", "list", "--data-dir", "d"], ["queue", "list", "--", "x"],
    ["queue", "show"], ["queue", "show", "a", "b"], ["queue", "show", "t", "--watch"],
    ["queue", "show", "-t"], ["queue", "show", "--task-id", "t"],
    ["queue", "attempts", "t", "--cursor", "c"], ["sessions", "ps"]])
def test_anything_else_is_left_to_cyclopts(argv: list[str]) -> None:
    assert fast.parse(argv) is None


def test_the_fast_path_takes_only_options_the_commands_declare() -> None:
    tree = dict(command_words(build()))
    for words, read in fast.READS.items():
        declared = set(tree[" ".join(words)])
        taken = {*read.options, *fast.ENDPOINT, *fast.FLAGS}
        assert taken <= declared, (words, taken - declared)

