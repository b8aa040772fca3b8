"""``POST /api/v1/manifests/validate``: check a deployment manifest (JSON body)."""

from __future__ import annotations

import msgspec
from litestar import Litestar, post
from litestar.status_codes import HTTP_200_OK

from api import examples
from api.access import role
from api.body import read_body
from api.errors import WRITE_ERRORS
from api.openapi import ANY_JSON, body
from api.params import HttpRequest
from ledger.jsonvalue import JSONObject
from manifests.schema import generate
from manifests.validate import violations


def published_schema(app: Litestar) -> JSONObject:
    """The manifest's JSON Schema with this server's endpoint (``SVC_DEPLOY_ENDPOINT``)."""
    schema: JSONObject = msgspec.to_builtins(generate(app.state.deploy_endpoint))
    return schema


class ManifestViolation(msgspec.Struct):
    """One broken rule."""

    path: str
    message: str


class ManifestReport(msgspec.Struct):
    """Whether the manifest is valid, and every violation."""

    valid: bool
    violations: list[ManifestViolation]


@post("/api/v1/manifests/validate", status_code=HTTP_200_OK, tags=["manifests"],
      responses=WRITE_ERRORS, opt=body(
          ANY_JSON, examples.MANIFEST,
          description="Any JSON value; a deployment manifest (SPEC 2.12) is valid when it "
                      "matches manifests/deployment-manifest.schema.json (shown here with "
                      "this server's endpoint).",
          documented=published_schema) | role("reader"))
async def validate_manifest(request: HttpRequest) -> ManifestReport:
    """Validate the manifest in the body; a malformed body is ``invalid-request``."""
    document = await read_body(request, object)
    endpoint: str = request.app.state.deploy_endpoint  # SVC_DEPLOY_ENDPOINT (api.settings)
    found = [ManifestViolation(v.path, v.message) for v in violations(document, endpoint)]
    return ManifestReport(valid=not found, violations=found)
