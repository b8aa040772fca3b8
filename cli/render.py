"""All output of the CLI: low-noise summaries (default), ``--full`` and ``--raw``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

import msgspec

from api import wire
from cli.client import ApiResponse
from ledger.redaction import redact, redact_text
from projections.rows import JsonObject

if TYPE_CHECKING:
    from cli.options import OutputOptions as OutputOptions
    from cli.options import RawOption as RawOption


class Printing(Protocol):
    """What a command was asked to print: ``--raw`` JSON, ``--full`` every field, else the
    summary (:class:`cli.options.OutputOptions` as parsed, or :class:`Output`)."""

    @property
    def raw(self) -> bool: ...

    @property
    def full(self) -> bool: ...


@dataclass(frozen=True)
class Output:
    """A :class:`Printing` without cyclopts (the fast path's: :mod:`cli.fast`)."""

    raw: bool = False
    full: bool = False


def __getattr__(name: str) -> object:
    """``RawOption`` and ``OutputOptions``, the shared ``--raw``/``--full`` options, live in
    :mod:`cli.options` (cyclopts is imported only when something asks for them)."""
    if name in ("RawOption", "OutputOptions"):
        from cli import options

        return getattr(options, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def json_line(value: object) -> None:
    """Print one JSON value on one line (``--raw`` of a command that is not an API call)."""
    print(msgspec.json.encode(value).decode())


def out(line: str = "") -> None:
    """Print one line to standard output, redacted."""
    print(redact_text(line))


def error(code: str, message: str) -> None:
    """Print an error line to standard error, redacted."""
    print(f"error: {code}: {redact_text(message)}", file=sys.stderr)


def warn(message: str) -> None:
    """Print a warning line (something did not work; the command goes on) to standard
    error, redacted."""
    print(f"warning: {redact_text(message)}", file=sys.stderr)


SNIPPET_CHARS = 100
"""How much of an answer that is not JSON an error line quotes."""


def api_error(response: ApiResponse) -> int:
    """Report a failed API answer on one line (its detail problems appended), naming the
    request and its request id; an answer that is not JSON in brief (status, content type,
    its start on one line), never whole; exit 1."""
    where = (f" [{response.request or 'request'}; request id "
             f"{response.request_id or '- (none sent)'}]")
    if response.not_json:
        start = " ".join(response.text.split())
        snippet = start[:SNIPPET_CHARS] + ("…" if len(start) > SNIPPET_CHARS else "")
        error(f"http-{response.status}", f"the answer is not JSON (HTTP {response.status}, "
              f"{response.content_type or 'no content type'}): {snippet}{where}")
        return 1
    body = response.data if isinstance(response.data, dict) else {}
    problem = body.get("error") or {}
    message = str(problem.get("message", response.text[:200] or "no message"))
    problems = [f"{detail.get('key', '')}: {detail.get('message', '')}"
                for detail in (problem.get("details") or {}).get("problems", [])
                if isinstance(detail, dict)]
    if problems:
        message += f" ({'; '.join(problems)})"
    error(problem.get("code", f"http-{response.status}"), " ".join(message.split()) + where)
    return 1


def full(value: object, indent: int = 0) -> None:
    """Every field of a JSON value, one per line, nested by indentation."""
    pad = "  " * indent
    if isinstance(value, dict):
        for key, item in redact(value).items():
            if isinstance(item, dict | list) and item:
                out(f"{pad}{key}:")
                full(item, indent + 1)
            else:
                out(f"{pad}{key}: {_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict | list):
                out(f"{pad}-")
                full(item, indent + 1)
            else:
                out(f"{pad}- {_scalar(item)}")
    else:
        out(f"{pad}{_scalar(value)}")


def _scalar(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == {} or value == []:
        return "(none)"
    return str(value)


def iso(moment: datetime) -> str:
    """A timestamp as the API wrote it."""
    return msgspec.json.encode(moment).decode()[1:-1]


def task_line(task: wire.TaskItem) -> str:
    """One compact line for a task (its failure classification when it has one)."""
    profile = task.backend_profile or "-"
    attempt = task.latest_attempt
    kind = attempt.failure_kind if attempt is not None else None
    failure = f"  failure={kind}" if kind else ""
    return (f"{task.task_id}  {task.state:<9}  v{task.version:<3} "
            f"{task.queue}/{task.lane}  {profile}{failure}  {task.title[:60]}")


def supervisor_text(sup: wire.Supervisor) -> str:
    """Phase and last activity, and the timeout budget only when the queue has one."""
    budget = f" budget={sup.timeout_budget}" if sup.timeout_budget else ""
    return f"phase={sup.phase} last={sup.last_activity_id}@{sup.last_activity_seq}{budget}"


def next_text(sup: wire.Supervisor | None, session_command: str | None = None) -> str:
    """``next: …``: the recovery command, then the session command, where they apply."""
    steps = [sup.recovery] if sup and sup.recovery != "none" else []
    steps += [session_command] if session_command else []
    return f"  next: {' | '.join(steps)}" if steps else ""


def supervisor_line(sup: wire.Supervisor | None) -> str:
    """The compact supervisor: phase, last activity, budget (if any), recovery."""
    if not sup:
        return "  supervisor: -"
    return f"  supervisor: {supervisor_text(sup)}{next_text(sup)}"


def session_id_of(path: str | None) -> str | None:
    """The session id at the end of a ``sessionPath``."""
    return path.rsplit("/", 1)[-1] if path else None


SESSION_COMMAND = {"failed": "trace", "blocked": "trace"}
"""The ``svc sessions`` command that explains a task in a state (default: its output)."""


def session_command(state: str, session_id: str | None) -> str | None:
    """The one ``svc sessions …`` command that applies to a task's session, if it has one."""
    if not session_id:
        return None
    return f"svc sessions {SESSION_COMMAND.get(state, 'output')} {session_id}"


def next_session_commands(session_id: str | None) -> None:
    """The next ``svc sessions …`` commands for a session (SPEC 4.3 rule 8)."""
    if session_id:
        out(f"  next: svc sessions show {session_id} | svc sessions output {session_id}"
            f" | svc sessions trace {session_id}")


def task_summary(task: wire.TaskDetail) -> None:
    """The low-noise summary of one task (SPEC 4.3 rule 8)."""
    out(task_line(task))
    out(f"  summary: {task.summary}")
    out(f"  changeSeq: {task.change_seq}  updatedAt: {iso(task.updated_at)}")
    attempt = task.latest_attempt
    if attempt is not None:
        out(f"  attempt: {attempt.attempt_id} #{attempt.retry_index} {attempt.state}"
            f" failure={attempt.failure_kind or '-'} run={attempt.run_id}"
            f" session={attempt.session_id}")
        if attempt.usage is not None:
            out(f"  tokens: {tokens_text(attempt.usage)}")
    session = task.session_path
    out(f"  sessionPath: {session or '- (not dispatched)'}")
    out(supervisor_line(task.supervisor))
    ready = task.work_ready
    if ready:
        tools = ", ".join(f"{t['name']} {t.get('version') or '?'}" for t in ready["tools"])
        out(f"  workReady: svc {ready['version']}; {tools}; valuesPrinted=false")
    next_session_commands(session_id_of(session))


def marked_read(reader_id: str) -> Callable[[wire.TaskDetail], None]:
    """The answer of ``queue read``: that the cursor moved, then the task."""
    def render(task: wire.TaskDetail) -> None:
        out(f"marked read: {task.task_id} up to v{task.version} for reader {reader_id}")
        task_summary(task)
    return render


def attempt_summary(attempt: wire.Attempt) -> None:
    """The low-noise summary of one attempt."""
    out(f"{attempt.attempt_id}  #{attempt.retry_index}  {attempt.state:<9}"
        f" task={attempt.task_id} key={attempt.idempotency_key or '-'}")
    out(f"  run={attempt.run_id} command={attempt.command_id}"
        f" job={attempt.runner_job_id}")
    if attempt.failure_kind or attempt.failure_message:
        out(f"  failure: {attempt.failure_kind or '-'}:"
            f" {attempt.failure_message or ''}")
    if attempt.usage is not None:
        out(f"  tokens: {tokens_text(attempt.usage)}")
    out(f"  sessionPath: {attempt.session_path}")
    out(supervisor_line(attempt.supervisor))
    next_session_commands(attempt.session_id)


def tokens_text(usage: wire.TokenUsage) -> str:
    """Token counts on one short line."""
    return (f"in {usage.input_tokens} (cached {usage.cached_input_tokens})"
            f" out {usage.output_tokens} (reasoning {usage.reasoning_output_tokens})")


def _page_end(noun: str, count: int, change_seq: int, next_cursor: str | None) -> str:
    return (f"({count} {noun}; changeSeq {change_seq}"
            + (f"; next page: --cursor {next_cursor})" if next_cursor else ")"))


def attempt_list(data: wire.AttemptList) -> None:
    """The attempt history, oldest first: one line per attempt, with its session."""
    for attempt in data.items:
        duration = attempt.duration_ms
        out(f"#{attempt.retry_index}  {attempt.attempt_id}  {attempt.state:<9}"
            f" failure={attempt.failure_kind or '-'}"
            f" exit={attempt.exit_code if attempt.exit_code is not None else '-'}"
            f" duration={f'{duration} ms' if duration is not None else '-'}"
            f" {attempt.backend_profile} session={attempt.session_id}"
            f" key={attempt.idempotency_key or '-'}")
        if attempt.usage is not None:
            out(f"  tokens: {tokens_text(attempt.usage)}")
        for verdict in attempt.judge_runs:
            out(judge_line(verdict))
    out(_page_end("attempts", len(data.items), data.change_seq, data.next_cursor))
    if data.items:
        next_session_commands(data.items[-1].session_id)


def judge_line(verdict: wire.JudgeRun) -> str:
    """One line for a judge run (indented under its attempt)."""
    retry = "suggested" if verdict.retry_suggested else "no"
    return (f"  judge {verdict.judge_id}  {verdict.result}"
            f" failure={verdict.failure_kind or '-'} retry={retry} by={verdict.judge}")


def judge_run(verdict: wire.JudgeRun) -> None:
    """A recorded judge run: what it found, and that nothing was retried."""
    out(f"{verdict.judge_id}  {verdict.result}  task={verdict.task_id}"
        f" attempt={verdict.attempt_id} by={verdict.judge}")
    out(f"  failure={verdict.failure_kind or '-'}"
        f" retry={'suggested' if verdict.retry_suggested else 'no'}"
        + (f": {verdict.retry_reason}" if verdict.retry_reason else ""))
    if verdict.summary:
        out(f"  summary: {verdict.summary}")
    out(f"  recorded only; to retry: svc queue retry {verdict.task_id}"
        ' --idempotency-key <new-key> --reason "<why>"' if verdict.retry_suggested
        else "  recorded only")


def judge_runs_full(data: wire.AttemptList) -> None:
    """Every judge run of a page of attempts, every field (``show --full``)."""
    runs = [msgspec.to_builtins(v) for a in data.items for v in a.judge_runs]
    if runs:
        out("judgeRuns:")
        full(runs, 1)
    else:
        out("judgeRuns: (none)")


def task_list(data: wire.TaskList) -> None:
    """A list page: per task a line, then its session, supervisor and next commands."""
    for task in data.items:
        out(task_line(task))
        session = session_id_of(task.session_path)
        where = f"session={session} " if session else ""
        out(f"  {where}{supervisor_text(task.supervisor)}"
            f"{next_text(task.supervisor, session_command(task.state, session))}")
    out(_page_end("tasks", len(data.items), data.change_seq, data.next_cursor))
    out("next: svc sessions ps (running and unread sessions)")


def stats(data: wire.QueueStats) -> None:
    """Counts by state, lane and profile."""
    out(f"queue: {data.queue or '(all)'}  total: {data.total}"
        f"  changeSeq: {data.change_seq}")
    for title, counts in (("state", data.by_state), ("lane", data.by_lane),
                          ("profile", data.by_backend_profile)):
        text = "  ".join(f"{name}={count}" for name, count in sorted(counts.items()))
        out(f"  by {title}: {text or '(none)'}")
    for title, sums in (("queue", data.tokens_by_queue),
                        ("profile", data.tokens_by_backend_profile)):
        for name, usage in sorted(sums.items()):
            out(f"  tokens of {title} {name}: {tokens_text(usage)}")
    if data.truncated:
        out("  (counters truncated; narrow with --queue)")


def commander(data: wire.CommanderView) -> None:
    """The commander view: counts, then one line per task needing attention (its session id
    appears once, in the next ``svc sessions`` command)."""
    counts = "  ".join(f"{k}={v}" for k, v in sorted(data.by_state.items()))
    out(f"queue: {data.queue or '(all)'}  {counts or 'no tasks'}"
        f"  changeSeq: {data.change_seq}")
    for item in data.items:
        unread = {True: "unread", False: "read", None: ""}[item.unread]
        failure = f"  failure={item.failure_kind}" if item.failure_kind else ""
        command = session_command(item.state, session_id_of(item.session_path))
        out(f"{item.task_id}  {item.state:<9} {unread:<6} {item.queue}/{item.lane}"
            f"  {item.title[:50]}{failure}  {supervisor_text(item.supervisor)}"
            f"{next_text(item.supervisor, command)}")


def plan(data: wire.DryRun) -> None:
    """A dry-run plan."""
    body = data.plan
    out(f"dry run: {body['command']} (nothing changed)")
    out(f"  state: {body.get('stateBefore') or '-'} -> {body.get('stateAfter') or '-'}"
        f"  version: {body.get('versionBefore') or '-'} -> {body.get('versionAfter') or '-'}")
    out(f"  events: {', '.join(body.get('events') or []) or '(none: no-op)'}")
    for key in ("taskId", "queue", "lane", "payloadHash"):
        if body.get(key):
            out(f"  {key}: {body[key]}")
    job = body.get("runnerJob")
    if job:
        runner_job_plan(job)
    failure = body.get("assemblyFailure")
    if failure:
        out(f"  assembly would fail: {failure['failureKind']}: {failure['failureMessage']}")


def runner_job_plan(plan: JsonObject) -> None:
    """A runner job plan: names, keys, paths and hashes (it holds no value)."""
    image = plan["image"]
    out(f"  runner job: {plan['jobName']} ({plan['driver']}, namespace {plan['namespace']})")
    out(f"  image: {image.get('image') or '-'} [{image['status']}]"
        f" environment={image.get('environmentId') or '-'}")
    for use in plan["secrets"]:
        where = use.get("envName") or use.get("mountPath") or use["projection"]
        label = f"{use.get('tool')}/{use.get('purpose')}" if use.get("tool") else use["role"]
        out(f"  secret {use['name']} keys={','.join(use['keys'])} {label} -> {where}")
    transient = plan["transientEnv"]
    out(f"  env: {' '.join(e['name'] for e in plan['env'])}")
    out(f"  transientEnv: {transient['count']} ({', '.join(transient['names']) or '-'})"
        f" sha256={transient.get('sha256') or '-'}")
    volume = plan.get("sessionVolume")
    if volume:
        out(f"  session volume: {volume['pvcName']} {volume['size']} {volume['storageClass']}"
            f" subdir={volume['rolloutSubdir']}")
    bundle = plan.get("resourceBundle")
    if bundle:
        out(f"  bundle: {bundle['repoUrl']} ref={bundle.get('ref') or '-'}"
            f" commit={bundle.get('commitId') or '-'} skills={','.join(bundle['requiredSkills'])}")
    out(f"  valuesPrinted: {str(plan['valuesPrinted']).lower()}")


def runner_job(job: wire.RunnerJob) -> None:
    """A run's runner job: state, failure, plan and the assembly event in brief."""
    out(f"run {job.run_id}  job {job.runner_job_id}  {job.status}"
        f"  attempt {job.attempt_id} {job.attempt_state or '-'}"
        f"  failure={job.failure_kind or '-'}")
    if job.failure_message:
        out(f"  failureMessage: {job.failure_message}")
    if job.plan:
        runner_job_plan(job.plan)
    started = job.runner_startup
    if started:
        tools = ", ".join(f"{t['name']} {t.get('version') or '?'}" for t in started["tools"])
        out(f"  runner started: svc {started['version']}  tools: {tools or '-'}"
            f"  valuesPrinted: {str(started['valuesPrinted']).lower()}")
    event = job.assembly
    if event:
        repo = event.get("repository") or {}
        out(f"  assembled: commit={repo.get('materializedCommit') or '-'}"
            f" steps={','.join(event.get('steps', []))}")
        for prompt in event.get("promptRefs", []):
            out(f"  prompt {prompt['name']} {prompt['path']} bytes={prompt['bytes']}"
                f" injected={str(prompt['injected']).lower()}")
        out(f"  skills: {', '.join(s['name'] for s in event.get('skills', [])) or '-'}"
            f"  tools: {', '.join(t['name'] for t in event.get('tools', [])) or '-'}")
        if event.get("failure"):
            out(f"  assembly failure: {event['failure']['kind']}")
