"""OpenProse: a language and VM for multi-agent AI workflows.

The package is layered: ``language`` (lexer, parser, validator) → ``state`` (the run
state contract and its backends) → ``engine`` / ``mcp_server`` → ``cli``.
Only the language front end is imported eagerly; everything else loads on demand.
"""

from openprose.language import CompileResult, Diagnostic, Severity, compile

__all__ = ["CompileResult", "Diagnostic", "Severity", "compile"]
__version__ = "0.1.0"
