"""Every ``SVC_*`` environment variable, declared once: its default, its one-line meaning,
who reads it and, for the server's, its parser. ``python -m api.variables`` prints the
README's tables (a test keeps them equal)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Who = Literal["server", "command", "runner", "backend"]
"""Who reads a variable: the server (``svc serve``, :class:`ServiceSettings`), a command's
option (its ``env_var``), the runner inside a job (set by the driver), or the backend (set by
the runner)."""

Parser = Callable[[str, str], object]
"""``(name, text) -> value``; ``ValueError`` naming the variable when the text is invalid."""


def text(_name: str, value: str) -> str:
    """The text as it is."""
    return value


def optional(_name: str, value: str) -> str | None:
    """The text, or None when unset."""
    return value or None


def whole(name: str, value: str) -> int:
    """A whole number."""
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {value!r}") from None


def positive_whole(name: str, value: str) -> int:
    """A whole number of at least 1."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"{name} must be a positive whole number, not {value!r}")
    return number


def positive_seconds(name: str, value: str) -> float:
    """A positive number of seconds."""
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not number > 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
    return number


def flag(_name: str, value: str) -> bool:
    """On when the text is ``1``."""
    return value == "1"


def words(_name: str, value: str) -> frozenset[str]:
    """A comma-separated set."""
    return frozenset(word for word in value.split(",") if word)


def budgets(name: str, value: str) -> dict[str, str]:
    """``queue=budget`` pairs, comma-separated; each budget a duration (``30m``, ``2h``)."""
    from runner_assembly.assembly.deadline import budget_seconds

    pairs = (item.split("=", 1) for item in value.split(",") if "=" in item)
    found = {queue.strip(): budget.strip() for queue, budget in pairs}
    for queue, budget in found.items():
        if budget_seconds(budget) is None:
            raise ValueError(f"{name}: the budget of queue {queue!r} is not a duration "
                             f"(e.g. 90s, 30m, 2h, 1h30m): {budget!r}")
    return found


def directories(name: str, value: str) -> tuple[str, ...]:
    """Absolute directories, ``:``-separated."""
    roots = tuple(root for root in value.split(":") if root)
    for root in roots:
        if not root.startswith("/"):
            raise ValueError(f"{name} takes absolute directories, not {root!r}")
    return roots


def hosts(name: str, value: str) -> tuple[str, ...]:
    """``host[:port]`` entries (``[v6]:port`` for IPv6), comma-separated."""
    from runner_assembly.assembly.fetch_policy import split_host

    entries = tuple(entry.strip() for entry in value.split(",") if entry.strip())
    for entry in entries:
        try:
            split_host(entry)
        except ValueError:
            raise ValueError(f"{name} takes host[:port] entries, not {entry!r}") from None
    return entries


def ports(name: str, value: str) -> tuple[int, ...]:
    """TCP ports (1 to 65535), comma-separated."""
    found = []
    for item in (item.strip() for item in value.split(",")):
        if not item:
            continue
        if not item.isdigit() or not 1 <= int(item) <= 65535:
            raise ValueError(f"{name} takes ports from 1 to 65535, comma-separated, not {item!r}")
        found.append(int(item))
    return tuple(dict.fromkeys(found))


def backend_kind(name: str, value: str) -> str | None:
    """A backend kind (``command``, ``reference`` or ``codex``), or None when unset."""
    if value and value not in ("command", "reference", "codex"):
        raise ValueError(f"{name} is command, reference or codex, not {value!r}")
    return value or None


def sha256_hex(name: str, value: str) -> str | None:
    """A sha256 as 64 lower-case hex digits, or None when unset."""
    if not value:
        return None
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError(f"{name} must be a sha256 in 64 lower-case hex digits")
    return value


def command(_name: str, value: str) -> tuple[str, ...] | None:
    """A shell-style command line, or None when unset."""
    return tuple(shlex.split(value)) if value else None


def serviceaccounts(name: str, value: str) -> dict[str, object]:
    """``{"<namespace>/<serviceaccount>": {"tenant": T, "roles": [R, …], "projects": [P, …]}}``
    as JSON, inline (text starting with ``{``) or in the file this text names; empty: none."""
    import json
    from pathlib import Path

    import msgspec

    from api.auth_principal import Grant

    if not value:
        return {}
    try:
        text = value if value.lstrip().startswith("{") else Path(value).read_text()
        mapping = msgspec.convert(json.loads(text), dict[str, Grant])
    except (OSError, ValueError, msgspec.ValidationError):
        raise ValueError(f"{name} must map namespace/serviceaccount to a tenant and roles "
                         "(JSON, or the path of a JSON file)") from None
    for account in mapping:
        namespace, _, service_account = account.partition("/")
        if not namespace or not service_account or "/" in service_account:
            raise ValueError(f"{name}: {account!r} is not namespace/serviceaccount")
    return {account: msgspec.to_builtins(grant) for account, grant in mapping.items()}


@dataclass(frozen=True)
class Variable:
    """One environment variable: its default (the text used when unset or empty; ``""``:
    none), its one-line meaning, who reads it and, for the server's, how it is parsed."""

    name: str
    default: str
    meaning: str
    who: tuple[Who, ...] = ("server",)
    parse: Parser | None = None
    shown: str | None = None
    """The README's default column, when the default is not a literal text."""

    @property
    def field(self) -> str:
        """Its :class:`ServiceSettings` attribute."""
        return self.name.removeprefix("SVC_").lower()

    @property
    def default_text(self) -> str:
        """The default as the README and ``svc serve --help`` show it."""
        return self.shown or (f"`{self.default}`" if self.default else "unset")


def _server(name: str, default: str, parse: Parser, meaning: str, *, shown: str | None = None,
            runner: bool = False, backend: bool = False) -> Variable:
    """A server setting; ``runner``/``backend``: also handed on to the runner or backend."""
    who: list[Who] = ["server"]
    if runner:
        who.append("runner")
    if backend:
        who.append("backend")
    return Variable(name, default, meaning, tuple(who), parse, shown)


def _set_for(who: Who, name: str, meaning: str, default: str = "", *,
             shown: str | None = None) -> Variable:
    """A variable of a job's own environment, not a server setting."""
    return Variable(name, default, meaning, (who,), shown=shown)


ALWAYS = "always set"
WITH_VOLUME = "set with a session volume"


_BACKEND_COMMANDS = tuple(
    _server(f"SVC_BACKEND_COMMAND_PROFILE_{n}", "", command,
            f"backend command line of profile-{n} (shell-style)", shown="the reference backend")
    for n in range(1, 5))

_BACKEND_KINDS = tuple(
    _server(f"SVC_BACKEND_KIND_PROFILE_{n}", "", backend_kind,
            f"backend kind of profile-{n}: `command` (the argv of "
            f"`SVC_BACKEND_COMMAND_PROFILE_{n}`), `reference` (the project's stand-in) or "
            f"`codex` (OpenAI's Codex CLI: that variable names the program alone, else `codex` "
            f"on `PATH`); docs/backends.md",
            shown=f"`command` when `SVC_BACKEND_COMMAND_PROFILE_{n}` is set, else `reference`")
    for n in range(1, 5))

VARIABLES: tuple[Variable, ...] = (
    Variable("SVC_HOST", "127.0.0.1", "where `svc serve` listens (`--host`)", ("command",)),
    Variable("SVC_PORT", "8080", "the port `svc serve` listens on (`--port`)", ("command",)),
    Variable("SVC_WORKERS", "", "API processes of `svc serve` (`--workers N`), sharing its port; "
             "the database is started and migrated once, by the supervising process, and "
             "SIGTERM or Ctrl-C stops every worker; a worker that cannot start stops them all "
             "(exit 3); the workers' commands are committed by one ledger writer on the "
             "supervising process (docs/decisions.md, \"One ledger writer per host\"). `1` serves "
             "in the `svc serve` process itself. With 2 or more and the local driver, one more "
             "worker serves local runners' reports on a Unix socket of the data directory "
             "(`SVC_RUNNER_API_SOCKET`). Every worker answers `/metrics` with the counters of them "
             "all (README, Metrics)", ("command",),
             shown="the CPUs it may use (its cgroup's CPU quota, else its cores)"),
    _server("SVC_HTTP_KEEPALIVE_S", "5", positive_whole,
            "an idle kept-alive connection is closed after this many seconds"),
    _server("SVC_HTTP_HEADER_TIMEOUT_S", "10", positive_whole,
            "request headers are due this long after the connection opens (then after each "
            "later request starts); late ones get 408 and a close"),
    _server("SVC_HTTP_BODY_TIMEOUT_S", "30", positive_whole,
            "a request body is due this long after its headers; late ones get 408 and a close"),
    _server("SVC_HTTP_MAX_CONNECTIONS", "4096", positive_whole,
            "open connections at most (never more than the fd limit less a quarter, at least "
            "256 fds); at the cap the oldest idle connection is closed, or the new one gets "
            "503. `svc serve` raises its soft fd limit to the hard one"),
    _server("SVC_SHUTDOWN_GRACE_S", "10", positive_whole,
            "on SIGTERM, in-flight requests get this long to finish before they are cut"),
    Variable("SVC_DATA_DIR", ".svc", "data directory (the embedded Postgres lives in `pg/`; "
             "`svc serve` writes the first admin key to `admin.key` there, where the CLI "
             "reads it)", ("server", "command"), text),
    _server("SVC_DATABASE_URL", "", optional,
            "use this Postgres (15 or newer) instead of the embedded one; the service serves "
            "as this URL's role"),
    _server("SVC_MIGRATE_DATABASE_URL", "", optional,
            "the schema owner's URL: `svc serve` and `svc db migrate` apply migrations as "
            "this role", shown="`SVC_DATABASE_URL`"),
    Variable("SVC_API_URL", "http://127.0.0.1:8080", "where the CLI finds the API (`--api`)",
             ("command",)),
    Variable("SVC_READER_ID", "cli", "default `--reader-id` of `svc queue read`",
             ("command",)),
    Variable("SVC_DEPLOY_ENDPOINT", "http://127.0.0.1:8080",
             "the endpoint a deployment manifest must name: `POST /api/v1/manifests/validate`, "
             "`svc manifest validate` and `svc manifest schema` (`--endpoint`)",
             ("server", "command"), text),
    _server("SVC_PGBOUNCER", "", flag,
            "`1` disables prepared-statement caching (PgBouncer transaction mode)"),
    *_BACKEND_COMMANDS,
    _server("SVC_DEFAULT_BACKEND_PROFILE", "profile-1", text,
            "profile of tasks submitted without `backendProfile` (fixed at submit; the "
            "contract stays as sent)"),
    _server("SVC_SECRET_NAMESPACE", "svc-v01", text, "namespace of the file secret store"),
    _server("SVC_RUNNER_DRIVER", "local", text,
            "runner driver: `local` (child processes) or `kubernetes`"),
    _server("SVC_LOCAL_SANDBOX", "bwrap", text,
            "`off`: local backends run unsandboxed (reported in the banner and health)"),
    _server("SVC_POD_SANDBOX", "bwrap", text,
            "with `kubernetes`: `off` runs a pod's backend without bubblewrap, for nodes that "
            "refuse user namespaces; the backend can then read its runner's token (reported in "
            "the banner and health; `docs/decisions.md`)", runner=True),
    _server("SVC_KUBERNETES_API", "", optional,
            "API server URL for the `kubernetes` driver (else in-cluster config, else "
            "kubeconfig)"),
    _server("SVC_RUNTIME_DEFAULTS", "", optional,
            "the operator's runtime defaults file (image, mirror, endpoints, tenant policies, "
            "smoke tools, prompt caps)"),
    _server("SVC_SESSION_STORAGE_CLASS", "local-path", text,
            "storage class of session volumes"),
    _server("SVC_BACKEND_ROLLOUT_SUBDIR", "sessions", text,
            "where the session volume is mounted in `BACKEND_HOME`", backend=True),
    _server("SVC_SESSION_TTL_S", str(7 * 24 * 3600), whole,
            "a session volume expires this long after its last turn started",
            shown="`604800` (7 days)"),
    _server("SVC_SESSION_GC_INTERVAL_MS", "300000", whole,
            "how often expired session volumes (no turn running) are removed and marked "
            "`evicted`"),
    _server("SVC_SESSION_SYNC_INTERVAL_MS", "1000", whole,
            "how often running sessions record ended turns (reported exit or lost lease)"),
    _server("SVC_RUNNER_API_URL", "", optional,
            "where runners reach the runner protocol (`local`: `svc serve` uses its own host "
            "and port; `kubernetes`: the manager's Service, "
            "`http://svc-manager.<namespace>.svc`)", shown="this server's address",
            runner=True),
    _server("SVC_RUNNER_HEARTBEAT_S", "10", positive_seconds,
            "how often a runner renews its lease", runner=True),
    _server("SVC_RUNNER_LEASE_S", "60", positive_seconds,
            "a running job with no sign of life for this long is `runner-lost` on refresh"),
    _server("SVC_RUNNER_START_S", "600", positive_seconds,
            "how much longer a job may stay silent while the driver sees it alive without its "
            "runner: a pod whose container is being started (an image pull, before or after "
            "its `assemble` container), or one started within the lease"),
    _server("SVC_RESOURCE_BIN_PATH", "", optional,
            "write tool shims here instead of putting the overlay's `tools/` on `PATH`: one "
            "`#!/bin/sh` `exec <overlay tool>` per executable tool, nothing else (the `local` "
            "driver writes each job's shims to `<path>/<runnerJobId>/`, so concurrent jobs "
            "never run each other's tools)"),
    _server("SVC_WORKSPACE_ROOT", "", optional,
            "absolute directory checkouts go under (locally `<root>/<runnerJobId>/`; in a pod "
            "the workspace volume's mount, default `/workspace`); `svc serve` refuses a root "
            "that is, holds or lies in `/app`, the secret store or the session directories"),
    _server("SVC_FETCH_ALLOW_FILE_ROOTS", "", directories,
            "absolute directories, `:`-separated, whose `file://` repositories runners may "
            "fetch (never below the data directory or the workspace root); unset: `file://` "
            "repository URLs are refused (DESIGN 13)"),
    _server("SVC_FETCH_ALLOW_HOSTS", "", hosts,
            "`host[:port]` entries, comma-separated, that runners may fetch repositories from "
            "although they are, or resolve to, loopback, link-local or metadata addresses "
            "(checked at submit, at dispatch and by the runner before `git` runs); a pod's "
            "backend reaches them, and other addresses that are not public, through its "
            "runner's egress proxy (never the manager or the database)"),
    _server("SVC_LOG_LEVEL", "INFO", text,
            "log level of `svc serve`; `DEBUG` adds an access line for every successful "
            "request (failed ones, status 400 and up, are logged at `INFO`)"),
    _server("SVC_RUNNER_RETENTION", "", flag,
            "`1`: serialise job creation per namespace with a capacity compare-and-swap"),
    _server("SVC_RUNNER_CAPACITY", "8", whole,
            "jobs per namespace at most, with `SVC_RUNNER_RETENTION=1`"),
    _server("SVC_QUEUE_TIMEOUT_BUDGETS", "", budgets,
            "per-queue timeout budget shown by the supervisor, e.g. `main=30m,beta=2h` (`90s`, "
            "`1h30m`, `3600` too); a queue's Kubernetes runner Jobs get it plus 5 minutes as "
            "`activeDeadlineSeconds`"),
    _server("SVC_FAULTS", "", words,
            "test-only fault injection (`create-timeout[@P]`, `crash-after-reserve`, "
            "`crash-after-spawn`, `crash-after-create`)"),
    _server("SVC_FAULT_SEED", "0", whole,
            "test-only: the seed of `create-timeout@P`'s random draws"),
    _server("SVC_BACKEND_LOOPBACK_PORTS", "", ports,
            "host loopback TCP ports, comma-separated, that sandboxed local backends reach at "
            "their own `127.0.0.1:<port>` (e.g. a model server on this machine); every other "
            "loopback service of the host is out of their reach. `svc serve` refuses the API's "
            "and the database's ports (DESIGN 13)"),
    *_BACKEND_KINDS,
    _set_for("runner", "SVC_JOB_SPEC", "where a pod's runner reads its job's spec (mounted "
             "from the job's Secret)", "/var/run/svc/job/job-spec.json"),
    _set_for("runner", "SVC_RUNNER_API_SOCKET",
             "the Unix socket of `svc serve`'s runner listener (a worker of its own when it "
             "serves 2 or more), which a local runner tries before `SVC_RUNNER_API_URL`; set "
             "by the local driver", shown="set by `svc serve` with 2+ workers"),
    _set_for("runner", "SVC_TERMINATION_LOG",
             "where a pod's runner writes its exit report for the manager (the container's "
             "termination log); the driver leaves it at its default", "/dev/termination-log"),
    _set_for("backend", "SVC_WORKSPACE_PATH", "the job's checkout", shown=ALWAYS),
    _set_for("backend", "SVC_RUN_ID", "the run the backend serves", shown=ALWAYS),
    _set_for("backend", "SVC_SESSION_ID", "the run's session", shown=ALWAYS),
    _set_for("backend", "SVC_BACKEND_PROFILE", "the run's backend profile", shown=ALWAYS),
    _set_for("backend", "SVC_SKILLS_DIRS", "the skill directories, `:`-separated",
             shown=ALWAYS),
    _set_for("backend", "SVC_THREAD_ID", "the thread a turn resumes (unset: a new thread)"),
    _set_for("backend", "SVC_SESSION_PVC_NAME", "the session volume's claim",
             shown=WITH_VOLUME),
    _set_for("backend", "SVC_SESSION_PVC_NAMESPACE", "the session volume's namespace",
             shown=WITH_VOLUME),
    _set_for("backend", "SVC_SESSION_PVC_MOUNT_PATH", "where the session volume is mounted",
             shown=WITH_VOLUME),
    _server("SVC_OUTPUT_MAX_BYTES", str(64 * 1024 * 1024), positive_whole,
            "what a backend may print in one turn (standard output and error together); past "
            "it the runner drops the rest (one "
            "notice line in the output, one `output-bounded` trace event with the count) and "
            "the turn ends as it would have; the manager stores no more of a turn's lines "
            "either (DESIGN 13)", shown="`67108864` (64 MiB)"),
    _server("SVC_MAX_SESSIONS_PER_TENANT", "100", whole,
            "live sessions (with a volume, not evicted) a tenant may hold; creating one more "
            "(`POST /sessions`, a dispatch naming a new `sessionRef`) is refused with 429 "
            "`session-limit-reached`; `0`: no cap"),
    _server("SVC_ADMIN_KEY_SHA256", "", sha256_hex,
            "the sha256 (hex) of an admin API key the operator holds (e.g. from a Kubernetes "
            "Secret): accepted as principal `admin`; when set, `svc serve` writes no "
            "`admin.key`"),
    _server("SVC_SANDBOX_READ_ONLY", "", directories,
            "absolute paths, `:`-separated, that every sandboxed backend sees read-only besides "
            "the system directories and its command's install roots (e.g. `/opt/agent`, a "
            "virtual environment); a backend program the sandbox does not show fails before "
            "it starts, `infra-failed`, naming this variable (docs/backends.md)"),
    Variable("SVC_TOKEN", "", "the API key the CLI sends (`--token`); unset: the key in "
             "`${SVC_DATA_DIR:-.svc}/admin.key` when that file exists", ("command",)),
    _server("SVC_AUTH_SERVICEACCOUNTS", "", serviceaccounts,
            "Kubernetes ServiceAccount tokens as credentials (TokenReview, audience `svc`): "
            "JSON, inline or the path of a file, mapping `namespace/serviceaccount` to "
            "`{\"tenant\": T, \"roles\": [R], \"projects\": [P]}`; the cluster is the "
            "driver's (`SVC_KUBERNETES_API`, in-cluster, kubeconfig); unset: off "
            "(README, \"Who may call the API\")"),
    _server("SVC_AUTH_OIDC_ISSUER", "", optional,
            "OIDC JWTs of this issuer (its `iss`, exactly) as credentials; unset: off"),
    _server("SVC_AUTH_OIDC_AUDIENCE", "svc", text, "the `aud` an OIDC JWT must name"),
    _server("SVC_AUTH_OIDC_JWKS_URL", "", optional,
            "the issuer's key set (JWKS)",
            shown="the `jwks_uri` of `<issuer>/.well-known/openid-configuration`"),
    _server("SVC_AUTH_OIDC_CLAIM", "svc_roles", text,
            "the OIDC claim listing `tenant:role` pairs (all of one tenant)"),
)
"""Every ``SVC_*`` variable of the service (tests' own knobs aside)."""

BY_NAME = {variable.name: variable for variable in VARIABLES}
SERVER = tuple(variable for variable in VARIABLES if "server" in variable.who)


TABLES: tuple[tuple[Who, str], ...] = (
    ("server", "Read by `svc serve` (once, at start):"),
    ("command", "Read by a command's options:"),
    ("runner", "Read by the runner inside a job (set by the driver in the job's environment):"),
    ("backend", "Set by the runner for the backend (besides `HOME`, `BACKEND_HOME`, `PATH` "
                "and `LANG`):"),
)


def markdown() -> str:
    """The README's settings tables."""
    parts = []
    for who, title in TABLES:
        rows = [f"| `{v.name}` | {v.default_text} | {v.meaning} |"
                for v in VARIABLES if who in v.who]
        parts.append("\n".join([title, "", "| variable | default | meaning |", "|---|---|---|",
                                *rows]))
    return "\n\n".join(parts) + "\n"


def help_text() -> str:
    """The server variables ``svc serve --help`` lists: one line each, name, default and
    meaning."""
    lines = []
    for variable in SERVER:
        default = variable.default_text.replace("`", "")
        lines.append(f"{variable.name} ({default}): {variable.meaning.replace('`', '')}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
