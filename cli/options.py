"""The options every client command shares, as cyclopts parses them: ``--api``/``--token``
(:class:`ApiOptions`) and ``--raw``/``--full`` (:class:`RawOption`, :class:`OutputOptions`).

They live apart from :mod:`cli.client` and :mod:`cli.render` so that those import no
cyclopts: the fast path (:mod:`cli.fast`) answers the common reads without it.
:mod:`cli.render` still names the output options (``render.OutputOptions``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from cyclopts import Parameter

from cli.client import DEFAULT_API, DEFAULT_DATA_DIR, Endpoint


@Parameter(name="*")
@dataclass
class ApiOptions(Endpoint):
    """Where the API is."""

    api: Annotated[str, Parameter(env_var="SVC_API_URL",
                                  help="Base URL of the service API.")] = DEFAULT_API
    token: Annotated[str | None, Parameter(
        env_var="SVC_TOKEN", show_default=False,
        help="API key to send (prefer SVC_TOKEN: a command line is visible to other users); "
             "default: the key in ${SVC_DATA_DIR:-.svc}/admin.key when it exists.")] = None
    data_dir: Annotated[str, Parameter(env_var="SVC_DATA_DIR", show=False)] = DEFAULT_DATA_DIR


@Parameter(name="*")
@dataclass
class RawOption:
    """Print JSON instead of text: the one ``--raw`` of every command that prints."""

    raw: Annotated[bool, Parameter(
        help="Print JSON: the API's answer unchanged (a command that prints several "
             "things: one JSON object a line).")] = False


@Parameter(name="*")
@dataclass
class OutputOptions(RawOption):
    """How much to print."""

    full: Annotated[bool, Parameter(help="Show every field, human-readably.")] = False
