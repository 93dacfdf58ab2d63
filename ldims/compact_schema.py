"""Compact output schemas: what a client validates every structured result against.

The official client re-validates each tool result against the tool's ``outputSchema`` with
``jsonschema`` — in Python, per call. Pydantic's schemas put nested models behind ``$ref``
(resolved through ``referencing`` on every visit) and optional fields behind
``anyOf: [X, null]`` (two sub-validations each); for ``searchDocuments`` that validation was
half of all the client's time per call (measured with ``bench/mcp_search.py``). The same
schema with the references inlined and nullable types written as ``type: [X, "null"]``
accepts exactly the same documents and validates in a fraction of the time.

Use :func:`compact_field` on a model field whose type is a nested model (or a list of them):
the published schema changes, pydantic's own validation of the result does not.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, WithJsonSchema

_DEFS = "#/$defs/"
_NULL = {"type": "null"}
# Keywords that would also judge a null: a schema with any of them keeps its anyOf. Every
# other validation keyword (maxLength, minimum, properties, required …) applies to one type
# only, so it can share a type list with "null".
_JUDGE_ANY_TYPE = frozenset(
    {"enum", "const", "allOf", "anyOf", "oneOf", "not", "$ref", "if", "then", "else"}
)


def compact_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with every ``$ref`` inlined, ``anyOf [X, null]`` as X with a
    type list, and the generated ``title`` keywords dropped."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})
    return _compact(schema, definitions)


def compact_field(
    model: type[BaseModel], *, array: bool = False, nullable: bool = False
) -> WithJsonSchema:
    """An annotation publishing ``model`` compacted (or an array of it, or it or null)."""
    schema = compact_schema(model)
    if array:
        schema = {"type": "array", "items": schema}
    if nullable:
        schema = _nullable_as_type_list({"anyOf": [schema, _NULL]})
    return WithJsonSchema(schema)


def _compact(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_compact(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = definitions[node["$ref"].removeprefix(_DEFS)]
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        return _compact({**target, **siblings}, definitions)
    compacted: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue  # a keyword here; a property named "title" lives under "properties"
        if key == "properties":
            compacted[key] = {name: _compact(sub, definitions) for name, sub in value.items()}
        else:
            compacted[key] = _compact(value, definitions)
    return _nullable_as_type_list(compacted)


def _nullable_as_type_list(node: dict[str, Any]) -> dict[str, Any]:
    options = node.get("anyOf")
    if not (isinstance(options, list) and len(options) == 2 and _NULL in options):
        return node
    other = options[0] if options[1] == _NULL else options[1]
    if not isinstance(other.get("type"), str) or _JUDGE_ANY_TYPE & set(other):
        return node
    simplified = {key: value for key, value in node.items() if key != "anyOf"}
    simplified.update(other)
    simplified["type"] = [other["type"], "null"]
    return simplified
