"""The deployment manifest format (SPEC 2.12): schema, validator, CLI and API."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from datetime import UTC
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from manifests.model import ServiceId
from manifests.schema import DEFAULT_ENDPOINT, SCHEMA_FILE, committed, generate, render
from manifests.validate import parse, violations
from tests.conftest import svc_executable

EXAMPLES = sorted(Path("manifests/examples").glob("*.yaml"))
SERVICE_IDS = list(ServiceId.__args__)  # type: ignore[attr-defined]


def valid() -> dict[str, Any]:
    return {
        "manifestVersion": "v1", "environment": "dev", "commitId": "abcdef1",
        "profiles": {"dev": {"name": "dev", "enabled": True}},
        "services": [{"serviceId": "lab-agent-mgr", "image": "img", "namespace": "svc-v01",
                      "healthPath": "/api/v1/health", "profile": "dev"}],
    }


def test_the_committed_schema_is_generated_from_the_model() -> None:
    assert SCHEMA_FILE.read_text() == render(generate(DEFAULT_ENDPOINT)), (
        "regenerate with: svc manifest schema > manifests/deployment-manifest.schema.json")
    jsonschema.Draft202012Validator.check_schema(committed())


def test_the_examples_validate() -> None:
    assert EXAMPLES
    result = subprocess.run([svc_executable(), "manifest", "validate", *map(str, EXAMPLES)],
                            capture_output=True, text=True,
                            env={"SVC_DEPLOY_ENDPOINT": DEFAULT_ENDPOINT})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": valid") == len(EXAMPLES)


def _set(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    mutated = copy.deepcopy(document)
    target: Any = mutated
    for part in path[:-1]:
        target = target[part]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return mutated


class _Delete:
    """Marks a field to remove; its repr is stable (test ids must match across xdist workers)."""

    def __repr__(self) -> str:
        return "<deleted>"


_DELETE = _Delete()
BROKEN: list[tuple[tuple[Any, ...], Any, str]] = [
    (("manifestVersion",), "1", "$.manifestVersion"),
    (("manifestVersion",), _DELETE, "$"),
    (("environment",), "prod", "$.environment"),
    (("commitId",), "ABCDEF1", "$.commitId"),
    (("commitId",), "abc12", "$.commitId"),
    (("commitId",), "a" * 41, "$.commitId"),
    (("namespace",), "", "$.namespace"),
    (("namespace",), "a" * 64, "$.namespace"),
    (("namespace",), "Svc_v01", "$.namespace"),
    (("namespace",), "-svc", "$.namespace"),
    (("endpoint",), "https://other.invalid", "$.endpoint"),
    (("profiles",), _DELETE, "$"),
    (("profiles", "dev"), _DELETE, "$.profiles"),
    (("profiles", "staging"), {"name": "dev", "enabled": True}, "$.profiles"),
    (("profiles", "dev", "name"), "test", "$.profiles.dev.name"),
    (("profiles", "dev", "enabled"), "yes", "$.profiles.dev.enabled"),
    (("profiles", "dev", "owner"), "me", "$.profiles.dev"),
    (("services",), [], "$.services"),
    (("services", 0, "serviceId"), "lab-unknown", "$.services[0].serviceId"),
    (("services", 0, "image"), "", "$.services[0].image"),
    (("services", 0, "namespace"), "", "$.services[0].namespace"),
    (("services", 0, "healthPath"), "health", "$.services[0].healthPath"),
    (("services", 0, "profile"), "qa", "$.services[0].profile"),
    (("services", 0, "replicas"), -1, "$.services[0].replicas"),
    (("services", 0, "replicas"), 1.5, "$.services[0].replicas"),
    (("services", 0, "env"), {"A": 1}, "$.services[0].env.A"),
    (("services", 0, "ports"), [80], "$.services[0]"),
    (("createdAt",), "yesterday", "$.createdAt"),
    (("extra",), True, "$"),
]


@pytest.mark.parametrize(("path", "value", "where"), BROKEN,
                         ids=[f"{'.'.join(map(str, p))}={v!r}"[:60] for p, v, _ in BROKEN])
def test_each_constraint_broken_on_its_own_is_caught(path: tuple[Any, ...], value: Any,
                                                     where: str) -> None:
    document = _set({**valid(), "namespace": "svc-v01"}, path, value)
    found = violations(document, DEFAULT_ENDPOINT)
    assert {v.path for v in found} == {where}, found
    assert found[0].message and "\n" not in found[0].message
    with pytest.raises(msgspec.ValidationError):
        parse(document, DEFAULT_ENDPOINT)


text = st.text(max_size=20)
profile = st.fixed_dictionaries(
    {"name": st.sampled_from(["dev", "prod"]), "enabled": st.booleans()},
    optional={"namespace": text, "endpoint": text, "notes": text})
service = st.fixed_dictionaries(
    {"serviceId": st.sampled_from(SERVICE_IDS), "image": st.text(min_size=1, max_size=30),
     "namespace": st.text(min_size=1, max_size=20),
     "healthPath": st.from_regex(r"\A/[A-Za-z0-9/_-]{0,15}\Z"),
     "profile": st.sampled_from(["dev", "prod"])},
    optional={"replicas": st.integers(0, 1000),
              "env": st.dictionaries(text, text, max_size=3)})
manifests = st.fixed_dictionaries(
    {"manifestVersion": st.from_regex(r"\Av[0-9]{1,4}\Z"), "environment": st.just("dev"),
     "commitId": st.from_regex(r"\A[a-f0-9]{7,40}\Z"),
     "profiles": st.fixed_dictionaries({"dev": profile}, optional={"prod": profile}),
     "services": st.lists(service, min_size=1, max_size=4)},
    optional={"namespace": st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z"),
              "endpoint": st.just(DEFAULT_ENDPOINT),
              "createdAt": st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat())})
INVALID_VALUES: dict[str, list[Any]] = {
    "manifestVersion": ["1", "v", "v1.0", 1], "environment": ["prod", ""],
    "commitId": ["abc", "ABCDEFG", "g" * 7], "namespace": ["", "a" * 64, "UP"],
    "endpoint": ["http://x.invalid"], "profiles": [{}, {"prod": None}], "services": [[], {}],
    "createdAt": ["2026-13-01T00:00:00Z", "now"],
}


def _schema_accepts(document: Any) -> bool:
    validator = jsonschema.Draft202012Validator(
        committed(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    return validator.is_valid(document)


def _model_accepts(document: Any) -> bool:
    try:
        parse(document, DEFAULT_ENDPOINT)
    except msgspec.ValidationError:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(manifests)
def test_generated_valid_manifests_are_accepted_by_both(document: dict[str, Any]) -> None:
    assert _model_accepts(document)
    assert _schema_accepts(document)
    assert violations(document, DEFAULT_ENDPOINT) == []


@settings(max_examples=150, deadline=None)
@given(manifests, st.data())
def test_single_field_mutations_are_rejected_by_both(document: dict[str, Any],
                                                     data: st.DataObject) -> None:
    field = data.draw(st.sampled_from(sorted(INVALID_VALUES)))
    mutated = {**document, field: data.draw(st.sampled_from(INVALID_VALUES[field]))}
    assert not _model_accepts(mutated)
    assert not _schema_accepts(mutated)
    assert violations(mutated, DEFAULT_ENDPOINT)


@settings(max_examples=100, deadline=None)
@given(manifests, st.data())
def test_an_unknown_field_at_any_level_is_rejected(document: dict[str, Any],
                                                   data: st.DataObject) -> None:
    where = data.draw(st.sampled_from(["top", "profile", "service"]))
    target = {"top": document, "profile": document["profiles"]["dev"],
              "service": document["services"][0]}[where]
    target["unexpected"] = 1
    assert not _model_accepts(document)
    assert not _schema_accepts(document)


def test_the_cli_reports_every_violation_and_exit_codes(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**valid(), "commitId": "XYZ", "environment": "prod"}))
    result = subprocess.run([svc_executable(), "manifest", "validate", str(broken)],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert "2 violation(s)" in result.stdout
    assert "$.commitId: 'commitId' must match ^[a-f0-9]{7,40}$, got 'XYZ'" in result.stdout
    assert "$.environment: 'environment' must be one of dev" in result.stdout
    missing = subprocess.run([svc_executable(), "manifest", "validate",
                              str(tmp_path / "none.yaml")], capture_output=True, text=True)
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    schema = subprocess.run([svc_executable(), "manifest", "schema"], capture_output=True,
                            text=True, env={"SVC_DEPLOY_ENDPOINT": DEFAULT_ENDPOINT})
    assert schema.stdout == SCHEMA_FILE.read_text()


async def test_the_api_validates_manifests(client: Any) -> None:
    good = await client.post("/api/v1/manifests/validate", json=valid())
    assert good.status_code == 200 and good.json() == {"valid": True, "violations": []}
    bad = await client.post("/api/v1/manifests/validate", json={**valid(), "services": []})
    assert bad.json()["valid"] is False
    assert bad.json()["violations"][0]["path"] == "$.services"
    garbage = await client.post("/api/v1/manifests/validate", content=b"{nope")
    assert garbage.status_code == 400


@pytest.mark.parametrize(("field", "value"), [
    ("manifestVersion", "v1\n"), ("commitId", "abcdef1\n"), ("namespace", "svc\n"),
])
def test_a_final_newline_does_not_satisfy_an_anchored_pattern(field: str, value: str) -> None:
    document = {**valid(), field: value}
    found = violations(document, DEFAULT_ENDPOINT)
    assert [v.path for v in found] == [f"$.{field}"], found
    assert not _model_accepts(document)
    assert violations({**valid(), field: value.rstrip("\n")}, DEFAULT_ENDPOINT) == []


def test_a_yaml_block_scalar_keeps_its_newline_and_is_refused(tmp_path: Path) -> None:
    manifest = tmp_path / "block.yaml"
    manifest.write_text(
        "manifestVersion: v1\nenvironment: dev\ncommitId: |\n  abcdef1\n"
        "profiles:\n  dev: {name: dev, enabled: true}\n"
        "services:\n  - {serviceId: lab-agent-mgr, image: img, namespace: svc-v01,\n"
        "     healthPath: /api/v1/health, profile: dev}\n")
    result = subprocess.run([svc_executable(), "manifest", "validate", str(manifest)],
                            capture_output=True, text=True)
    assert result.returncode == 1, result.stdout
    assert "$.commitId: 'commitId' must match ^[a-f0-9]{7,40}$, got 'abcdef1\\n'" \
        in result.stdout


def test_the_published_schema_anchors_at_the_end_of_input() -> None:
    patterns = re.findall(r'"pattern": "([^"]*)"', SCHEMA_FILE.read_text())
    assert patterns and not any(p.endswith("\\\\Z") for p in patterns)
    assert {"^v[0-9]+$", "^[a-f0-9]{7,40}$"} <= set(patterns)
