"""Compact tool schemas: ``tools/list`` is read into every host's context, so the JSON
schemas pydantic generates lose what carries no meaning for a host (titles repeating the
field names, and defaults of optional fields that mean what leaving them out means: null,
empty string, false, zero) and spell optional fields as
one type list instead of an ``anyOf`` with null; descriptions lose their docstring
indentation. Output schemas only declare that a tool answers with a JSON object."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

# Every tool's output schema as listed: its result is a JSON object. The result models
# (``results``) shape and validate each result in the server, and a host reads the fields from
# the structured content: hosts give their model a tool's name, description and input schema,
# never its output schema, while each field listed there would cost every host's
# ``tools/list`` about 20 bytes.
OBJECT_RESULT: dict[str, Any] = {"type": "object"}


def compact(schema: Any) -> Any:
    """``schema`` without titles and with ``anyOf: [X, null]`` folded into X (in place)."""
    if isinstance(schema, list):
        for item in schema:
            compact(item)
        return schema
    if not isinstance(schema, dict):
        return schema
    schema.pop("title", None)
    if "default" in schema and schema["default"] in (None, "", False, 0):
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
            tool.output_schema = dict(OBJECT_RESULT)


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


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """An input schema that admits no argument besides its properties (a copy)."""
    return {**schema, "additionalProperties": False}
