"""Low-noise rendering of sessions, turns and output pages."""

from __future__ import annotations

from typing import Any

from cli.render import out


def session_line(item: dict[str, Any]) -> str:
    """One compact line for a session."""
    unread = "unread" if item.get("unread") else "read"
    return (f"{item['sessionId']}  {item['state']:<9} {unread:<6} {item['backendProfile']}"
            f"  thread={item.get('threadId') or '-'}  turns={item['turns']}"
            f"  storage={item['storageKind']}")


def session_list(data: dict[str, Any]) -> None:
    """A page of sessions, then the cursor and the next commands."""
    for item in data["items"]:
        out(session_line(item))
    out(f"({len(data['items'])} sessions; changeSeq {data['changeSeq']}"
        + (f"; next page: --cursor {data['nextCursor']})" if data.get("nextCursor") else ")"))
    if data["items"]:
        first = data["items"][0]["sessionId"]
        out(f"next: svc sessions show {first} | svc sessions output {first}")


def session_detail(data: dict[str, Any]) -> None:
    """One session: identity, storage, recent turns, where its lines end."""
    out(session_line(data))
    out(f"  conversation={data['conversationId']}  latestRun={data.get('latestRunId') or '-'}"
        f"  task={data.get('latestTaskId') or '-'}  failure={data.get('failureKind') or '-'}")
    storage = data["storage"]
    out(f"  storage: {storage['storageKind']} pvc={storage.get('pvcName') or '-'}"
        f" phase={storage.get('pvcPhase') or '-'}"
        f" size={_value(storage.get('storageSizeBytes'))}"
        f" files={_value(storage.get('storageFilesCount'))}"
        f" expiresAt={storage['expiresAt']}")
    for turn in data.get("recentTurns", []):
        mode = "resume" if turn["resumed"] else "start"
        out(f"  turn {turn['commandId']} {turn['status']:<9} {mode} thread="
            f"{turn.get('threadId') or '-'} job={turn['runnerJobId']}"
            f" failure={turn.get('failureKind') or '-'}")
    out(f"  output: {data['outputLastSeq']} lines  trace: {data['traceLastSeq']} lines"
        f"  sessionPath: {data['sessionPath']}")
    sid = data["sessionId"]
    out(f"  next: svc sessions output {sid} | svc sessions send {sid} --prompt '…'"
        f" | svc sessions read {sid}")


def line_page(data: dict[str, Any]) -> None:
    """Lines as they were printed, then where to continue."""
    for item in data["items"]:
        out(item["line"])
    more = data["nextAfterSeq"] < data["lastSeq"]
    state = "more: " if more else ("running: " if data["running"] else "end: ")
    out(f"({state}svc sessions {data['channel']} {data['sessionId']}"
        f" --after-seq {data['nextAfterSeq']})")


def command_result(data: dict[str, Any]) -> None:
    """The turn a send started."""
    mode = "resumes" if data["resumed"] else "starts a new thread"
    thread = f" {data['threadId']}" if data.get("threadId") else ""
    out(f"{data['commandId']}  run={data['runId']} job={data['runnerJobId']}"
        f"  session={data['sessionId']} {mode}{thread}")
    out(f"  next: svc sessions output {data['sessionId']} | svc sessions show"
        f" {data['sessionId']}")


def _value(value: Any) -> str:
    return "-" if value is None else str(value)
