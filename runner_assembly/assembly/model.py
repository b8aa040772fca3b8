"""The runtime assembly model (SPEC 2.7-2.10, 5.2, 8): the four elements, run policy, tool
credentials and transient env, as msgspec Structs with exact wire names, plus the rules a
type cannot state (paths, projections), checked in :func:`check`.

No field outside the model is accepted; there is no field for a caller-supplied image string.
"""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ledger.errors import DomainError, InvalidRequest
from ledger.states import FailureKind
from runner_assembly.assembly.names import SESSION_ENV, STATIC_ENV

if TYPE_CHECKING:  # imported when a URL is checked: the CLI reads the wire types without them
    from runner_assembly.contract.jobfile import FetchAllow

FullCommit = Annotated[str, Meta(pattern=r"^([0-9a-f]{40}|[0-9a-f]{64})$")]
K8sName = Annotated[str, Meta(min_length=1, max_length=253,
                              pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
SecretKey = Annotated[str, Meta(min_length=1, max_length=253, pattern=r"^[-._A-Za-z0-9]+$")]
EnvName = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Z_][A-Z0-9_]*$")]
Text = Annotated[str, Meta(min_length=1, max_length=2048)]
DigestImage = Annotated[str, Meta(pattern=r"^[^\s@]+@sha256:[0-9a-f]{64}$")]
SessionId = Annotated[str, Meta(pattern=r"^[a-z0-9]([a-z0-9_]{0,61}[a-z0-9])?$")]
"""Lowercase letters, digits and ``_``: ``_`` → ``-`` makes it a Kubernetes name, one-to-one."""
Profile = Literal["profile-1", "profile-2", "profile-3", "profile-4"]
OLD_BUNDLE_INPUTS = ("toolAliases", "skillRefs", "workspaceFiles", "subdirs", "sparsePaths",
                     "gitMirror")
EXT_SSH_ENDPOINTS = ("EXT_MAIN_SERVER_IP", "EXT_MAIN_SERVER_HOST", "EXT_FRONTEND_URL")
SSH_KEYS = ("id_ed25519", "known_hosts", "config")
VOLUME_ROOT = "/home/svc/"
CREDENTIAL_NAMES = frozenset({"GIT_HOST_TOKEN", "EXT_SSH_CLIENT_TOKEN", "GH_TOKEN",
                              "GITHUB_TOKEN", "SSH_AUTH_SOCK", "OPENAI_API_KEY",
                              "ANTHROPIC_API_KEY"})
RESERVED_NAMES = frozenset({*STATIC_ENV, *SESSION_ENV, "LD_PRELOAD", "LD_LIBRARY_PATH",
                            "PYTHONPATH", "GIT_ASKPASS", "GIT_SSH_COMMAND"})
START_UP_NAMES = frozenset({
    # shells: start-up files, options, prompts and word splitting
    "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "PROMPT_COMMAND", "CDPATH",
    "GLOBIGNORE", "INPUTRC", "ZDOTDIR", "SHELL",
    # the C library and the loader
    "GLIBC_TUNABLES", "GCONV_PATH", "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS", "NLSPATH",
    "MALLOC_CHECK_", "MALLOC_PERTURB_", "TMPDIR",
    # interpreters
    "NODE_OPTIONS", "NODE_PATH", "PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "RUBYOPT",
    "RUBYLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
    "LUA_INIT", "LUA_PATH", "LUA_CPATH", "TCLLIBPATH", "R_PROFILE", "R_PROFILE_USER",
    # git and ssh: where their configuration and helpers come from
    "GIT_SSH", "GIT_EXEC_PATH", "GIT_PROXY_COMMAND", "GIT_DIR", "GIT_WORK_TREE",
    "GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_TEMPLATE_DIR", "GIT_EXTERNAL_DIFF",
    "GIT_PAGER", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "GIT_ALLOW_PROTOCOL",
    "GIT_PROTOCOL_FROM_USER", "GIT_SSL_NO_VERIFY", "GIT_SSL_CAINFO", "GIT_HTTP_PROXY_AUTHMETHOD",
    "SSH_ASKPASS", "SSH_ASKPASS_REQUIRE", "PAGER", "EDITOR", "VISUAL", "BROWSER",
    "XDG_CONFIG_HOME", "XDG_CONFIG_DIRS", "XDG_DATA_HOME", "XDG_RUNTIME_DIR",
    "CURL_HOME", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
})
"""Names that change how a program starts (loader, libc, shell, interpreter, git, ssh, TLS
trust, proxies): the backend's tools would run the caller's code or trust the caller's hosts
(DESIGN 13). ``transientEnv`` carries context, never start-up behaviour."""
START_UP_PREFIXES = ("LD_", "DYLD_", "PYTHON", "GIT_CONFIG", "GIT_TRACE", "BASH_FUNC_",
                     "NPM_CONFIG_", "PIP_", "SVC_")
"""Prefixes of start-up names (``SVC_``: the runner's own)."""
PROTECTED_MOUNTS = ("/home/svc/.backend", "/home/svc/.svc", "/home/svc/.gitbundle")
"""Where no tool credential may be mounted, nor above: ``BACKEND_HOME`` (the profile's
credential files and the session directory), the runner's own scratch and the managed
overlay (DESIGN 13)."""

# The rules of :func:`check` and :func:`check_names`, written as JSON Schema for the OpenAPI
# document (``extra_json_schema`` changes no decoding: the checks below stay the authority).
_END = r"(?![\s\S])"
_NAME_END = r"(?![a-z0-9.-])"
_HOST_NAME = (r"(?!(metadata\.google\.internal|metadata\.goog|instance-data\.ec2\.internal)"
              + _NAME_END + r")[a-z0-9-]+(\.[a-z0-9-]+)*\.(?!localhost" + _NAME_END
              + r")[a-z][a-z0-9-]*")
_HOST = _HOST_NAME + r"(:[0-9]{1,5})?"
_URL_PATH = r"(/[!-\"$->@-~]*)?"
REPO_URL_SCHEMA = {"pattern": (
    r"^(git@" + _HOST_NAME + r":[!-.0-~][!-~]*"
    r"|https?://" + _HOST + _URL_PATH + r"|(ssh|git)://(git@)?" + _HOST + _URL_PATH + r")$")}
"""A subset of what :func:`check_repo_url` accepts: printable ASCII, no query, fragment or
credentials, a host name (not ``localhost`` or a metadata name; addresses and ``file://``
only as the operator allows them, DESIGN 13)."""
RELATIVE_PATH_SCHEMA = {"pattern": (
    r"^(?!/)(?![\s\S]*?(^|[/\\])(\.|%2[eE]){2}([/\\]|" + _END + r"))[^\x00]*$")}
_SEGMENT_END = r"(/|" + _END + r")"
MOUNT_PATH_SCHEMA = {"pattern": (
    "^" + re.escape(VOLUME_ROOT) + r"(?!/)(?!\.{1,2}" + _SEGMENT_END + r")"
    r"(?![\s\S]*?/\.{1,2}" + _SEGMENT_END + r")"
    + "(?!(" + "|".join(re.escape(p.removeprefix(VOLUME_ROOT)) for p in PROTECTED_MOUNTS)
    + ")" + _SEGMENT_END + r")[^\x00]+$")}
_SSH_DIR = r"^/home/svc/\.ssh/*$"
_SSH_KEY_SCHEMA: dict[str, Any] = {"anyOf": [{"enum": ["id_ed25519", "known_hosts", "config"]},
                                             {"pattern": "^id_"}]}


def _credential(tool: str, projection: dict[str, Any], keys: dict[str, Any],
                **more: Any) -> dict[str, Any]:
    return {"properties": {"tool": {"const": tool}, "projection": {"properties": projection},
                           "secretRef": {"properties": {"keys": keys}}, **more}}


TOOL_CREDENTIAL_SCHEMA = {"anyOf": [
    _credential("git-host", {"kind": {"const": "env"}, "envName": {"const": "GIT_HOST_TOKEN"}},
                {"const": ["GIT_HOST_TOKEN"]}, purpose={"const": "pull-request"}),
    _credential("ext-ssh", {"kind": {"const": "env"},
                            "envName": {"const": "EXT_SSH_CLIENT_TOKEN"}},
                {"const": ["EXT_SSH_CLIENT_TOKEN"]}),
    _credential("git-host", {"kind": {"const": "volume"}, "mountPath": {"pattern": _SSH_DIR}},
                {"minItems": 3, "maxItems": 3, "uniqueItems": True,
                 "items": {"enum": ["id_ed25519", "known_hosts", "config"]}}),
    _credential("git-host", {"kind": {"const": "volume"},
                             "mountPath": {"not": {"pattern": _SSH_DIR}}},
                {"items": {"not": _SSH_KEY_SCHEMA}}, purpose={"not": {"const": "git-host-ssh"}}),
]}
"""SPEC 5.2 rules 4-5 (:func:`check_projection`): the four shapes a tool credential can take."""
TRANSIENT_NAME_SCHEMA = {"not": {"anyOf": [
    {"enum": sorted(CREDENTIAL_NAMES | RESERVED_NAMES | START_UP_NAMES)},
    {"pattern": "^(" + "|".join(START_UP_PREFIXES) + ")"},
    {"pattern": "(_PRIVATE_KEY|_PASSWORD)$"}]}}
""":func:`check_names`: no credential name, no name the runner sets itself, no start-up
name."""


RepoUrl = Annotated[str, Meta(min_length=1, max_length=2048,
                                extra_json_schema=REPO_URL_SCHEMA)]
RelativePath = Annotated[str, Meta(min_length=1, max_length=2048,
                                   extra_json_schema=RELATIVE_PATH_SCHEMA)]
MountPath = Annotated[str, Meta(min_length=1, max_length=2048,
                                extra_json_schema=MOUNT_PATH_SCHEMA)]
TransientName = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Z_][A-Z0-9_]*$",
                                    extra_json_schema=TRANSIENT_NAME_SCHEMA)]


class SchemaInvalid(DomainError):
    """The request uses a field or value the runtime assembly model forbids."""

    code: str = FailureKind.SCHEMA_INVALID


class Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """No field outside the model."""


class SecretRef(Strict, frozen=True):
    """A secret by reference: name and keys, never values."""

    name: K8sName
    keys: Annotated[list[SecretKey], Meta(min_length=1, max_length=16)]
    namespace: K8sName | UnsetType = UNSET


class ImageSource(Strict, frozen=True):
    """Where an environment image is built from."""

    kind: Literal["env-image-dockerfile"]
    repoUrl: Text
    commitId: FullCommit
    dockerfilePath: Text


class SessionRef(Strict, frozen=True):
    """A persisted backend session; ``threadId`` is the only thread identity."""

    sessionId: SessionId
    conversationId: Annotated[str, Meta(min_length=1, max_length=128)]
    threadId: Annotated[str, Meta(min_length=1, max_length=128)] | None = None


class Bundle(Strict, frozen=True):
    """One part of a git bundle; missing repo/ref/commit inherit the top-level values."""

    subpath: RelativePath
    target_path: RelativePath
    name: Text | UnsetType = UNSET
    repoUrl: RepoUrl | UnsetType = UNSET
    ref: Text | UnsetType = UNSET
    commitId: FullCommit | UnsetType = UNSET


class PromptRef(Strict, frozen=True):
    """A stable initial prompt in the bundle, injected when a thread starts."""

    name: Text
    path: RelativePath
    inject: Literal["thread-start"] = "thread-start"
    required: bool = False


class RequiredSkill(Strict, frozen=True):
    """A skill the run needs (declarative)."""

    name: Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")]


class ResourceBundleRef(Strict, frozen=True):
    """Initial code and files, tools, skills and prompts, from git."""

    kind: Literal["gitbundle"]
    repoUrl: RepoUrl
    bundles: Annotated[list[Bundle], Meta(max_length=64)] = []
    ref: Text | UnsetType = UNSET
    commitId: FullCommit | UnsetType = UNSET
    promptRefs: Annotated[list[PromptRef], Meta(max_length=32)] = []
    requiredSkills: Annotated[list[RequiredSkill], Meta(max_length=64)] = []
    credentialRef: SecretRef | UnsetType = UNSET


class EnvProjection(Strict, frozen=True, tag="env", tag_field="kind"):
    """Project one secret key into an environment variable."""

    envName: EnvName


class VolumeProjection(Strict, frozen=True, tag="volume", tag_field="kind"):
    """Mount the secret read-only below ``/home/svc/``."""

    mountPath: MountPath


class ToolCredential(Strict, frozen=True):
    """A tool credential: reference, tool, purpose and projection intent only."""

    tool: Literal["git-host", "ext-ssh"]
    purpose: Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[a-z0-9-]+$")]
    secretRef: SecretRef
    projection: EnvProjection | VolumeProjection


class SecretScope(Strict, frozen=True):
    """Which secrets the run may use."""

    providerCredentials: Annotated[list[SecretRef], Meta(max_length=4)] = []
    toolCredentials: Annotated[list[Annotated[ToolCredential, Meta(
        extra_json_schema=TOOL_CREDENTIAL_SCHEMA)]], Meta(max_length=16)] = []


class ExecutionPolicy(Strict, frozen=True):
    """Execution policy of a run."""

    secretScope: SecretScope | UnsetType = UNSET


class WorkspaceRef(Strict, frozen=True):
    """The workspace; external workbench fields live only in ``metadata``."""

    repoUrl: RepoUrl | UnsetType = UNSET
    branch: Annotated[str, Meta(min_length=1, max_length=255)] | UnsetType = UNSET
    metadata: dict[str, Any] | UnsetType = UNSET


TransientEnv = Annotated[dict[TransientName, Annotated[str, Meta(max_length=4096)]],
                         Meta(max_length=64)]

_ENCODED_DOTS = re.compile(r"%2e", re.IGNORECASE)


def check_relative_path(value: str, field: str) -> None:
    """A bundle-relative path: not absolute, no ``..`` segment (also URL-encoded), no NUL."""
    decoded = _ENCODED_DOTS.sub(".", value)
    parts = decoded.replace("\\", "/").split("/")
    if "\x00" in value or decoded.startswith("/") or ".." in parts:
        raise SchemaInvalid(f"{field} must be a relative path inside the bundle", field=field)


def check_projection(credential: ToolCredential, index: int) -> None:
    """SPEC 5.2 rules 4-5 for one tool credential."""
    field = f"executionPolicy.secretScope.toolCredentials[{index}]"
    projection, keys = credential.projection, credential.secretRef.keys
    if isinstance(projection, VolumeProjection):
        path = projection.mountPath
        check_mount_path(path, f"{field}.projection.mountPath")
        if credential.tool == "ext-ssh":
            raise SchemaInvalid(f"{field}: ext-ssh projects only key EXT_SSH_CLIENT_TOKEN "
                                "into env EXT_SSH_CLIENT_TOKEN", field=field)
        if (credential.purpose == "git-host-ssh" or path.rstrip("/") == "/home/svc/.ssh"
                or any(key in SSH_KEYS or key.startswith("id_") for key in keys)) and (
                path.rstrip("/") != "/home/svc/.ssh" or sorted(keys) != sorted(SSH_KEYS)):
            raise SchemaInvalid(f"{field}: the code-host SSH purpose mounts keys "
                                f"{', '.join(SSH_KEYS)} at /home/svc/.ssh", field=field)
        return
    expected = {"git-host": "GIT_HOST_TOKEN", "ext-ssh": "EXT_SSH_CLIENT_TOKEN"}[credential.tool]
    if credential.tool == "git-host" and credential.purpose != "pull-request":
        raise SchemaInvalid(f"{field}: git-host env projection is for purpose pull-request",
                            field=field)
    if projection.envName != expected or keys != [expected]:
        raise SchemaInvalid(f"{field}: {credential.tool} projects only key {expected} into "
                            f"env {expected}", field=field)


def check_mount_path(path: str, field: str) -> None:
    """Below ``/home/svc/`` without ``.``/``..`` segments, and clear of
    :data:`PROTECTED_MOUNTS` (not on one, inside one, nor above one)."""
    rest = path[len(VOLUME_ROOT):].split("/") if path.startswith(VOLUME_ROOT) else None
    if rest is None or "\x00" in path or not rest[0] or any(p in (".", "..") for p in rest):
        raise SchemaInvalid(f"{field} must be below {VOLUME_ROOT} without . or .. segments",
                            field=field)
    mount = posixpath.normpath(path)
    for protected in PROTECTED_MOUNTS:
        if mount == protected or mount.startswith(protected + "/") \
                or protected.startswith(mount + "/"):
            raise SchemaInvalid(f"{field} covers {protected}, which the runner keeps for "
                                "itself (BACKEND_HOME, its credential files and the session "
                                "directory)", field=field)


REPO_SCHEMES = ("https", "http", "ssh", "git", "file")
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/\s][^\s]*$")


def check_repo_url(value: str, field: str, allow: FetchAllow | None = None) -> None:
    """A repository URL without credentials (they travel only as ``credentialRef``), and
    no ``file://`` URL, loopback, link-local or metadata host unless the operator's
    ``allow`` names it (:func:`fetch_policy.lexical`).

    The message never repeats the URL, which may hold a password.
    """
    from runner_assembly.assembly import fetch_policy
    from runner_assembly.contract.jobfile import FetchAllow

    _check_repo_syntax(value, field)
    refusal = fetch_policy.lexical(value, allow or FetchAllow())
    if refusal is not None:
        raise SchemaInvalid(f"{field}: {refusal}", field=field)


def _check_repo_syntax(value: str, field: str) -> None:
    if _SCP_LIKE.match(value) and value.split("@", 1)[0] == "git":
        return
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        parts, host = None, None
    if (parts is None or "\x00" in value or any(c.isspace() for c in value)
            or parts.scheme not in REPO_SCHEMES or parts.query or parts.fragment):
        raise SchemaInvalid(f"{field} must be an https, ssh, git or file URL without query, "
                            "fragment or credentials", field=field)
    userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else None
    if userinfo is not None and (parts.scheme not in ("ssh", "git") or userinfo != "git"):
        raise SchemaInvalid(f"{field} must not carry credentials; use credentialRef",
                            field=field)
    if parts.scheme != "file" and not host:
        raise SchemaInvalid(f"{field} has no host", field=field)


def check(resource_bundle: ResourceBundleRef | None,
          policy: ExecutionPolicy | None, workspace: WorkspaceRef | None = None,
          allow: FetchAllow | None = None) -> None:
    """The rules no type can state; raises ``schema-invalid``. ``allow``: the operator's
    fetch allow-list (default: none)."""
    if workspace is not None and isinstance(workspace.repoUrl, str):
        check_repo_url(workspace.repoUrl, "workspaceRef.repoUrl", allow)
    if resource_bundle is not None:
        check_repo_url(resource_bundle.repoUrl, "resourceBundleRef.repoUrl", allow)
        for i, bundle in enumerate(resource_bundle.bundles):
            if isinstance(bundle.repoUrl, str):
                check_repo_url(bundle.repoUrl, f"resourceBundleRef.bundles[{i}].repoUrl",
                               allow)
        for i, bundle in enumerate(resource_bundle.bundles):
            check_relative_path(bundle.subpath, f"resourceBundleRef.bundles[{i}].subpath")
            check_relative_path(bundle.target_path,
                                f"resourceBundleRef.bundles[{i}].target_path")
        for i, prompt in enumerate(resource_bundle.promptRefs):
            check_relative_path(prompt.path, f"resourceBundleRef.promptRefs[{i}].path")
    scope = policy.secretScope if policy is not None else UNSET
    if isinstance(scope, SecretScope):
        for i, credential in enumerate(scope.toolCredentials):
            check_projection(credential, i)


def reject_old_inputs(raw: Any) -> None:
    """Old resource-bundle inputs (at its top or in any ``bundles[]`` item) and a
    request-body ``gitMirror`` are ``schema-invalid``."""
    bundle = raw.get("resourceBundleRef") if isinstance(raw, dict) else None
    if not isinstance(bundle, dict):
        return
    items = bundle.get("bundles")
    places = [("resourceBundleRef", bundle)] + [
        (f"resourceBundleRef.bundles[{i}]", item)
        for i, item in enumerate(items if isinstance(items, list) else [])
        if isinstance(item, dict)]
    for where, part in places:
        for old in OLD_BUNDLE_INPUTS:
            if old in part:
                raise SchemaInvalid(f"{where}.{old} is an old input and is not accepted",
                                    field=f"{where}.{old}")


class AssemblyInputs(Strict, frozen=True):
    """The assembly fields an entry may carry; every other field is the entry's own."""

    workspaceRef: WorkspaceRef | None = None
    resourceBundleRef: ResourceBundleRef | None = None
    executionPolicy: ExecutionPolicy | None = None
    transientEnv: TransientEnv | None = None


ASSEMBLY_FIELDS = tuple(AssemblyInputs.__struct_fields__)


def gate(raw: Any, allow: FetchAllow | None = None) -> None:
    """The one validation gate (DESIGN 8) of every entry carrying assembly inputs: submit,
    dispatch, the runner-job API, session run bases and run commands, on the decoded JSON
    before anything is stored or reserved. Old inputs and the rules no type states are
    ``schema-invalid``; a malformed field is ``invalid-request``. ``allow``: the operator's
    fetch allow-list (the app's ``gate_policy`` state; default: none)."""
    if not isinstance(raw, dict):
        return
    reject_old_inputs(raw)
    present = {key: raw[key] for key in ASSEMBLY_FIELDS if key in raw}
    if not present:
        return
    try:
        inputs = msgspec.convert(present, AssemblyInputs)
    except msgspec.ValidationError as error:
        raise InvalidRequest(f"invalid body: {error}") from None
    check(inputs.resourceBundleRef, inputs.executionPolicy, inputs.workspaceRef, allow)
    if inputs.transientEnv:
        check_names(inputs.transientEnv)


def gate_run_base(raw: Any, allow: FetchAllow | None = None) -> None:
    """The gate for a body whose assembly inputs sit under ``runBase`` (a session)."""
    gate(raw.get("runBase") if isinstance(raw, dict) else None, allow)


def requires_ext_ssh_endpoint(policy: ExecutionPolicy | None, transient_env: dict[str, str],
                              defaults: dict[str, str]) -> None:
    """SPEC 5.2 rule 6: a run asking for ``ext-ssh`` needs an endpoint from the caller's
    transientEnv or the manager's controlled defaults; otherwise ``schema-invalid``."""
    scope = policy.secretScope if policy is not None else UNSET
    wants = isinstance(scope, SecretScope) and any(
        c.tool == "ext-ssh" for c in scope.toolCredentials)
    if wants and not any(transient_env.get(k) or defaults.get(k) for k in EXT_SSH_ENDPOINTS):
        raise SchemaInvalid("ext-ssh needs one of " + ", ".join(EXT_SSH_ENDPOINTS),
                            field="transientEnv")


def check_names(env: dict[str, str]) -> None:
    """``schema-invalid`` for a credential name, a name the runner sets itself, or a
    start-up name (:data:`START_UP_NAMES`, :data:`START_UP_PREFIXES`)."""
    for name in sorted(env):
        if name in CREDENTIAL_NAMES or name.endswith(("_PRIVATE_KEY", "_PASSWORD")):
            raise SchemaInvalid(f"transientEnv.{name} is a credential; credentials travel "
                                "only as secret references", field=f"transientEnv.{name}")
        if name in RESERVED_NAMES or name.startswith("SVC_"):
            raise SchemaInvalid(f"transientEnv.{name} is set by the runner itself",
                                field=f"transientEnv.{name}")
        if name in START_UP_NAMES or name.startswith(START_UP_PREFIXES):
            raise SchemaInvalid(f"transientEnv.{name} changes how programs start (loader, "
                                "shell, interpreter, git); it is not accepted",
                                field=f"transientEnv.{name}")
