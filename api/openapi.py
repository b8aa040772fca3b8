"""The OpenAPI document: Litestar's, completed with what the routes read by hand.

Handlers read their bodies strictly (``api.body``), so Litestar cannot see them; each route
names its body with :func:`body` in ``opt`` and :func:`complete` adds the ``requestBody``
from the msgspec type, the 200 a dry run answers where the operation creates (201), and
integer bounds written as integers.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec
from litestar import Litestar, post
from litestar.enums import ParamType
from litestar.handlers import HTTPRouteHandler
from litestar.openapi import ResponseSpec
from litestar.params import ParameterKwarg
from litestar.routes import HTTPRoute
from litestar.status_codes import HTTP_200_OK

from api.access import is_open, runner_access
from api.answer_examples import attach
from api.answer_shapes import DESCRIPTIONS, TYPED
from api.error_examples import examples_for
from api.errors import ERROR_CODES, error_description
from api.location import Located
from ledger.jsonvalue import JSONObject, JSONValue

REF_TEMPLATE = "#/components/schemas/{name}"
NO_NUL = "^[^\\u0000]*$"
"""Every string of a body: ``api.body.check_strings`` refuses NUL characters anywhere."""
JSON_VALUE = "JsonValue"
JSON_OBJECT = "JsonObject"
FREE_FORM: dict[str, JSONObject] = {
    JSON_VALUE: {"description": "Any JSON value without NUL characters in its strings and keys.",
                 "pattern": NO_NUL, "items": {"$ref": REF_TEMPLATE.format(name=JSON_VALUE)},
                 "propertyNames": {"pattern": NO_NUL},
                 "additionalProperties": {"$ref": REF_TEMPLATE.format(name=JSON_VALUE)}},
    JSON_OBJECT: {"description": "A JSON object without NUL characters in its keys and strings.",
                  "type": "object", "propertyNames": {"pattern": NO_NUL},
                  "additionalProperties": {"$ref": REF_TEMPLATE.format(name=JSON_VALUE)}},
}
"""Free-form JSON. ``JsonValue`` names no ``type``: each keyword applies to the values of its
own kind (``pattern`` to strings, ``items`` to arrays, ``propertyNames`` and
``additionalProperties`` to objects), so it states the NUL rule at every depth without a
self-referencing union, which client generators cannot build (they read it as any value)."""
SECURITY_SCHEMES: JSONObject = {
    "apiKey": {"type": "http", "scheme": "bearer",
               "description": "An API key (svck_…), sent as Authorization: Bearer <key>. The "
                              "first admin key is written to ${SVC_DATA_DIR}/admin.key; "
                              "`svc auth key create` (or POST /api/v1/auth/keys) makes "
                              "others. When the operator configures them, a Kubernetes "
                              "ServiceAccount token (audience svc) or an OIDC JWT of the "
                              "configured issuer is sent the same way."},
    "runnerToken": {"type": "http", "scheme": "bearer",
                    "description": "A runner job's own token (the runner protocol, DESIGN 9): "
                                   "valid for that job alone, until it ends."},
}
OPERATION_ID_PATTERN = "^[a-z]+(?:[A-Z][a-z0-9]*)*$"
"""An operation id: verb + noun in camelCase (``submitTask``, ``listSessions``)."""
BODY_KEY = "svc_body"
OK_KEY = "svc_ok_200"
ANY_JSON = object
"""A body of any JSON value (the manifest validator reports what is wrong with it)."""


@dataclass(frozen=True)
class Body:
    """What a route reads from its body: the wire type, whether an empty body is refused,
    and an example the API accepts."""

    kind: type
    required: bool
    example: JSONValue
    description: str = ""
    empty_object: bool = False
    documented: Callable[[Litestar], JSONObject] | None = None
    """For a body of any JSON: the JSON Schema (with its ``$defs``) of the document the
    route looks for, shown as the first choice of the body."""


def body(kind: type, example: JSONValue, *, required: bool = True, description: str = "",
         empty_object: bool = False,
         documented: Callable[[Litestar], JSONObject] | None = None) -> dict[str, object]:
    """``opt`` of a route that reads a JSON body of ``kind`` (or, with ``empty_object``,
    ``{}``; with ``documented``, any JSON, the schema of what it looks for shown)."""
    return {BODY_KEY: Body(kind, required, example, description, empty_object, documented)}


def command(path: str, kind: type[object], example: JSONValue,
            responses: dict[int, ResponseSpec], *, required: bool = True,
            access: dict[str, object] | None = None) -> post:
    """``@post`` of a route answering 200 that reads a JSON body of ``kind``; ``access``:
    who may call it (``api.access``)."""
    return post(path, status_code=HTTP_200_OK, responses=responses,
                opt=body(kind, example, required=required) | (access or {}))


def operation_id(handler: HTTPRouteHandler, _method: object, _path: object) -> str:
    """The operation id of a route: its handler's name (``verb_noun``) in camelCase, so a
    generated client calls ``submitTask``; the handler names are the one place ids come
    from, and the document refuses two equal ones (:func:`complete`)."""
    return camel(handler.handler_name)


def also_ok(description: str) -> dict[str, object]:
    """``opt`` of a route answering 201 that also answers 200 (dry run, replay)."""
    return {OK_KEY: description}


def complete(app: Litestar, document: JSONObject) -> JSONObject:
    """A copy of Litestar's ``document`` with every body, extra 200 and exact integer bound."""
    done = copy.deepcopy(document)
    _member(done, "components")["securitySchemes"] = copy.deepcopy(SECURITY_SCHEMES)
    schemas = _member(_member(done, "components"), "schemas")
    paths = _member(done, "paths")
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        item = paths.get(route.path_format)
        if not isinstance(item, dict):
            continue
        for handler in route.route_handlers:
            for method in handler.http_methods:
                operation = item.get(method.lower())
                if isinstance(operation, dict):
                    _complete_operation(operation, handler.opt, schemas, app)
                    _exact_bounds(operation, handler)
                    _secure(operation, handler)
                    _locate(operation, handler)
                    _error_examples(operation)
                    attach(_member(operation, "responses"))
    _unique_ids(paths)
    _error_codes(schemas)
    _typed_answers(schemas)
    _tagged_dry_run(schemas)
    done["paths"] = {document_path(path): _camel_parameters(item)
                     for path, item in paths.items()}
    return done


def camel(name: str) -> str:
    """``task_id`` → ``taskId``: the spelling of every field and parameter of the API."""
    head, *rest = name.split("_")
    return head + "".join(word.capitalize() for word in rest)


def document_path(path: str) -> str:
    """``/tasks/{task_id}`` → ``/tasks/{taskId}``: the URLs are the same, only the names of
    their parameters change (the routes, metric labels and logs keep Litestar's)."""
    return re.sub(r"\{([a-z0-9_]+)\}", lambda found: "{" + camel(found[1]) + "}", path)


def _camel_parameters(item: JSONValue) -> JSONValue:
    """A path item whose path parameters are named in camelCase."""
    if not isinstance(item, dict):
        return item
    for operation in item.values():
        listed = operation.get("parameters") if isinstance(operation, dict) else None
        for parameter in listed if isinstance(listed, list) else ():
            if isinstance(parameter, dict) and parameter.get("in") == "path":
                parameter["name"] = camel(str(parameter["name"]))
    return item


def _unique_ids(paths: JSONObject) -> None:
    """Refuse a document where two operations share an id (a client would lose one)."""
    seen: set[str] = set()
    for item in paths.values():
        for operation in item.values() if isinstance(item, dict) else ():
            name = operation.get("operationId") if isinstance(operation, dict) else None
            if isinstance(name, str):
                if name in seen:
                    raise ValueError(f"two OpenAPI operations have the id {name}")
                seen.add(name)


def _locate(operation: JSONObject, handler: HTTPRouteHandler) -> None:
    """The ``Location`` header of a 201 answer, from the route's :class:`Located` hook."""
    hook = handler.after_request
    created = _member(operation, "responses").get("201")
    if isinstance(hook, Located) and isinstance(created, dict):
        created["headers"] = {"Location": {
            "description": f"The URL of what was created: {hook.template}",
            "required": True, "schema": {"type": "string", "format": "uri-reference"}}}


def _error_codes(schemas: JSONObject) -> None:
    """The error envelope's ``code``: one of the service's codes (``api.errors``)."""
    error = schemas.get("ErrorBody")
    properties = error.get("properties") if isinstance(error, dict) else None
    if isinstance(properties, dict):
        codes: list[JSONValue] = [*sorted(ERROR_CODES)]
        properties["code"] = {"type": "string", "enum": codes,
                              "description": "Stable kebab-case; the status follows from it "
                                             "(a refusal's failure kind: 400 unless listed)."}


def _error_examples(operation: JSONObject) -> None:
    """Each error answer's examples: the envelope of every code answered with its status."""
    for status, answer in _member(operation, "responses").items():
        content = answer.get("content") if isinstance(answer, dict) else None
        media = content.get("application/json") if isinstance(content, dict) else None
        if status[0] in "45" and isinstance(media, dict):
            media["examples"] = dict[str, JSONValue](examples_for(int(status)))


def _typed_answers(schemas: JSONObject) -> None:
    """Each nested object an answer carries as plain JSON, documented with its shape
    (``api.answer_shapes``), null where it may be null."""
    schemas.update(FREE_FORM)
    for (name, field), kind in TYPED.items():
        answer = schemas.get(name)
        properties = answer.get("properties") if isinstance(answer, dict) else None
        if not isinstance(properties, dict) or field not in properties:
            raise ValueError(f"OpenAPI schema {name} has no property {field}")
        if isinstance(kind, str):
            shape: JSONObject = {"$ref": REF_TEMPLATE.format(name=kind)}
        else:
            (shape,), components = msgspec.json.schema_components(
                [kind], ref_template=REF_TEMPLATE)
            _register(schemas, components)
        described = DESCRIPTIONS.get((name, field))
        if described:
            shape = ({"allOf": [shape], "description": described} if "$ref" in shape
                     else {**shape, "description": described})
        nullable = "null" in str(_member(properties, field).get("oneOf", ""))
        properties[field] = {"oneOf": [shape, {"type": "null"}]} if nullable else shape


def _tagged_dry_run(schemas: JSONObject) -> None:
    """A dry run's answer is told apart by its ``mutation`` member, always false, which no
    other answer has: a generator trying the answers of a union finds the one it is."""
    dry = schemas.get("DryRun")
    properties = dry.get("properties") if isinstance(dry, dict) else None
    if isinstance(dry, dict) and isinstance(properties, dict):
        properties["mutation"] = {
            "type": "boolean", "const": False,
            "description": "Always false: the answer of a call with dryRun=true, which "
                           "changed nothing. No other answer has this member."}
        dry["additionalProperties"] = False


def _register(schemas: JSONObject, components: Mapping[str, JSONValue], *,
              text_rules: bool = True) -> None:
    """Add ``components`` to the document's, strings without NUL (a body's rule) unless
    ``text_rules`` is off; refuse a second, different schema under a name already taken."""
    for name, component in components.items():
        component = _text_rules(component) if text_rules else component
        if schemas.get(name, component) != component:
            raise ValueError(f"two different OpenAPI schemas are named {name}")
        schemas[name] = component


def _member(parent: JSONObject, key: str) -> JSONObject:
    """The object ``parent[key]``, added empty when absent."""
    child = parent.setdefault(key, {})
    if not isinstance(child, dict):
        raise ValueError(f"OpenAPI member {key} is not an object")
    return child


def _complete_operation(operation: JSONObject, opt: Mapping[str, object],
                        schemas: JSONObject, app: Litestar) -> None:
    spec = opt.get(BODY_KEY)
    if isinstance(spec, Body):
        operation["requestBody"] = _request_body(spec, schemas, app)
    ok = opt.get(OK_KEY)
    responses = _member(operation, "responses")
    created = responses.get("201")
    if isinstance(ok, str) and isinstance(created, dict):
        responses["200"] = {**copy.deepcopy(created), "description": ok}


def _request_body(spec: Body, schemas: JSONObject, app: Litestar) -> JSONObject:
    schemas.update(FREE_FORM)
    if spec.kind is ANY_JSON:
        schema: JSONObject = {"$ref": REF_TEMPLATE.format(name=JSON_VALUE)}
        if spec.documented is not None:
            schema = {"anyOf": [_json_schema(spec.documented(app), schemas), schema]}
    else:
        (schema,), components = msgspec.json.schema_components(
            [spec.kind], ref_template=REF_TEMPLATE)
        _register(schemas, components)
    if spec.empty_object:
        schema = {"anyOf": [schema, {"type": "object", "maxProperties": 0}]}
    media: JSONObject = {"schema": schema, "example": spec.example}
    answer: JSONObject = {"required": spec.required, "content": {"application/json": media}}
    if spec.description:
        answer["description"] = spec.description
    elif not spec.required:
        answer["description"] = "May be empty: every field is optional."
    return answer


def _json_schema(schema: JSONObject, schemas: JSONObject) -> JSONObject:
    """A reference to the root of a JSON Schema document (``{"$ref": "#/$defs/Root"}``), its
    ``$defs`` added to the document's components."""
    text = msgspec.json.encode(schema).decode().replace('"#/$defs/', f'"{REF_TEMPLATE[:-6]}')
    moved: JSONObject = msgspec.json.decode(text)
    defs = moved.get("$defs")
    _register(schemas, defs if isinstance(defs, dict) else {}, text_rules=False)
    return {"$ref": str(moved["$ref"])}


def _text_rules(node: JSONValue) -> JSONValue:
    """The body rules no msgspec type states: no NUL in a string, and a free-form object
    (``{"type": "object"}``, bounded or not) holds JSON without NUL."""
    if isinstance(node, list):
        return [_text_rules(child) for child in node]
    if not isinstance(node, dict):
        return node
    if node == {"type": "object"}:
        return {"$ref": REF_TEMPLATE.format(name=JSON_OBJECT)}
    done = {key: _text_rules(value) for key, value in node.items()}
    if done.get("type") == "object" and not {"properties", "additionalProperties"} & set(done):
        done |= {"propertyNames": {"pattern": NO_NUL},
                 "additionalProperties": {"$ref": REF_TEMPLATE.format(name=JSON_VALUE)}}
    if done.get("type") == "string" and "pattern" not in done and "enum" not in done:
        done["pattern"] = NO_NUL
    return done


def _secure(operation: JSONObject, handler: HTTPRouteHandler) -> None:
    """The credentials an operation takes (``security``) and its 401/403 answers, from what
    the route declares (``api.access``); an open operation takes none."""
    if is_open(handler):
        return
    runner = runner_access(handler)
    if runner == "only":
        operation["security"] = [{"runnerToken": []}]
        statuses: tuple[int, ...] = (401,)
    else:
        schemes: list[JSONValue] = [{"apiKey": []}]
        operation["security"] = schemes + ([{"runnerToken": []}] if runner else [])
        statuses = (401, 403)
    responses = _member(operation, "responses")
    envelope = next((answer["content"] for code, answer in responses.items()
                     if code.startswith("4") and isinstance(answer, dict)
                     and "content" in answer), None)
    for status in statuses:
        if str(status) not in responses and envelope is not None:
            responses[str(status)] = {"description": error_description(status),
                                      "content": copy.deepcopy(envelope)}


BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def _exact_bounds(operation: JSONObject, handler: HTTPRouteHandler) -> None:
    """Litestar writes ``ge``/``le`` as floats (``2**62`` becomes ``4.6e18``); each
    parameter's bounds are written back exactly as the code compares them."""
    listed = operation.get("parameters")
    parameters = [p for p in listed if isinstance(p, dict)] if isinstance(listed, list) else []
    documented = {(p["in"], p["name"]): p for p in parameters}
    for field_name, field in handler.parsed_fn_signature.parameters.items():
        kwarg = field.kwarg_definition
        if not isinstance(kwarg, ParameterKwarg):
            continue
        place = getattr(kwarg, "param_type", ParamType.QUERY).value
        name = kwarg.name or kwarg.query or kwarg.header or field_name
        parameter = documented.get((place, name))
        schema = None if parameter is None else parameter.get("schema")
        if not isinstance(schema, dict):
            continue
        for attribute, keyword in BOUNDS.items():
            bound = getattr(kwarg, attribute)
            if bound is not None:
                schema[keyword] = bound
