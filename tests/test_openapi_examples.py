"""The document's examples are real: every example of a body or of a success answer is valid
against its own schema, the core operations show one; the document describes the API; the
manifest validator documents the deployment manifest as its body."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema

from manifests.schema import committed
from tests.test_openapi_answers import document
from tests.test_openapi_client_ready import operations

CORE = {"submitTask", "listTasks", "showTask", "dispatchTask", "refreshTask", "cancelTask",
        "listAttempts", "retryTask", "judgeAttempt", "queueStats", "commanderView",
        "sessionOutput", "sessionTrace", "checkHealth", "validateManifest", "submitTaskBatch"}
"""Operations whose success answer shows an example."""


def media_validator(doc: dict[str, Any], schema: Any) -> jsonschema.Draft202012Validator:
    """A validator of a media ``schema`` of ``doc`` (its ``$ref``s resolved in ``doc``)."""
    return jsonschema.Draft202012Validator(
        {**schema, "components": doc["components"]},
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def examples_of(media: dict[str, Any]) -> list[Any]:
    """The example values a media object shows."""
    shown = [media["example"]] if "example" in media else []
    return shown + [example["value"] for example in media.get("examples", {}).values()]


async def test_every_example_is_valid_against_its_schema(client: httpx.AsyncClient) -> None:
    doc = await document(client)
    checked = 0
    for method, path, operation in operations(doc):
        medias = [("body", operation.get("requestBody", {}).get("content", {}))]
        medias += [(status, answer.get("content", {}))
                   for status, answer in operation["responses"].items()]
        for where, content in medias:
            media = content.get("application/json")
            if media is None:
                continue
            valid = media_validator(doc, media["schema"])
            for value in examples_of(media):
                errors = [f"{list(e.absolute_path)}: {e.message}"
                          for e in valid.iter_errors(value)]
                assert errors == [], (method, path, where, errors)
                checked += 1
    assert checked > 100


async def test_the_core_operations_show_a_success_example(client: httpx.AsyncClient) -> None:
    doc = await document(client)
    shown = {}
    for _, _, operation in operations(doc):
        success = [answer["content"]["application/json"]
                   for status, answer in operation["responses"].items()
                   if status.startswith("2") and "content" in answer]
        shown[operation["operationId"]] = bool(success) and all(
            examples_of(media) for media in success)
    assert {name: shown[name] for name in CORE} == dict.fromkeys(CORE, True)
    for name in ("dispatchTask", "retryTask", "judgeAttempt"):
        (path, method), = [(p, m) for m, p, o in operations(doc) if o["operationId"] == name]
        answer = doc["paths"][path][method]["responses"]
        ok = answer.get("200", answer.get("201"))["content"]["application/json"]
        assert "DryRun" in ok["examples"], name


async def test_the_document_describes_the_api(client: httpx.AsyncClient) -> None:
    info = (await document(client))["info"]
    assert info["title"] == "svc" and len(info["description"]) > 400
    for name in ("submitTask", "dryRun", "changeSeq", "Authorization"):
        assert name in info["description"], name


async def test_the_manifest_validator_documents_the_manifest_body(
        client: httpx.AsyncClient) -> None:
    doc = await document(client)
    body = doc["paths"]["/api/v1/manifests/validate"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    assert {"$ref": "#/components/schemas/DeploymentManifest"} in schema["anyOf"]
    manifest = doc["components"]["schemas"]["DeploymentManifest"]
    published = committed()["$defs"]["DeploymentManifest"]  # type: ignore[index]
    assert set(manifest["properties"]) == set(published["properties"])
    assert manifest["required"] == published["required"]
    example = body["content"]["application/json"]["example"]
    jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/DeploymentManifest",
         "components": doc["components"]}).validate(example)
    answer = await client.post("/api/v1/manifests/validate", json=example)
    assert answer.status_code == 200 and answer.json() == {"valid": True, "violations": []}
