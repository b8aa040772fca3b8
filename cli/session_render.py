"""Low-noise rendering of sessions, turns and output pages."""

from __future__ import annotations

from api import session_wire as sw
from cli.render import iso, out


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
    out(f"  next: svc sessions output {sid} | svc sessions send {sid} --prompt '…'"
        f" | svc sessions read {sid}")


def line_page(data: sw.LinePage) -> None:
    """Lines as they were printed, then where to continue."""
    for item in data.items:
        out(item.line)
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
