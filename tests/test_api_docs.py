"""docs/api.md, the HTTP API's reference, is generated from the OpenAPI description
(``app/server/reference.py``): it is what the code says, and every endpoint, parameter and field
says what it is."""

from __future__ import annotations

import difflib
from itertools import islice

import pytest
from helpers import ROOT

from askalike.app.server.reference import COMMAND, markdown, openapi


def test_docs_api_md_is_what_the_openapi_description_renders():
    generated = markdown(openapi())
    committed = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    if committed != generated:
        diff = difflib.unified_diff(committed.splitlines(), generated.splitlines(), "docs/api.md",
                                    "generated", lineterm="", n=0)
        pytest.fail(f"docs/api.md is stale: regenerate it with `{COMMAND}`\n"
                    + "\n".join(islice(diff, 40)), pytrace=False)


def test_every_endpoint_parameter_and_field_is_described():
    spec = openapi()
    undescribed = []
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            where = f"{method.upper()} {path}"
            undescribed += [where for key in ("summary", "description") if not operation.get(key)]
            undescribed += [f"{where} {parameter['name']}" for parameter in operation.get("parameters", ())
                            if not parameter.get("description")]
    for name, schema in spec["components"]["schemas"].items():
        undescribed += [name] if not schema.get("description") else []
        undescribed += [f"{name}.{field}" for field, inner in schema.get("properties", {}).items()
                        if not inner.get("description")]
    assert not undescribed, ("say what these are (a docstring, summary= or description=): "
                             + ", ".join(undescribed))


def test_the_reference_shows_types_bounds_defaults_and_links():
    spec = {
        "info": {"title": "t", "summary": "S"},
        "paths": {"/things/{id}": {"get": {
            "summary": "A thing", "description": "One thing.\n\nBy its id.",
            "parameters": [
                {"name": "id", "in": "path", "required": True, "schema": {"type": "string"},
                 "description": "its id"},
                {"name": "k", "in": "query", "schema": {"type": "integer", "minimum": 1.0, "maximum": 5,
                                                       "default": 2}, "description": "how many | at most"},
                {"name": "kind", "in": "query", "schema": {
                    "anyOf": [{"$ref": "#/components/schemas/Kind"}, {"type": "null"}]}}],
            "responses": {"404": {"description": "none"}, "200": {"description": "found", "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}}}}}},
        "components": {"schemas": {
            "Thing": {"type": "object", "required": ["names"], "additionalProperties": False,
                      "properties": {"names": {"type": "array", "minItems": 1,
                                               "items": {"type": "string", "maxLength": 9}},
                                     "kind": {"anyOf": [{"$ref": "#/components/schemas/Kind"},
                                                        {"type": "null"}], "default": "big"}}},
            "Kind": {"type": "string", "enum": ["big", "small"], "description": "How big."}}},
    }
    page = markdown(spec)
    assert "### `GET /things/{id}`: A thing\n\nOne thing.\n\nBy its id.\n" in page
    assert "| `k` | query | integer (1 to 5) | no | `2` | how many \\| at most |" in page
    assert "| `kind` | query | [Kind](#kind) | no |  |  |" in page  # no null: a parameter is left out
    assert "| 200 | [Thing](#thing) | found |\n| 404 |  | none |" in page
    assert page.index("### Kind") < page.index("### Thing")
    assert "| `names` | array (at least 1 item) of string (at most 9 characters) | yes |  |" in page
    assert '| `kind` | [Kind](#kind) or null | no, default `"big"` |  |\n\nNo other field.' in page
    assert "A string, one of `big`, `small`." in page
