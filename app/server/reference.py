"""The HTTP API's reference, docs/api.md: Markdown rendered from the OpenAPI description of
``askalike serve`` (what ``/openapi.json`` serves), so that the page says what the routes and the
models of ``app/server`` say, and nothing written twice. ``tests/test_api_docs.py`` fails while
the committed page is not what ``COMMAND`` writes.

The output depends on nothing but the code (and on how the installed FastAPI and pydantic write
OpenAPI: an upgrade may call for a regeneration): endpoints in the order the application declares
them, schemas and statuses sorted, no date and no path."""

from __future__ import annotations

import json
import sys
from typing import Any

COMMAND = "python -m askalike.app.server.reference > docs/api.md"
JSON = "application/json"
_BOUNDS = (("minimum", "maximum", ""), ("minLength", "maxLength", " character"),
           ("minItems", "maxItems", " item"))


def openapi() -> dict[str, Any]:
    """The OpenAPI description of a server with the default settings. Nothing is loaded: a server
    loads its index once it starts (``create_app``'s lifespan), and this one never starts."""
    from askalike.app.server.api import create_app
    from askalike.app.server.settings import ServerSettings

    return create_app(ServerSettings(index_dir="")).openapi()


def markdown(spec: dict[str, Any]) -> str:
    """docs/api.md for the OpenAPI description ``spec``."""
    info = spec["info"]
    blocks = [f"# {info['title']}: HTTP API reference",
              f"Generated from the OpenAPI description of `askalike serve` by `{COMMAND}`; do not "
              "edit it by hand. The limits shown (results, characters, items) are the defaults of "
              "`serve`'s `--max-*` options; a server describes itself, with its own limits, at "
              "`/openapi.json` (browsable at `/docs`). [serve.md](serve.md) introduces the API; "
              "[cli.md](cli.md#askalike-serve-http-api) says how requests are read and what a match is.",
              *_paragraphs(info.get("summary", "")), *_paragraphs(info.get("description", ""))]
    operations = [(method.upper(), path, operation) for path, methods in spec["paths"].items()
                  for method, operation in methods.items()]
    blocks += ["## Endpoints", _table(("method", "path", "what"), [
        (method, f"`{path}`", operation.get("summary", "")) for method, path, operation in operations])]
    for method, path, operation in operations:
        blocks += _operation(spec, method, path, operation)
    blocks.append("## Schemas")
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        blocks += _schema(name, schema)
    return "\n\n".join(blocks) + "\n"


def _operation(spec: dict[str, Any], method: str, path: str, operation: dict[str, Any]) -> list[str]:
    blocks = [f"### `{method} {path}`: {operation.get('summary', '')}",
              *_paragraphs(operation.get("description", ""))]
    schemes = spec.get("components", {}).get("securitySchemes", {})
    blocks += [f"Key: {_scheme(name, schemes[name])}."
               for requirement in operation.get("security", ()) for name in sorted(requirement)]
    if parameters := operation.get("parameters"):
        blocks.append(_table(("parameter", "in", "type", "required", "default", "description"), [
            (f"`{parameter['name']}`", parameter["in"], _parameter_type(parameter["schema"]),
             "yes" if parameter.get("required") else "no", _default(parameter["schema"]),
             parameter.get("description") or parameter["schema"].get("description", ""))
            for parameter in parameters]))
    if body := operation.get("requestBody"):
        schema = body["content"][JSON]["schema"]
        about = "" if "$ref" in schema else schema.get("description", body.get("description", ""))
        blocks.append(f"Body ({'required' if body.get('required') else 'optional'}): {_type(schema)}"
                      + (f": {_cell(about)}" if about else ""))
    blocks.append(_table(("status", "answer", "when"), [
        (status, _type(response["content"][JSON]["schema"]) if JSON in response.get("content", {})
         else "", response.get("description", ""))
        for status, response in sorted(operation["responses"].items())]))
    return blocks


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    blocks = [f"### {name}", *_paragraphs(schema.get("description", ""))]
    if "enum" in schema:
        return [*blocks, f"A {schema.get('type', 'value')}, one of "
                + ", ".join(f"`{value}`" for value in schema["enum"]) + "."]
    required = set(schema.get("required", ()))
    rows = []
    for field, inner in schema.get("properties", {}).items():
        default = _default(inner)
        needed = "yes" if field in required else f"no, default {default}" if default else "no"
        rows.append((f"`{field}`", _type(inner), needed, inner.get("description", "")))
    blocks.append(_table(("field", "type", "required", "description"), rows))
    if schema.get("additionalProperties") is False:
        blocks.append("No other field.")
    return blocks


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A Markdown table, each cell one line (``_cell``)."""
    lines = [head, ("---",) * len(head), *(tuple(map(_cell, row)) for row in rows)]
    return "\n".join(f"| {' | '.join(line)} |" for line in lines)


def _scheme(name: str, scheme: dict[str, Any]) -> str:
    """How a request gives what a security scheme asks for."""
    given = (f"`Authorization: {scheme['scheme'].capitalize()} KEY`" if scheme.get("type") == "http"
             else f"`{name}` ({scheme.get('type')})")
    return f"{given}, {scheme['description']}" if scheme.get("description") else given


def _parameter_type(schema: dict[str, Any]) -> str:
    """A parameter's type: null left out (a parameter left out is its default, never null)."""
    if "anyOf" in schema:
        schema = {**schema, "anyOf": [inner for inner in schema["anyOf"] if inner.get("type") != "null"]}
        if len(schema["anyOf"]) == 1:
            schema = {**schema, **schema.pop("anyOf")[0]}
    return _type(schema)


def _type(schema: dict[str, Any]) -> str:
    """A JSON Schema's type in a few words: a named schema linked, bounds in brackets."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type(inner) for inner in schema["anyOf"])
    kind = schema.get("type")
    if kind is None:
        return "any JSON"
    bounds = _bounds(schema)
    text = f"{kind} ({bounds})" if bounds else kind
    if kind == "array" and "items" in schema:
        return f"{text} of {_type(schema['items'])}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"{text} of {_type(schema['additionalProperties'])}"
    return text


def _bounds(schema: dict[str, Any]) -> str:
    parts = []
    for low, high, unit in _BOUNDS:
        least, most = (_number(schema.get(key)) for key in (low, high))
        units = unit and unit + ("" if (most if most is not None else least) == 1 else "s")
        if least is not None and most is not None:
            parts.append(f"{least} to {most}{units}")
        elif least is not None:
            parts.append(f"at least {least}{units}")
        elif most is not None:
            parts.append(f"at most {most}{units}")
    return ", ".join(parts)


def _number(value: float | None) -> int | float | None:
    """``value`` as written in the reference: 100.0 (pydantic's float bounds) as 100."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _default(schema: dict[str, Any]) -> str:
    """A schema's default as JSON in backticks; "" where it has none (or null: left out)."""
    value = schema.get("default")
    return "" if value is None else f"`{json.dumps(value)}`"


def _paragraphs(text: str) -> list[str]:
    """``text`` (a docstring, wrapped) as Markdown paragraphs, each on one line."""
    return [line for line in (" ".join(paragraph.split()) for paragraph in text.split("\n\n")) if line]


def _cell(text: str) -> str:
    """``text`` fit for a table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


if __name__ == "__main__":
    sys.stdout.buffer.write(markdown(openapi()).encode("utf-8"))
