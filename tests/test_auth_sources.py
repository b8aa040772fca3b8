"""Credential sources beside API keys (DESIGN 12, issue 25 item 4), through the real app:
Kubernetes ServiceAccount tokens reviewed by kmock playing the API server's TokenReview, and
OIDC JWTs signed by keys the test makes, with the key set served over HTTP on 127.0.0.1.
Each source is off until configured; a refused credential is 401 ``unauthenticated`` with
``WWW-Authenticate: Bearer``; an issuer that cannot be reached is 503, never access; no
token reaches a log line."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import jwt
import kmock
import kubernetes_validate
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from api.auth_jwt import CredentialUncheckable, is_jwt
from api.auth_oidc import OidcSource, roles_of
from api.auth_principal import Principal
from api.auth_serviceaccount import ServiceAccountSource, account_of
from api.settings import ServiceSettings
from runner_assembly.drivers.k8s import api_client
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client, free_port
from tests.support import TASKS, anonymous, task_body
from tests.test_k8s_checkov import failed_checks
from tests.test_k8s_manifests import KUBERNETES_VERSION, OVERLAYS, rendered
from tests.test_k8s_manifests import objects as manifest_objects

REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
K8S_ISSUER = "https://kubernetes.default.svc.cluster.local"
ACCOUNTS = {"ci/builder": {"tenant": "acme", "roles": ["submitter"]},
            "ci/viewer": {"tenant": "acme", "roles": ["reader"], "projects": ["demo"]}}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def assert_refused(answer: httpx.Response) -> None:
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["code"] == "unauthenticated"
    assert answer.headers["www-authenticate"] == "Bearer"


async def actor_of(database_url: str, stream_id: str) -> str:
    conn = await asyncpg.connect(database_url)
    try:
        return str(await conn.fetchval(
            "SELECT actor FROM ledger WHERE stream_id = $1 ORDER BY change_seq LIMIT 1",
            stream_id))
    finally:
        await conn.close()


# --- Kubernetes ServiceAccount tokens ------------------------------------------------------

def sa_token(name: str, *, expires_in: int = 3600) -> str:
    """A token shaped as a ServiceAccount token (the API server, kmock here, judges it)."""
    header = b64(json.dumps({"alg": "RS256", "kid": "k8s"}).encode())
    payload = b64(json.dumps({"iss": K8S_ISSUER, "sub": name,
                              "exp": int(time.time()) + expires_in}).encode())
    return f"{header}.{payload}.{b64(hashlib.sha256(name.encode()).digest())}"


def reviewed(username: str, *, authenticated: bool = True,
             audiences: tuple[str, ...] = ("svc",)) -> dict[str, Any]:
    return {"authenticated": authenticated, "audiences": list(audiences),
            "user": {"username": username, "groups": ["system:serviceaccounts"]}}


@dataclass
class Reviewer:
    """The API server's TokenReview: each known token's status, and every review asked."""

    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    asked: list[dict[str, Any]] = field(default_factory=list)
    down: bool = False

    def __call__(self, request: kmock.Request) -> Any:
        spec = request.data["spec"]
        self.asked.append(spec)
        if self.down:
            return kmock.Response(status=503, payload={"kind": "Status", "message": "down"})
        status = self.statuses.get(spec["token"], {"authenticated": False,
                                                   "error": "invalid bearer token"})
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                "spec": spec, "status": status}


@pytest.fixture
async def sa_client(kmock: Any, app_url: str, runner_settings: RunnerSettings,
                    monkeypatch: pytest.MonkeyPatch
                    ) -> AsyncIterator[tuple[httpx.AsyncClient, Reviewer]]:
    reviewer = Reviewer()
    kmock[f"post {REVIEWS}"] << reviewer
    monkeypatch.setenv("SVC_KUBERNETES_API", str(kmock.url).rstrip("/"))
    monkeypatch.setenv("SVC_AUTH_SERVICEACCOUNTS", json.dumps(ACCOUNTS))
    async with app_client(app_url, runner_settings) as http:
        yield http, reviewer


pytestmark = pytest.mark.kmock(cls=kmock.RawHandler)


async def test_a_mapped_service_account_is_its_tenant_and_roles(
        sa_client: tuple[httpx.AsyncClient, Reviewer], database_url: str) -> None:
    http, reviewer = sa_client
    builder, viewer = sa_token("builder"), sa_token("viewer")
    reviewer.statuses[builder] = reviewed("system:serviceaccount:ci:builder")
    reviewer.statuses[viewer] = reviewed("system:serviceaccount:ci:viewer")
    submitted = await http.post(TASKS, json=task_body(), headers=bearer(builder))
    assert submitted.status_code == 201, submitted.text
    task_id = submitted.json()["taskId"]
    assert await actor_of(database_url, task_id) == "sa:ci/builder"
    assert (await http.get(f"{TASKS}/{task_id}", headers=bearer(viewer))).status_code == 200
    refused = await http.post(TASKS, json=task_body(), headers=bearer(viewer))
    assert refused.status_code == 403, "a reader may not submit"
    assert all(spec["audiences"] == ["svc"] for spec in reviewer.asked)


async def test_the_principal_of_a_service_account_is_its_mapping(kmock: Any) -> None:
    reviewer = Reviewer()
    kmock[f"post {REVIEWS}"] << reviewer
    token = sa_token("viewer")
    reviewer.statuses[token] = reviewed("system:serviceaccount:ci:viewer")
    accounts = ServiceSettings.from_env(
        {"SVC_AUTH_SERVICEACCOUNTS": json.dumps(ACCOUNTS)}).auth_serviceaccounts
    source = ServiceAccountSource(api_client(str(kmock.url).rstrip("/")), accounts)
    assert await source.authenticate(token) == Principal(
        id="sa:ci/viewer", tenant="acme", projects=("demo",), roles=frozenset({"reader"}),
        kind="serviceaccount")


@pytest.mark.parametrize("status", [
    reviewed("system:serviceaccount:ci:stranger"),
    reviewed("system:serviceaccount:ci:builder", authenticated=False),
    reviewed("system:serviceaccount:ci:builder", audiences=("https://kubernetes.default.svc",)),
    reviewed("system:serviceaccount:ci:builder", audiences=()),
    reviewed("builder"),
    reviewed("system:serviceaccount:ci"),
], ids=["unmapped", "not-authenticated", "other-audience", "no-audience", "a-user",
        "no-name"])
async def test_a_service_account_token_is_refused(
        sa_client: tuple[httpx.AsyncClient, Reviewer], status: dict[str, Any]) -> None:
    http, reviewer = sa_client
    token = sa_token("someone")
    reviewer.statuses[token] = status
    assert_refused(await http.get(TASKS, headers=bearer(token)))
    assert_refused(await http.post(TASKS, json=task_body(), headers=bearer(token)))
    assert len(reviewer.asked) == 2, "a refusal is never remembered"


async def test_an_accepted_review_is_remembered_but_never_past_the_token_expiry(
        sa_client: tuple[httpx.AsyncClient, Reviewer]) -> None:
    http, reviewer = sa_client
    lasting, expired = sa_token("lasting"), sa_token("expired", expires_in=-5)
    for token in (lasting, expired):  # the API server's clock may run behind: both pass
        reviewer.statuses[token] = reviewed("system:serviceaccount:ci:viewer")
    for _ in range(3):
        assert (await http.get(TASKS, headers=bearer(lasting))).status_code == 200
    assert len(reviewer.asked) == 1
    for _ in range(2):
        assert (await http.get(TASKS, headers=bearer(expired))).status_code == 200
    assert len(reviewer.asked) == 3, "a token past its exp is reviewed every time"


@pytest.mark.parametrize("failure", [503, 500, 403, 401])
async def test_a_review_that_fails_grants_nothing(
        kmock: Any, app_url: str, runner_settings: RunnerSettings,
        monkeypatch: pytest.MonkeyPatch, failure: int) -> None:
    kmock[f"post {REVIEWS}"] << failure << {"kind": "Status", "message": "busy"}
    monkeypatch.setenv("SVC_KUBERNETES_API", str(kmock.url).rstrip("/"))
    monkeypatch.setenv("SVC_AUTH_SERVICEACCOUNTS", json.dumps(ACCOUNTS))
    async with app_client(app_url, runner_settings) as http:
        answer = await http.get(TASKS, headers=bearer(sa_token("builder")))
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "infra-failed"
    assert "retry-after" in answer.headers


async def test_an_unreachable_api_server_grants_nothing(
        app_url: str, runner_settings: RunnerSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVC_KUBERNETES_API", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("SVC_AUTH_SERVICEACCOUNTS", json.dumps(ACCOUNTS))
    async with app_client(app_url, runner_settings) as http:
        answer = await http.get(TASKS, headers=bearer(sa_token("builder")))
        assert answer.status_code == 503, answer.text
        with anonymous():
            assert (await http.get("/api/v1/health")).status_code == 200
        assert (await http.get(TASKS)).status_code == 200, "API keys still work"


async def test_service_account_tokens_are_off_until_configured(
        kmock: Any, client: httpx.AsyncClient) -> None:
    assert ServiceSettings.from_env().auth_serviceaccounts == {}
    reviewer = Reviewer()
    kmock[f"post {REVIEWS}"] << reviewer
    assert_refused(await client.get(TASKS, headers=bearer(sa_token("builder"))))
    assert reviewer.asked == []


@pytest.mark.parametrize("value", [
    '{"ci": {"tenant": "acme", "roles": ["reader"]}}',
    '{"ci/a": {"tenant": "acme", "roles": []}}',
    '{"ci/a": {"tenant": "acme", "roles": ["boss"]}}',
    '{"ci/a": {"tenant": "", "roles": ["reader"]}}',
    '{"ci/a": {"tenant": "acme", "roles": ["reader"], "extra": 1}}',
    "/nonexistent/accounts.json",
])
def test_a_malformed_mapping_stops_the_server_naming_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match="SVC_AUTH_SERVICEACCOUNTS") as refused:
        ServiceSettings.from_env({"SVC_AUTH_SERVICEACCOUNTS": value})
    assert "reader" not in str(refused.value)


def test_the_mapping_may_be_a_file(tmp_path: Any) -> None:
    path = tmp_path / "accounts.json"
    path.write_text(json.dumps(ACCOUNTS))
    mapping = ServiceSettings.from_env({"SVC_AUTH_SERVICEACCOUNTS": str(path)})
    assert mapping.auth_serviceaccounts["ci/viewer"].projects == ("demo",)
    assert ServiceSettings.decode(mapping.encode()) == mapping


def test_only_service_account_usernames_name_an_account() -> None:
    assert account_of("system:serviceaccount:ci:builder") == "ci/builder"
    for other in ("system:serviceaccount:ci", "system:serviceaccount::b", "ci:builder",
                  "system:serviceaccount:ci:b:c", "system:node:ci:builder"):
        assert account_of(other) is None, other


# --- OIDC JWTs -------------------------------------------------------------------------------

@dataclass
class Issuer:
    """An OIDC issuer on 127.0.0.1: its discovery document and key set, and its keys."""

    url: str
    rsa_key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048))
    ec_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    fetched: list[str] = field(default_factory=list)
    rotated: dict[str, rsa.RSAPrivateKey] = field(default_factory=dict)
    """RSA keys published after the first ones, by kid."""

    def jwks(self) -> dict[str, Any]:
        keys = [{**jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True),
                 "kid": kid, "use": "sig", "alg": "RS256"} for kid, key in self.rotated.items()]
        for kid, algorithm, key in (("rsa-1", jwt.algorithms.RSAAlgorithm, self.rsa_key),
                                    ("ec-1", jwt.algorithms.ECAlgorithm, self.ec_key)):
            jwk = algorithm.to_jwk(key.public_key(), as_dict=True)  # type: ignore[attr-defined]
            keys.append({**jwk, "kid": kid, "use": "sig",
                         "alg": "RS256" if kid.startswith("rsa") else "ES256"})
        return {"keys": keys}

    def token(self, *, claims: dict[str, Any] | None = None, kid: str = "rsa-1",
              algorithm: str = "RS256", key: Any = None) -> str:
        now = int(time.time())
        payload = {"iss": self.url, "aud": "svc", "sub": "alice", "iat": now,
                   "exp": now + 600, "svc_roles": ["acme:reader"], **(claims or {})}
        payload = {name: value for name, value in payload.items() if value is not None}
        signer = key or (self.ec_key if algorithm == "ES256" else self.rsa_key)
        return jwt.encode(payload, signer, algorithm=algorithm, headers={"kid": kid})


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    port = free_port()
    found = Issuer(f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found.fetched.append(self.path)
            documents = {"/.well-known/openid-configuration": {
                "issuer": found.url, "jwks_uri": f"{found.url}/keys"},
                "/keys": found.jwks()}
            body = json.dumps(documents.get(self.path, {})).encode()
            self.send_response(200 if self.path in documents else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield found
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.fixture
async def oidc_client(issuer: Issuer, app_url: str, runner_settings: RunnerSettings,
                      monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setenv("SVC_AUTH_OIDC_ISSUER", issuer.url)
    async with app_client(app_url, runner_settings) as http:
        yield http


def unsigned(issuer: Issuer) -> str:
    now = int(time.time())
    header = b64(json.dumps({"alg": "none", "typ": "JWT", "kid": "rsa-1"}).encode())
    payload = b64(json.dumps({"iss": issuer.url, "aud": "svc", "sub": "mallory",
                              "exp": now + 600, "svc_roles": ["acme:admin"]}).encode())
    return f"{header}.{payload}."


def hmac_with_public_key(issuer: Issuer) -> str:
    """HS256 keyed with the issuer's public key (the classic algorithm confusion)."""
    now = int(time.time())
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    payload = b64(json.dumps({"iss": issuer.url, "aud": "svc", "sub": "mallory",
                              "exp": now + 600, "svc_roles": ["acme:admin"]}).encode())
    public = issuer.rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    signature = hmac.new(public, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{b64(signature)}"


BAD_TOKENS = {
    "expired": lambda i: i.token(claims={"exp": int(time.time()) - 300}),
    "not-yet-valid": lambda i: i.token(claims={"nbf": int(time.time()) + 300}),
    "no-expiry": lambda i: i.token(claims={"exp": None}),
    "other-issuer": lambda i: i.token(claims={"iss": "https://other.example"}),
    "other-audience": lambda i: i.token(claims={"aud": "not-svc"}),
    "other-key": lambda i: i.token(key=rsa.generate_private_key(public_exponent=65537,
                                                                key_size=2048)),
    "ec-key-claiming-rsa": lambda i: i.token(kid="rsa-1", algorithm="ES256"),
    "alg-none": unsigned,
    "hs256-with-public-key": hmac_with_public_key,
    "unknown-kid": lambda i: i.token(kid="rsa-9"),
    "malformed": lambda i: "eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24.c2ln",
    "two-tenants": lambda i: i.token(claims={"svc_roles": ["acme:reader", "globex:reader"]}),
    "unknown-role": lambda i: i.token(claims={"svc_roles": ["acme:boss"]}),
    "no-roles": lambda i: i.token(claims={"svc_roles": None}),
    "roles-not-a-list": lambda i: i.token(claims={"svc_roles": "acme:reader"}),
}


@pytest.mark.parametrize("name", sorted(BAD_TOKENS))
async def test_an_oidc_token_is_refused(issuer: Issuer, oidc_client: httpx.AsyncClient,
                                        name: str) -> None:
    token = BAD_TOKENS[name](issuer)
    assert_refused(await oidc_client.get(TASKS, headers=bearer(token)))


async def test_an_oidc_role_works_end_to_end(issuer: Issuer, oidc_client: httpx.AsyncClient,
                                             database_url: str) -> None:
    reader = issuer.token()
    submitter = issuer.token(algorithm="ES256", kid="ec-1",
                             claims={"sub": "bob", "svc_roles": ["acme:submitter"]})
    submitted = await oidc_client.post(TASKS, json=task_body(), headers=bearer(submitter))
    assert submitted.status_code == 201, submitted.text
    assert await actor_of(database_url, submitted.json()["taskId"]) == "oidc:bob"
    listed = await oidc_client.get(TASKS, headers=bearer(reader))
    assert listed.status_code == 200, listed.text
    refused = await oidc_client.post(TASKS, json=task_body(), headers=bearer(reader))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert issuer.fetched == ["/.well-known/openid-configuration", "/keys"], \
        "discovery once, the key set once (cached)"


async def test_the_principal_of_an_oidc_token_is_its_subject_and_claim(
        issuer: Issuer) -> None:
    source = OidcSource(issuer.url, "svc", "groups")
    token = issuer.token(claims={"groups": ["acme:judge", "acme:reader"]})
    assert await source.authenticate(token) == Principal(
        id="oidc:alice", tenant="acme", roles=frozenset({"judge", "reader"}), kind="oidc")
    assert await source.authenticate(issuer.token()) is None, "the configured claim only"


async def test_an_unknown_kid_fetches_the_key_set_once_more(issuer: Issuer) -> None:
    source = OidcSource(issuer.url, "svc", "svc_roles", f"{issuer.url}/keys", cooldown_s=0)
    assert await source.authenticate(issuer.token()) is not None
    assert issuer.fetched == ["/keys"]
    issuer.rotated["rsa-2"] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rotated = issuer.token(kid="rsa-2", key=issuer.rotated["rsa-2"])
    assert await source.authenticate(rotated) is not None, "a new key is fetched"
    assert await source.authenticate(issuer.token(kid="rsa-9")) is None
    assert issuer.fetched == ["/keys"] * 3, "one fetch per unknown kid, no more"
    assert await source.authenticate(rotated) is not None
    assert len(issuer.fetched) == 3, "a known kid is served from the cache"


async def test_unknown_kids_fetch_the_key_set_at_most_every_30_s(
        issuer: Issuer, oidc_client: httpx.AsyncClient) -> None:
    assert (await oidc_client.get(TASKS, headers=bearer(issuer.token()))).status_code == 200
    for kid in ("new-1", "new-2", "new-3"):
        assert_refused(await oidc_client.get(TASKS, headers=bearer(issuer.token(kid=kid))))
    assert issuer.fetched.count("/keys") == 1, "no fetch per request"


async def test_an_unreachable_key_set_grants_nothing(
        issuer: Issuer, app_url: str, runner_settings: RunnerSettings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVC_AUTH_OIDC_ISSUER", issuer.url)
    monkeypatch.setenv("SVC_AUTH_OIDC_JWKS_URL", f"http://127.0.0.1:{free_port()}/keys")
    async with app_client(app_url, runner_settings) as http:
        answer = await http.get(TASKS, headers=bearer(issuer.token()))
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "infra-failed"
    assert issuer.fetched == [], "the configured key set URL replaces discovery"


async def test_an_unreachable_discovery_document_grants_nothing(issuer: Issuer) -> None:
    gone = f"http://127.0.0.1:{free_port()}"
    source = OidcSource(gone, "svc", "svc_roles")
    with pytest.raises(CredentialUncheckable):
        await source.authenticate(issuer.token(claims={"iss": gone}))


async def test_oidc_tokens_are_off_until_configured(
        issuer: Issuer, client: httpx.AsyncClient) -> None:
    assert ServiceSettings.from_env().auth_oidc_issuer is None
    assert_refused(await client.get(TASKS, headers=bearer(issuer.token())))
    assert issuer.fetched == []


def test_a_claim_grants_one_tenant_and_known_roles() -> None:
    assert roles_of(["acme:reader", "acme:judge"]) == ("acme", frozenset({"reader", "judge"}))
    assert roles_of(["team:a:submitter"]) == ("team:a", frozenset({"submitter"}))
    for refused in (["acme:reader", "b:reader"], [], ["acme"], [":reader"], ["acme:root"],
                    "acme:reader", [1], None):
        assert roles_of(refused) is None, refused


def test_runner_tokens_and_keys_are_not_jwt_shaped() -> None:
    assert not is_jwt("rj_01abc.c29tZXRoaW5nLXJhbmRvbQ")
    assert not is_jwt("svck_abcdefghijklmnopqrstuvwxyz012345")
    assert is_jwt(sa_token("builder"))


# --- No token in any log line --------------------------------------------------------------

async def test_no_token_reaches_a_log_line(
        issuer: Issuer, kmock: Any, app_url: str, runner_settings: RunnerSettings,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    reviewer = Reviewer()
    kmock[f"post {REVIEWS}"] << reviewer
    monkeypatch.setenv("SVC_KUBERNETES_API", str(kmock.url).rstrip("/"))
    monkeypatch.setenv("SVC_AUTH_SERVICEACCOUNTS", json.dumps(ACCOUNTS))
    monkeypatch.setenv("SVC_AUTH_OIDC_ISSUER", issuer.url)
    tokens = [sa_token("builder"), sa_token("stranger"), sa_token("unknown"),
              issuer.token(), issuer.token(claims={"svc_roles": ["a:reader", "b:reader"]}),
              issuer.token(kid="rsa-9"), issuer.token(claims={"exp": int(time.time()) - 99})]
    reviewer.statuses[tokens[0]] = reviewed("system:serviceaccount:ci:builder")
    reviewer.statuses[tokens[1]] = reviewed("system:serviceaccount:ci:stranger")
    caplog.set_level(logging.DEBUG)
    async with app_client(app_url, runner_settings) as http:
        answers = [(await http.get(TASKS, headers=bearer(token))).status_code
                   for token in tokens]
        reviewer.down = True
        failed = await http.get(TASKS, headers=bearer(sa_token("outage")))
    assert answers == [200, 401, 401, 200, 401, 401, 401]
    assert failed.status_code == 503
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert "TokenReview failed (HTTP 503)" in logged, "the capture sees the sources' lines"
    for token in [*tokens, sa_token("outage")]:
        assert token not in logged
        assert token.rsplit(".", 1)[1] not in logged, "nor a token's signature"


# --- The manager's permission to review tokens ---------------------------------------------

COMPONENT = Path("manifests/k8s/components/tokenreview")


def test_the_tokenreview_component_grants_create_on_tokenreviews_alone() -> None:
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in COMPONENT.glob("*.yaml") if p.name != "kustomization.yaml")
    found = {}
    for name in kustomization["resources"]:
        obj = yaml.safe_load((COMPONENT / name).read_text())
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        found[obj["kind"]] = obj
    role, binding = found["ClusterRole"], found["ClusterRoleBinding"]
    assert role["rules"] == [{"apiGroups": ["authentication.k8s.io"],
                              "resources": ["tokenreviews"], "verbs": ["create"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": role["metadata"]["name"]}
    (account,) = [o for o in manifest_objects() if o["kind"] == "ServiceAccount"]
    assert binding["subjects"] == [{"kind": "ServiceAccount",
                                    "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]


def test_the_tokenreview_component_passes_checkov(tmp_path: Path) -> None:
    assert failed_checks(COMPONENT) == []
    for overlay in OVERLAYS:  # as an overlay that adds the component renders
        (tmp_path / overlay).mkdir()
        added = [yaml.safe_load((COMPONENT / name).read_text()) for name in
                 yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())["resources"]]
        (tmp_path / overlay / "rendered.yaml").write_text(
            yaml.safe_dump_all([*rendered(overlay), *added]))
        assert failed_checks(tmp_path / overlay) == [], overlay
