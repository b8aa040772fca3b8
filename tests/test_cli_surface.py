"""The CLI's surface, command by command: ``--raw`` on every command that prints, an example
in every command's help, a completion script, and error lines that name the request (its
URL and request id) and report an answer that is not JSON in one line."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cli import render
from cli.completion import command_words
from cli.main import build
from tests.test_cli import submit, svc

TREE = dict(command_words(build()))
LEAVES = sorted(path for path, words in TREE.items()
                if path and not any(f"{path} {word}" in TREE for word in words))
NOT_DATA = {"serve": "a server: a banner, then JSON log lines",
            "completion": "prints a shell script, which is its only form"}
"""Commands without ``--raw``, and why."""


def test_the_walk_finds_every_command() -> None:
    assert len(LEAVES) >= 30 and {"queue stats", "auth key list", "ledger anchor",
                                  "manifest schema", "completion"} <= set(LEAVES)


@pytest.mark.parametrize("path", [p for p in LEAVES if p not in NOT_DATA])
def test_every_command_that_prints_takes_the_shared_raw(path: str) -> None:
    command = build()
    for word in path.split():
        command = command[word]
    arguments = list(command.assemble_argument_collection())
    raw = [a for a in arguments if "--raw" in a.names]
    assert raw, f"svc {path} has no --raw"
    shared = [a for a in arguments if isinstance(a.hint, type)
              and issubclass(a.hint, render.RawOption)]
    assert shared, f"svc {path}: --raw is not the shared render.RawOption"


@pytest.mark.parametrize("path", LEAVES)
def test_every_command_help_has_an_example(path: str) -> None:
    result = svc(*path.split(), "--help")
    assert result.returncode == 0, result.stderr
    assert "Example" in result.stdout, f"svc {path} --help shows no example"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_svc(shell: str) -> None:
    result = svc("completion", shell)
    assert result.returncode == 0, result.stderr
    assert "svc" in result.stdout and "queue list" in result.stdout
    assert ("complete -c svc" if shell == "fish" else "complete -o default -F _svc") \
        in result.stdout


def _bash_completes(script: str, *words: str) -> list[str]:
    """What the bash script offers for the last of ``words`` (``svc`` first)."""
    quoted = " ".join(f"'{w}'" for w in words)
    probe = (f'{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n'
             '_svc_complete; printf "%s\\n" "${COMPREPLY[@]}"\n')
    done = subprocess.run(["bash", "--norc", "--noprofile"], input=probe, text=True,
                          capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completion_completes_commands_and_options() -> None:
    script = svc("completion", "bash").stdout
    assert _bash_completes(script, "svc", "qu") == ["queue"]
    assert _bash_completes(script, "svc", "queue", "st") == ["stats"]
    assert _bash_completes(script, "svc", "queue", "show", "tsk_1", "--wa") == ["--watch"]
    assert _bash_completes(script, "svc", "auth", "key", "") == ["create", "list", "revoke",
                                                                  "--help"]


async def test_queue_stats_and_local_commands_take_raw(served_api: str,
                                                       database_url: str) -> None:
    submit(served_api)
    stats = svc("queue", "stats", "--raw", api=served_api)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["total"] == 1
    env = {"SVC_DATABASE_URL": database_url}
    anchor = svc("ledger", "anchor", "--raw", env=env)
    assert anchor.returncode == 0, anchor.stderr
    head = json.loads(anchor.stdout)
    assert head["anchor"] == f"{head['changeSeq']}:{head['hash']}" and len(head["hash"]) == 64
    assert json.loads(svc("db", "migrate", "--raw", env=env).stdout) == {"applied": []}
    replay = svc("ledger", "replay", "--verify", "--raw", env=env)
    assert replay.returncode == 0 and json.loads(replay.stdout)["ok"] is True


def test_manifest_commands_take_raw(tmp_path: Path) -> None:
    schema = svc("manifest", "schema", "--raw")
    assert schema.returncode == 0 and len(schema.stdout.splitlines()) == 1
    assert json.loads(schema.stdout) == json.loads(svc("manifest", "schema").stdout)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    checked = svc("manifest", "validate", str(bad), "--raw")
    assert checked.returncode == 1
    found = json.loads(checked.stdout)
    assert found["file"] == str(bad) and found["valid"] is False and found["violations"]


async def test_a_refusal_names_the_url_and_the_request_id(served_api: str) -> None:
    result = svc("queue", "show", "tsk_nope", api=served_api)
    assert result.returncode == 1
    line, = result.stderr.strip().splitlines()
    assert line.startswith("error: not-found:"), line
    assert f"[GET {served_api}/api/v1/queue/tasks/tsk_nope; request id " in line
    request_id = line.rsplit("request id ", 1)[1].rstrip("]")
    assert request_id and request_id != "- (none sent)", line


class _Proxy502(BaseHTTPRequestHandler):
    """A server that is not svc: an HTML error page for every request."""

    def do_GET(self) -> None:
        page = ("<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n"
                + "<center><h1>502 Bad Gateway</h1></center>\n" * 20 + "</body></html>\n")
        body = page.encode()
        self.send_response(502)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _html_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy502)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("command", [("queue", "list"), ("queue", "stats", "--raw"),
                                     ("sessions", "show", "ses_x")])
def test_an_html_answer_is_reported_in_one_line(command: tuple[str, ...]) -> None:
    with _html_server() as api:
        result = svc(*command, api=api)
    assert result.returncode == 1
    assert result.stdout == ""
    line, = result.stderr.splitlines()
    assert line.startswith("error: http-502: the answer is not JSON (HTTP 502, text/html): "
                           "<html> <head><title>502 Bad Gateway</title>"), line
    assert f"[GET {api}/api/v1/" in line and "request id - (none sent)]" in line
    quoted = line.split("text/html): ", 1)[1].split(" [GET", 1)[0]
    assert len(quoted) <= 101 and quoted.endswith("…"), quoted
    assert "Traceback" not in result.stderr


async def test_session_lines_in_raw_form_are_one_json_object_a_line(served_api: str) -> None:
    sent = svc("sessions", "send", "--prompt", "lines: 5", api=served_api)
    assert sent.returncode == 0, sent.stderr
    session = sent.stdout.split("session=")[1].split()[0]
    followed = svc("sessions", "output", session, "--follow", "--raw", api=served_api)
    assert followed.returncode == 0, followed.stderr
    items = [json.loads(line) for line in followed.stdout.splitlines()]
    assert [item["line"] for item in items if item["line"].startswith("line ")] == \
        [f"line {n}" for n in range(1, 6)]
    assert [item["seq"] for item in items] == sorted({item["seq"] for item in items})
    every = svc("sessions", "output", session, "--all", "--raw", "--limit", "2",
                api=served_api)
    assert every.returncode == 0, every.stderr
    assert [json.loads(line) for line in every.stdout.splitlines()] == items
