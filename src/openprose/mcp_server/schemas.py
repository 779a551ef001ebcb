"""Compact tool schemas: ``tools/list`` is read into every host's context, so the JSON
schemas pydantic generates lose what carries no meaning for a host (titles repeating the
field names, null defaults of optional fields) and spell optional fields as one type list
instead of an ``anyOf`` with null; descriptions lose their docstring indentation."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer


def compact(schema: Any) -> Any:
    """``schema`` without titles and with ``anyOf: [X, null]`` folded into X (in place)."""
    if isinstance(schema, list):
        for item in schema:
            compact(item)
        return schema
    if not isinstance(schema, dict):
        return schema
    schema.pop("title", None)
    if "default" in schema and schema["default"] is None:
        del schema["default"]
    options = schema.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options and len(options) == 2:
        other = next(o for o in options if o != {"type": "null"})
        if isinstance(other.get("type"), str) and set(other) <= {"type", "items",
                                                                 "additionalProperties"}:
            del schema["anyOf"]
            schema.update(other, type=[other["type"], "null"])
    for key, value in list(schema.items()):
        if key == "properties" and isinstance(value, dict):
            for prop in value.values():
                compact(prop)
        elif key != "default" and isinstance(value, dict | list):
            compact(value)
    return schema


def compact_tools(mcp: MCPServer) -> None:
    """Compact every registered tool's input and output schema. MCPServer 2.3 keeps them
    on its tool manager (argument and result validation use the models, not these dicts)."""
    for tool in mcp._tool_manager.list_tools():
        tool.description = " ".join((tool.description or "").split())
        compact(optional_without_null(tool.parameters))
        if tool.output_schema is not None:
            outline(drop_required(compact(inline_defs(tool.output_schema))))


def optional_without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An input schema whose optional parameters drop their ``null`` alternative (in place):
    leaving one out means the same, and the arguments model still accepts an explicit null."""
    required = set(schema.get("required", ()))
    for name, field in schema.get("properties", {}).items():
        options = field.get("anyOf")
        if name in required or not isinstance(options, list) or {"type": "null"} not in options:
            continue
        others = [option for option in options if option != {"type": "null"}]
        if len(others) == 1:
            del field["anyOf"]
            field.update(others[0])
        else:
            field["anyOf"] = others
    return schema


def outline(schema: dict[str, Any]) -> dict[str, Any]:
    """The output schema reduced to its top-level fields and their JSON types (in place):
    the items of a result's lists and the fields of its nested objects are read from the
    content, not the listing every host keeps in context. The content still validates."""
    schema.pop("description", None)
    for name, field in schema.get("properties", {}).items():
        types = json_types(field)
        schema["properties"][name] = {"type": types[0] if len(types) == 1 else types} \
            if types else {}
    return schema


def json_types(field: dict[str, Any]) -> list[str]:
    """The JSON types a field's schema admits, [] when any value is (``Any``)."""
    if "anyOf" in field:
        options = [json_types(option) for option in field["anyOf"]]
        if not all(options):
            return []
        return list(dict.fromkeys(t for option in options for t in option))
    kind = field.get("type", "object" if "properties" in field else None)
    if kind is None:
        return []
    return [kind] if isinstance(kind, str) else list(kind)


def inline_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """Each ``$ref`` replaced by the definition it names (results do not nest recursively),
    in place; nested objects drop the ``type`` their ``properties`` already imply."""
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                node = dict(defs[ref.removeprefix("#/$defs/")])
                node.pop("description", None)
                if "properties" in node:
                    node.pop("type", None)
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    resolved = resolve(schema)
    schema.clear()
    schema.update(resolved)
    return schema


def drop_required(schema: Any) -> Any:
    """Results always carry every field: their schemas need not list them as required, nor
    say what a missing one defaults to."""
    if isinstance(schema, dict):
        schema.pop("required", None)
        schema.pop("default", None)
        for value in schema.values():
            drop_required(value)
    elif isinstance(schema, list):
        for item in schema:
            drop_required(item)
    return schema
