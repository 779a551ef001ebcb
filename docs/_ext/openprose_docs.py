"""Directives that write reference pages from the code itself, so the pages cannot drift:

- ``openprose-mcp``: every tool of ``prose serve`` (description, parameters, result fields),
  every resource and resource template, every prompt, read from the server's own listing;
- ``openprose-settings``: every setting, from :data:`openprose.state.config.SETTINGS`;
- ``openprose-exit-codes``: what each exit status means, from
  :data:`openprose.cli.common.EXIT_CODES`."""

from __future__ import annotations

import tempfile
from typing import Any

import anyio
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _type_of(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_type_of(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " | ".join(f"``{v!r}``" if not isinstance(v, str) else f"``{v}``"
                          for v in schema["enum"])
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    kind = schema.get("type", "any")
    if kind == "array" and "items" in schema:
        return f"array of {_type_of(schema['items'])}"
    return str(kind)


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


async def _listing() -> dict[str, Any]:
    from mcp import Client

    from openprose.mcp_server.server import create_server

    with tempfile.TemporaryDirectory() as project:
        server = create_server(project, watch=False)
        # Listed output schemas only say "an object" (each field would cost every host's
        # tools/list); the fields come from the result model the server validates with.
        results = {tool.name: tool.fn_metadata.output_model
                   for tool in server._tool_manager.list_tools()}
        async with Client(server) as client:
            return {
                "results": results,
                "tools": (await client.list_tools()).tools,
                "resources": (await client.list_resources()).resources,
                "templates": (await client.list_resource_templates()).resource_templates,
                "prompts": (await client.list_prompts()).prompts,
            }


def _mcp_lines(listing: dict[str, Any]) -> list[str]:
    out: list[str] = []

    def section(title: str, char: str) -> None:
        out.extend([title, char * len(title), ""])

    section("Tools", "-")
    for tool in sorted(listing["tools"], key=lambda t: t.name):
        section(f"``{tool.name}``", "~")
        out.extend([_one_line(tool.description), ""])
        schema = tool.input_schema or {}
        required = set(schema.get("required", []))
        props = schema.get("properties", {})
        if props:
            out.extend(["**Parameters**", ""])
            for name, prop in props.items():
                need = "required" if name in required else "optional"
                desc = _one_line(prop.get("description"))
                out.append(f"- ``{name}`` ({_type_of(prop)}, {need})"
                           + (f": {desc}" if desc else ""))
            out.append("")
        model = listing["results"].get(tool.name)
        result = model.model_json_schema().get("properties", {}) if model is not None else {}
        if result:
            out.extend(["**Result fields**", ""])
            for name, prop in result.items():
                desc = _one_line(prop.get("description"))
                out.append(f"- ``{name}`` ({_type_of(prop)})" + (f": {desc}" if desc else ""))
            out.append("")
    section("Resources", "-")
    for res in sorted(listing["resources"], key=lambda r: str(r.uri)):
        out.append(f"- ``{res.uri}``: {_one_line(res.description) or res.name}")
    for tpl in sorted(listing["templates"], key=lambda t: t.uri_template):
        out.append(f"- ``{tpl.uri_template}``: {_one_line(tpl.description) or tpl.name}")
    out.append("")
    section("Prompts", "-")
    for prompt in sorted(listing["prompts"], key=lambda p: p.name):
        args = ", ".join(f"``{a.name}``" + ("" if a.required else " (optional)")
                         for a in prompt.arguments or [])
        out.append(f"- ``{prompt.name}``" + (f" ({args})" if args else "")
                   + f": {_one_line(prompt.description)}")
    out.append("")
    return out


def _settings_lines() -> list[str]:
    from openprose.state.config import SETTINGS

    out = []
    for setting in SETTINGS:
        where = "environment only" if setting.environment_only else ".prose/.env or environment"
        trust = "; a git-tracked .prose/.env cannot set it" if setting.trust else ""
        out.extend([f"``{setting.name}``", f"   {setting.meaning} ({where}{trust})", ""])
    return out


def _exit_code_lines() -> list[str]:
    from openprose.cli.common import EXIT_CODES

    out = []
    for code, meaning in sorted(EXIT_CODES.items()):
        out.extend([f"``{code}``", f"   {meaning}", ""])
    return out


class _Generated(SphinxDirective):
    has_content = False

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.section()
        container.document = self.state.document
        self.state.nested_parse(StringList(self.lines(), source="(generated)"), 0, container,
                                match_titles=True)
        return list(container.children)


class McpDirective(_Generated):
    def lines(self) -> list[str]:
        return _mcp_lines(anyio.run(_listing))


class SettingsDirective(_Generated):
    def lines(self) -> list[str]:
        return _settings_lines()


class ExitCodesDirective(_Generated):
    def lines(self) -> list[str]:
        return _exit_code_lines()


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("openprose-mcp", McpDirective)
    app.add_directive("openprose-settings", SettingsDirective)
    app.add_directive("openprose-exit-codes", ExitCodesDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
