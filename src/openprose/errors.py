"""The root of every error openprose raises on purpose.

``except OpenProseError`` catches anything openprose refused or failed at deliberately; a
bare Python exception escaping it is a defect. Each layer has its branch, defined in that
layer:

- compile: :class:`openprose.language.CompileError` (a program with errors) and
  :class:`openprose.language.files.ProgramFileError` (a program file that cannot be read);
- state: :class:`openprose.state.StateError` (capabilities, names, damage, a full disk, ...);
- refusal: :class:`openprose.mcp_server.refusal.Refusal` (an MCP tool call a rule refuses);
- run: :class:`openprose.engine.EngineError` (a program failing, a provider, inputs, imports).

The few others (host setup, prompt arguments, the stdio transport) derive from it directly.
"""

from __future__ import annotations


class OpenProseError(Exception):
    """Anything openprose refused or failed at on purpose."""


__all__ = ["OpenProseError"]
