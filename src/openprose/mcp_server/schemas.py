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
        compact(tool.parameters)
        if tool.output_schema is not None:
            drop_required(compact(inline_defs(tool.output_schema)))


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


def drop_required(schema: Any) -> None:
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
