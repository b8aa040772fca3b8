"""Where the OpenAPI document and its docs page are served: ``/api/v1/schema``.

The page is Swagger UI from the files the ``swagger-ui-py`` package ships, served by this
app under ``/api/v1/schema/assets/``: it renders with no network beyond the API itself.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Annotated

import swagger_ui
from litestar import Request, Router, get
from litestar.datastructures import State
from litestar.exceptions import NotFoundException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin
from litestar.params import PathParameter
from litestar.response import File

from api.openapi import complete, operation_id
from ledger.jsonvalue import JSONObject
from ledger.version import VERSION

SCHEMA_PATH = "/api/v1/schema"
DOCUMENT_PATH = f"{SCHEMA_PATH}/openapi.json"
ASSETS_PATH = f"{SCHEMA_PATH}/assets"
ASSETS = {"swagger-ui.css": "text/css",
          "swagger-ui-bundle.js": "text/javascript",
          "swagger-ui-standalone-preset.js": "text/javascript",
          "favicon-32x32.png": "image/png"}
"""The files of the page (from the package's ``static/`` folder) and their media types."""


@cache
def assets_dir() -> Path:
    """The folder of Swagger UI's files inside the installed package."""
    return Path(swagger_ui.__file__).parent / "static"


class CompletedJson(JsonRenderPlugin):
    """The OpenAPI JSON, completed once with what the routes read by hand."""

    def __init__(self) -> None:
        super().__init__(path="/openapi.json")
        self._document: JSONObject | None = None

    def render(self, request: Request[object, object, State],
               openapi_schema: JSONObject) -> bytes:
        """The completed document, as JSON."""
        if self._document is None:
            self._document = complete(request.app, openapi_schema)
        return self.render_json(request, self._document)


class LocalSwaggerUI(OpenAPIRenderPlugin):
    """Swagger UI whose page names only this app's URLs."""

    def __init__(self) -> None:
        super().__init__(path=["/", "/swagger"], favicon="", style="")

    def render(self, request: Request[object, object, State],
               openapi_schema: JSONObject) -> bytes:
        """The HTML page."""
        return page().encode()

    def receive_router(self, router: Router) -> None:
        """Serve the page's files next to it."""
        router.register(asset)


@get("/assets/{name:str}", include_in_schema=False, sync_to_thread=False)
def asset(name: Annotated[str, PathParameter(max_length=64)]) -> File:
    """One of the page's files; nothing else of the package is served."""
    if name not in ASSETS:
        raise NotFoundException("no such asset")
    return File(assets_dir() / name, media_type=ASSETS[name], content_disposition_type="inline",
                headers={"cache-control": "public, max-age=86400"})


@cache
def page() -> str:
    """The docs page: Swagger UI on the served document."""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>svc API {VERSION}</title>
  <link rel="icon" type="image/png" href="{ASSETS_PATH}/favicon-32x32.png">
  <link rel="stylesheet" href="{ASSETS_PATH}/swagger-ui.css">
  <style>body {{ margin: 0 }}</style>
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="{ASSETS_PATH}/swagger-ui-bundle.js"></script>
  <script src="{ASSETS_PATH}/swagger-ui-standalone-preset.js"></script>
  <script>
    window.ui = SwaggerUIBundle({{
      url: "{DOCUMENT_PATH}", dom_id: "#swagger-ui", deepLinking: true,
      presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
      layout: "StandaloneLayout", validatorUrl: null
    }});
  </script>
</body>
</html>
"""


DESCRIPTION = """\
svc queues coding-agent tasks and assembles the runtime each attempt runs in.

**Flow.** Submit a task (`submitTask`, 201 with `Location`), dispatch it (`dispatchTask`),
follow it with `refreshTask` or `showTask` until it leaves `running`, read its attempts
(`listAttempts`) and its session's output (`sessionOutput`), record a judge's verdict
(`judgeAttempt`), retry a failed or blocked task under a new idempotency key (`retryTask`),
and watch the queue (`queueStats`, `commanderView`).

**Credentials.** Every operation but health takes `Authorization: Bearer <API key>`; the
runner protocol (`/api/v1/runner/…`) takes the runner job's own token.

**Dry runs.** Every mutation takes `?dryRun=true` and then answers 200 with a `DryRun`
(`mutation` is false, `plan` says what would change) and changes nothing.

**Errors.** Every failure answers `{"error": {"code", "message", "details"}}`; `code` is
stable kebab-case and the status follows from it. Strings never hold NUL characters.

**Polling.** Lists carry `changeSeq`: pass it back as `updatedAfter` (tasks) or the last
`seq` as `afterSeq` (session lines) to read only what changed.
"""


def openapi_config() -> OpenAPIConfig:
    """The document at ``/api/v1/schema/openapi.json``; the docs page at ``/api/v1/schema``
    (and ``/api/v1/schema/swagger``)."""
    return OpenAPIConfig(title="svc", version=VERSION, path=SCHEMA_PATH, description=DESCRIPTION,
                         operation_id_creator=operation_id,
                         render_plugins=[LocalSwaggerUI(), CompletedJson()])
