"""``svc auth key create|list|revoke``: API keys (admins only). A new key is printed once,
alone on the first line of standard output; lists never show a key, only its prefix."""

from __future__ import annotations

import json
import re
from typing import Annotated, Literal
from urllib.parse import quote

from cyclopts import App, Parameter

from api import auth_wire as aw
from cli import render
from cli.client import call
from cli.options import ApiOptions
from cli.queue_cmd import EXIT_USAGE, respond

auth_app = App(name="auth", help="Who may call the API: API keys.")
key_app = App(name="key", help="Create, list and revoke API keys (admins only).")
auth_app.command(key_app)
KEYS = "/api/v1/auth/keys"
RoleName = Literal["reader", "submitter", "operator", "judge", "admin"]
_DURATION = re.compile(r"^(\d{1,9})([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> int | None:
    """Seconds of a duration such as ``3600``, ``90m``, ``12h`` or ``30d`` (None: invalid)."""
    match = _DURATION.match(text.strip())
    return None if match is None else int(match[1]) * _UNIT_S[match[2]]


def _created(key: aw.KeyCreated) -> None:
    print(key.key)  # the one place a key is printed: alone, first line, not redacted
    render.out(f"{key.key_id}  tenant {key.tenant}  roles {','.join(key.roles)}"
               f"{'  projects ' + ','.join(key.projects) if key.projects else ''}"
               f"  expires {render.iso(key.expires_at) if key.expires_at else 'never'}")
    render.out("shown once: store it now (the service keeps only its hash)")


def _line(key: aw.KeyView) -> str:
    state = f"revoked {render.iso(key.revoked_at)}" if key.revoked_at else "active"
    expiry = render.iso(key.expires_at) if key.expires_at else "never"
    projects = ",".join(key.projects) or "*"
    return (f"{key.key_id}  {key.prefix}…  tenant {key.tenant}  roles {','.join(key.roles)}"
            f"  projects {projects}  expires {expiry}  {state}")


def _listed(keys: aw.KeyList) -> None:
    for key in keys.items:
        render.out(_line(key))
    render.out(f"({len(keys.items)} keys)")


@key_app.command
def create(*, tenant: Annotated[str, Parameter(help="The key's tenant, or * for every "
                                               "tenant.")],
           role: Annotated[list[RoleName], Parameter(
               help="A role of the key (repeat for several).", negative=())],
           project: Annotated[list[str] | None, Parameter(
               help="Limit the key to this project (repeat for several).", negative=())] = None,
           expires_in: Annotated[str | None, Parameter(
               help="Lifetime: seconds, or a number with s, m, h or d (e.g. 30d).")] = None,
           api: ApiOptions | None = None,
           output: render.OutputOptions | None = None) -> int:
    """Create an API key and print it alone on the first line (it is shown only once).

    Example: svc auth key create --tenant acme --role submitter --expires-in 30d
    """
    body: dict[str, object] = {"tenant": tenant, "roles": list(role),
                               "projects": list(project or [])}
    if expires_in is not None:
        seconds = duration_s(expires_in)
        if seconds is None:
            render.error("invalid-request", "--expires-in takes seconds, or a number with s, "
                         "m, h or d (e.g. 30d)")
            return EXIT_USAGE
        body["expiresInSeconds"] = seconds
    return respond(lambda: call(api or ApiOptions(), "POST", KEYS,
                                body=json.dumps(body).encode()),
                   output or render.OutputOptions(), aw.KeyCreated, _created)


@key_app.command(name="list")
def list_keys(*, api: ApiOptions | None = None,
              output: render.OutputOptions | None = None) -> int:
    """Every key: id, prefix, tenant, roles, projects, expiry, revocation (never a key).

    Example: svc auth key list --raw
    """
    return respond(lambda: call(api or ApiOptions(), "GET", KEYS),
                   output or render.OutputOptions(), aw.KeyList, _listed)


@key_app.command
def revoke(key_id: str, *, api: ApiOptions | None = None,
           output: render.OutputOptions | None = None) -> int:
    """Revoke a key: it is refused from now on.

    Example: svc auth key revoke key_…
    """
    return respond(lambda: call(api or ApiOptions(), "POST",
                                f"{KEYS}/{quote(key_id, safe='')}/revoke"),
                   output or render.OutputOptions(), aw.KeyView,
                   lambda key: render.out(_line(key)))
