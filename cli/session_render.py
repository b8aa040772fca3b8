"""Low-noise rendering of sessions, turns and output pages."""

from __future__ import annotations

import json

from api import session_wire as sw
from cli.render import iso, out
from ledger.states import StorageKind


def session_line(item: sw.SessionItem) -> str:
    """One compact line for a session."""
    unread = "unread" if item.unread else "read"
    return (f"{item.session_id}  {item.state:<9} {unread:<6} {item.backend_profile}"
            f"  thread={item.thread_id or '-'}  turns={item.turns}"
            f"  storage={item.storage_kind}")


def session_list(data: sw.SessionList) -> None:
    """A page of sessions, then the cursor and the next commands."""
    for item in data.items:
        out(session_line(item))
    out(f"({len(data.items)} sessions; changeSeq {data.change_seq}"
        + (f"; next page: --cursor {data.next_cursor})" if data.next_cursor else ")"))
    if data.items:
        first = data.items[0].session_id
        out(f"next: svc sessions show {first} | svc sessions output {first}")


def session_detail(data: sw.SessionDetail) -> None:
    """One session: identity, storage, recent turns, where its lines end."""
    out(session_line(data))
    out(f"  conversation={data.conversation_id}  latestRun={data.latest_run_id or '-'}"
        f"  task={data.latest_task_id or '-'}  failure={data.failure_kind or '-'}")
    storage = data.storage
    out(f"  storage: {storage.storage_kind} pvc={storage.pvc_name or '-'}"
        f" phase={storage.pvc_phase or '-'}"
        f" size={_value(storage.storage_size_bytes)}"
        f" files={_value(storage.storage_files_count)}"
        f" expiresAt={iso(storage.expires_at)}")
    for turn in data.recent_turns:
        mode = "resume" if turn.resumed else "start"
        out(f"  turn {turn.command_id} {turn.status:<9} {mode} thread="
            f"{turn.thread_id or '-'} job={turn.runner_job_id}"
            f" failure={turn.failure_kind or '-'}")
    out(f"  output: {data.output_last_seq} lines  trace: {data.trace_last_seq} lines"
        f"  sessionPath: {data.session_path}")
    sid = data.session_id
    if data.storage_kind == StorageKind.EVICTED:  # a command would be session-store-evicted
        out(f"  next: svc sessions output {sid} | svc sessions read {sid}"
            "  (volume evicted: svc sessions send without SESSION_ID starts a new session)")
    else:
        out(f"  next: svc sessions output {sid} | svc sessions send {sid} --prompt '…'"
            f" | svc sessions read {sid}")


def marked_read(data: sw.SessionDetail) -> None:
    """The answer of ``sessions read``: that the cursor moved, then the session."""
    out(f"marked read: {data.session_id} up to v{data.version} for reader {data.reader_id}")
    session_detail(data)


def line_text(channel: str, item: sw.LineItem) -> str:
    """An output line as printed (a line of the backend's standard error behind
    ``stderr| ``, a part of a line longer than 64 KiB behind ``[part i/n] ``); a trace line
    (a runner event in JSON) made readable: ``seq  time  kind  name=value …``."""
    if channel != "trace":
        part = f"[part {item.part}/{item.parts}] " if item.part is not None else ""
        return ("stderr| " if item.stream == "stderr" else "") + part + item.line
    try:
        event = json.loads(item.line)
    except ValueError:
        return item.line
    if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
        return item.line
    at = event.pop("at", None)
    kind = event.pop("kind")
    moment = at[11:23] if isinstance(at, str) and len(at) >= 23 else iso(item.recorded_at)
    fields = " ".join(f"{name}={_field(value)}" for name, value in sorted(event.items()))
    return f"{item.seq:>4}  {moment}  {kind}" + (f"  {fields}" if fields else "")


def _field(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_field(v) for v in value) or "(none)"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def line_page(data: sw.LinePage) -> None:
    """Lines as they were printed (trace lines made readable), then where to continue."""
    for item in data.items:
        out(line_text(data.channel, item))
    more = data.next_after_seq < data.last_seq
    state = "more: " if more else ("running: " if data.running else "end: ")
    out(f"({state}svc sessions {data.channel} {data.session_id}"
        f" --after-seq {data.next_after_seq})")


def command_result(data: sw.CommandResult) -> None:
    """The turn a send started."""
    mode = "resumes" if data.resumed else "starts a new thread"
    thread = f" {data.thread_id}" if data.thread_id else ""
    out(f"{data.command_id}  run={data.run_id} job={data.runner_job_id}"
        f"  session={data.session_id} {mode}{thread}")
    out(f"  next: svc sessions output {data.session_id} | svc sessions show"
        f" {data.session_id}")


def _value(value: int | None) -> str:
    return "-" if value is None else str(value)
