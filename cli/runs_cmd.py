"""``svc runs …``: a run's runner job, its value-free plan and its assembly event."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import quote

from cyclopts import App, Parameter

from api import wire
from cli import render
from cli.client import call
from cli.options import ApiOptions
from cli.queue_cmd import EXIT_USAGE, post_json, read_json_input, respond

runs_app = App(name="runs", help="Show and plan the runner jobs of core runs.")
BodyStdin = Annotated[bool, Parameter(
    help='Read {"transientEnv": {...}} from standard input (values are never printed).')]
BodyFile = Annotated[Path | None, Parameter(help="Read the runner-job body from a file.")]


def _path(run_id: str) -> str:
    return f"/api/v1/runs/{quote(run_id, safe='')}/runner-job"


def _post(run_id: str, json_stdin: bool, json_file: Path | None, dry_run: bool,
          api: ApiOptions | None, output: render.OutputOptions | None) -> int:
    """POST the runner-job body (``{}`` unless given) to the run's runner-job resource."""
    body = read_json_input(json_stdin, json_file) if json_stdin or json_file else b"{}"
    if body is None:
        return EXIT_USAGE
    return post_json(_path(run_id), body, dry_run, api, output, wire.RunnerJob, render.runner_job)


@runs_app.command
def show(run_id: str, *, api: ApiOptions | None = None,
         output: render.OutputOptions | None = None) -> int:
    """The run's runner job: plan (secret names and keys, env names, mounts), status,
    failure and the assembly event (commit, prompts, skills, tools).

    Example: svc runs show run_…
    """
    return respond(lambda: call(api or ApiOptions(), "GET", _path(run_id)),
                   output or render.OutputOptions(),
                   wire.RunnerJob, render.runner_job)


@runs_app.command
def plan(run_id: str, *, json_stdin: BodyStdin = False, json_file: BodyFile = None,
         api: ApiOptions | None = None, output: render.OutputOptions | None = None) -> int:
    """Render the runner job of a run without creating anything (a dry run).

    Example: svc runs plan run_… --full
    """
    return _post(run_id, json_stdin, json_file, True, api, output)


@runs_app.command
def start(run_id: str, *, json_stdin: BodyStdin = False, json_file: BodyFile = None,
          api: ApiOptions | None = None, output: render.OutputOptions | None = None) -> int:
    """Create the runner job of a reserved run (adopts it if it already exists).

    Example: svc runs start run_…
    """
    return _post(run_id, json_stdin, json_file, False, api, output)
