"""``svc sessions …``: sessions, their output and trace, sending prompts, cancel, read."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import quote

import msgspec
from cyclopts import App, Parameter

from api import session_wire as sw
from api.wire import Prompt
from cli import follow as following
from cli import render, session_render
from cli.client import ApiResponse, ApiUnreachable, call
from cli.options import ApiOptions
from cli.queue_cmd import EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE, read_json_input, respond
from ledger.states import SessionFilter

sessions_app = App(name="sessions", help="Sessions: output, trace, prompts and control.\n\n"
                   "A task's sessionPath names its session; `svc sessions ps` lists the "
                   "running and unread ones.")

ProfileName = Literal["profile-1", "profile-2", "profile-3", "profile-4", "M3"]
PROFILE_ALIASES = {"M3": "profile-3"}
Reader = Annotated[str, Parameter(env_var="SVC_READER_ID",
                                  help="Whose read cursor (unread marks) to use.")]
AfterSeq = Annotated[int, Parameter(help="Only lines after this seq (from a previous page).")]
Limit = Annotated[int | None, Parameter(help="Lines per page (default 200, at most 1000).")]
All = Annotated[bool, Parameter(help="Page until the last line instead of one page.")]
Follow = Annotated[bool, Parameter(
    name=["--follow", "-f"],
    help="Keep printing new lines as they come until the session's turn ends (a poll by "
         "--after-seq: no line missed or repeated, across server restarts; Ctrl-C stops).")]


def _path(session_id: str, action: str = "") -> str:
    return f"/api/v1/sessions/{quote(session_id, safe='')}" + (f"/{action}" if action else "")


def _profile(profile: ProfileName | None) -> str | None:
    return PROFILE_ALIASES.get(profile, profile) if profile else None


@sessions_app.command
def ps(*, state: Annotated[SessionFilter, Parameter(
        help="running, unread (by --reader-id), terminal, idle or all; default: running "
             "and unread.")] = SessionFilter.DEFAULT,
       profile: ProfileName | None = None,
       reader_id: Reader = "cli",
       cursor: Annotated[str | None, Parameter(help="Continue from a previous page.")] = None,
       limit: Annotated[int | None, Parameter(help="Page size (default 50, at most 500).")]
       = None,
       api: ApiOptions | None = None, output: render.OutputOptions | None = None) -> int:
    """List sessions; by default the running ones and those unread by --reader-id.

    --profile M3 is an alias of profile-3.

    Example: svc sessions ps --state all --profile M3
    """
    params = {"state": state, "backendProfile": _profile(profile), "readerId": reader_id,
              "cursor": cursor, "limit": limit}
    return respond(lambda: call(api or ApiOptions(), "GET", "/api/v1/sessions", params=params),
                   output or render.OutputOptions(),
                   sw.SessionList, session_render.session_list)


@sessions_app.command
def show(session_id: str, *, reader_id: Reader = "cli", api: ApiOptions | None = None,
         output: render.OutputOptions | None = None) -> int:
    """One session: thread, state, storage summary, recent turns, line counts.

    Example: svc sessions show ses_…
    """
    return respond(lambda: call(api or ApiOptions(), "GET", _path(session_id),
                                params={"readerId": reader_id}),
                   output or render.OutputOptions(),
                   sw.SessionDetail, session_render.session_detail)


def _lines(channel: str, session_id: str, after_seq: int, limit: int | None, every: bool,
           api: ApiOptions | None, output: render.OutputOptions | None,
           follow: bool = False) -> int:
    options = api or ApiOptions()
    lines = following.Lines(options, channel, _path(session_id, channel), after_seq, limit,
                            bool(output and output.raw))
    if follow:
        return following.follow(options, lines)
    if not every:
        return respond(lambda: call(options, "GET", _path(session_id, channel),
                                    params={"afterSeq": after_seq, "limit": limit}),
                       output or render.OutputOptions(),
                       sw.LinePage, session_render.line_page)
    while True:
        try:
            response = lines.poll()
        except ApiUnreachable as error:
            render.error("infra-failed", str(error))
            return EXIT_UNREACHABLE
        if not response.ok:
            return render.api_error(response)
        page = response.decoded(sw.LinePage)
        lines.show(page)
        if not page.items or page.next_after_seq >= page.last_seq:
            if not lines.raw:
                session_render.line_page(msgspec.structs.replace(page, items=[]))
            return 0
        lines.after_seq = page.next_after_seq


def _channel_command(channel: Literal["output", "trace"], doc: str) -> None:
    """Register ``sessions <channel>``: the lines of that channel, one page or all."""

    def command(session_id: str, *, after_seq: AfterSeq = 0, limit: Limit = None,
                all_pages: Annotated[bool, Parameter(name="--all",
                                                     help=All.__metadata__[0].help)] = False,
                follow: Follow = False,
                api: ApiOptions | None = None, render_options: Annotated[
                    render.OutputOptions | None, Parameter(name="*")] = None) -> int:
        return _lines(channel, session_id, after_seq, limit, all_pages, api, render_options,
                      follow)

    command.__doc__ = doc
    sessions_app.command(command, name=channel)


_channel_command("output", "What the session's backend printed, from --after-seq on (redacted)."
                 "\n\nExample: svc sessions output ses_… --follow")
_channel_command("trace", "The runner's events (assembly, thread start/resume, exit), from "
                 "--after-seq on.\n\nExample: svc sessions trace ses_… --all")


@sessions_app.command
def read(session_id: str, *, reader_id: Reader = "cli", api: ApiOptions | None = None,
         output: render.OutputOptions | None = None) -> int:
    """Mark the session read for --reader-id (it leaves the default `ps` until it changes).

    Example: svc sessions read ses_… --reader-id me
    """
    body = json.dumps({"readerId": reader_id}).encode()
    return respond(lambda: call(api or ApiOptions(), "POST", _path(session_id, "read"),
                                body=body),
                   output or render.OutputOptions(),
                   sw.SessionDetail, session_render.marked_read)


@sessions_app.command
def cancel(session_id: str, *,
           reason: Annotated[str | None, Parameter(help="Why (stored, redacted).")] = None,
           api: ApiOptions | None = None, output: render.OutputOptions | None = None) -> int:
    """Cancel the session's running turn (stops its runner job).

    Example: svc sessions cancel ses_… --reason "wrong prompt"
    """
    body = json.dumps({"action": "cancel", "reason": reason} if reason
                      else {"action": "cancel"}).encode()
    return respond(lambda: call(api or ApiOptions(), "POST", _path(session_id, "control"),
                                body=body),
                   output or render.OutputOptions(),
                   sw.SessionDetail, session_render.session_detail)


def _prompt(prompt_stdin: bool, prompt_file: Path | None, prompt: str | None) -> str | None:
    given = [x for x in (prompt_stdin or None, prompt_file, prompt) if x is not None]
    if len(given) != 1:
        render.error("invalid-request", "give the prompt with exactly one of --prompt-stdin, "
                     "--prompt-file or --prompt")
        return None
    if prompt_stdin:
        return sys.stdin.read()
    if prompt_file is not None:
        try:
            return prompt_file.read_text()
        except (OSError, UnicodeDecodeError) as error:
            render.error("invalid-request", f"cannot read {prompt_file}: {error}")
            return None
    return prompt


def _checked(response: ApiResponse) -> sw.SessionDetail | int:
    return response.decoded(sw.SessionDetail) if response.ok else render.api_error(response)


@sessions_app.command
def send(
    session_id: str | None = None, *,
    json_stdin: Annotated[bool, Parameter(
        help="Read JSON from standard input: with SESSION_ID the command payload "
             '(e.g. {"prompt": "…", "threadId": "thr_…"}), without it the run base of the '
             "new session.")] = False,
    json_file: Annotated[Path | None, Parameter(
        help="Read that JSON (command payload or run base) from a file.")] = None,
    prompt_stdin: Annotated[bool, Parameter(help="Read the prompt from standard input.")]
    = False,
    prompt_file: Annotated[Path | None, Parameter(help="Read the prompt from a file.")] = None,
    prompt: Annotated[str | None, Parameter(help="The prompt text.")] = None,
    profile: Annotated[ProfileName | None, Parameter(
        help="Backend profile of a new session (M3 = profile-3); an existing session's "
             "profile never changes.")] = None,
    api: ApiOptions | None = None, output: render.OutputOptions | None = None,
) -> int:
    """Send a prompt as a new turn. With SESSION_ID it resumes the session's thread; without
    one it creates a session (and its volume) from the run base, then starts its first turn.

    Example: echo 'fix the failing test' | svc sessions send ses_… --prompt-stdin

    With SESSION_ID, --json-stdin or --json-file gives the command payload
    (prompt, threadId) as the API takes it; the prompt comes from it or from one
    prompt option.
    """
    if json_stdin and prompt_stdin:
        render.error("invalid-request", "standard input can carry the JSON or the prompt, "
                     "not both; use --json-file or --prompt-file for one of them")
        return EXIT_USAGE
    options = api or ApiOptions()
    wanted = _profile(profile)
    try:
        if session_id is not None and (json_stdin or json_file is not None):
            payload = _payload_json(json_stdin, json_file, prompt_stdin, prompt_file, prompt)
            if isinstance(payload, int):
                return payload
            session = _checked(call(options, "GET", _path(session_id)))
        else:
            text = _checked_prompt(prompt_stdin, prompt_file, prompt)
            if text is None:
                return EXIT_USAGE
            payload = json.dumps({"prompt": text}).encode()
            session = (_new_session(options, json_stdin, json_file, wanted)
                       if session_id is None else _checked(call(options, "GET",
                                                                _path(session_id))))
        if isinstance(session, int):
            return session
        if wanted and wanted != session.backend_profile:
            render.error("invalid-transition", f"session {session.session_id} belongs to "
                         f"{session.backend_profile}; a profile switch never reuses another "
                         "profile's session (send without SESSION_ID to start a new one)")
            return EXIT_USAGE
        run_id = str(session.latest_run_id or session.run_id)
        command = b'{"payload":' + payload + b"}"
        return respond(lambda: call(options, "POST",
                                    f"/api/v1/runs/{quote(run_id, safe='')}/commands",
                                    body=command),
                       output or render.OutputOptions(),
                       sw.CommandResult, session_render.command_result)
    except ApiUnreachable as error:
        render.error("infra-failed", str(error))
        return EXIT_UNREACHABLE


def _checked_prompt(prompt_stdin: bool, prompt_file: Path | None,
                    prompt: str | None) -> str | None:
    """The prompt of exactly one prompt option, checked before anything is created (a
    refused prompt must leave no orphan session)."""
    text = _prompt(prompt_stdin, prompt_file, prompt)
    if text is None:
        return None
    try:
        msgspec.convert(text, Prompt)
    except msgspec.ValidationError:
        render.error("invalid-request", "the prompt must be 1 to 65536 characters long")
        return None
    return text


def _payload_json(json_stdin: bool, json_file: Path | None, prompt_stdin: bool,
                  prompt_file: Path | None, prompt: str | None) -> bytes | int:
    """The command payload as the caller wrote it (sent unchanged; the API validates it),
    with the prompt of a prompt option added when one is given; or an exit status."""
    raw = read_json_input(json_stdin, json_file)
    if raw is None:
        return EXIT_USAGE
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        render.error("invalid-request", "the command payload is not valid JSON")
        return EXIT_REFUSED
    if not (prompt_stdin or prompt_file is not None or prompt is not None):
        return raw.strip()
    if not isinstance(value, dict) or "prompt" in value:
        render.error("invalid-request", "give the prompt in the JSON payload or with a prompt "
                     "option, not both (the payload must be a JSON object)")
        return EXIT_USAGE
    text = _checked_prompt(prompt_stdin, prompt_file, prompt)
    if text is None:
        return EXIT_USAGE
    return msgspec.json.encode({**value, "prompt": text})


def _new_session(options: ApiOptions, json_stdin: bool, json_file: Path | None,
                 wanted: str | None) -> sw.SessionDetail | int:
    """Create a session from the run base (standard input, a file, or none)."""
    base = read_json_input(json_stdin, json_file) if json_stdin or json_file else b"{}"
    if base is None:
        return EXIT_USAGE
    try:
        run_base = json.loads(base)
    except (json.JSONDecodeError, UnicodeDecodeError):
        render.error("invalid-request", "the run base is not valid JSON")
        return EXIT_USAGE
    body = {"runBase": run_base, **({"backendProfile": wanted} if wanted else {})}
    return _checked(call(options, "POST", "/api/v1/sessions", body=json.dumps(body).encode()))
