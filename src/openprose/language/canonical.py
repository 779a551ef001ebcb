"""Canonical form: print an AST back as normalized OpenProse source.

Two-space indentation, one statement per line, strings re-escaped, parallel modifiers in a
fixed order with defaults omitted, pipeline stages and arrow steps after multi-line sessions
on continuation lines. Comments are not part of the AST and are dropped. Parsing the output
gives an equal AST, and formatting it again changes nothing.
"""

from __future__ import annotations

import re

from openprose.language import nodes as n
from openprose.language.analysis import NodeVisitor
from openprose.language.lexer import INTERPOLATION_RE

INDENT = "  "
PRECEDENCE = {"or": 1, "and": 2, "not": 3, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
              "+": 5, "-": 5, "*": 6, "/": 6}
UNARY_MINUS = 7
ATOM = 8
QUOTE_RUN = re.compile(r'"{3,}')


def format_program(program: n.Program) -> str:
    """The canonical source text of ``program``."""
    lines: list[str] = []
    previous: n.Node | None = None
    for stmt in program.body:
        if previous is not None and (_is_definition(stmt) or _is_definition(previous)
                                     or type(stmt) is not type(previous)):
            lines.append("")
        lines.extend(_Printer().statement(stmt, 0))
        previous = stmt
    return "\n".join(lines) + "\n" if lines else ""


def _inline_discretion(text: str) -> str:
    """``**text**``; spaced (``** *x* **``) where a bare ``*`` beside the markers, or no
    text at all, would read as a ``***`` block marker (the lexer strips the spaces)."""
    if not text:
        return "** **"
    if text[0] == "*" or text[-1] == "*":
        return f"** {text} **"
    return f"**{text}**"


def _is_definition(node: n.Node) -> bool:
    return isinstance(node, n.AgentDef | n.BlockDef)


class _Printer(NodeVisitor):
    # ------------------------------------------------------------------ statements
    def body(self, stmts: tuple[n.Node, ...], level: int) -> list[str]:
        out: list[str] = []
        for stmt in stmts:
            out.extend(self.statement(stmt, level))
        return out

    def statement(self, node: n.Node, level: int) -> list[str]:
        first, *rest = self.lines(node, level)
        return [INDENT * level + first, *rest]

    def header(self, text: str, body: tuple[n.Node, ...], level: int) -> list[str]:
        return [text + ":", *self.body(body, level + 1)]

    prefix = "print_"

    def lines(self, node: n.Node, level: int) -> list[str]:
        """Lines for ``node``: the first without indentation, the rest fully indented."""
        return self.visit(node, level)  # type: ignore[no-any-return]

    def generic_visit(self, node: n.Node, level: int) -> list[str]:  # type: ignore[override]
        """An expression on one line."""
        return [self.inline(node, 0)]

    def print_ImportSkill(self, node: n.ImportSkill, level: int) -> list[str]:
        return [f"import {self.string(node.name)} from {self.string(node.source)}"]

    def print_Use(self, node: n.Use, level: int) -> list[str]:
        alias = f" as {node.alias}" if node.alias else ""
        return [f"use {self.string(node.path)}{alias}"]

    def print_Input(self, node: n.Input, level: int) -> list[str]:
        first, *rest = self.value(node.prompt, level)
        return [f"input {node.name}: {first}", *rest]

    def print_AgentDef(self, node: n.AgentDef, level: int) -> list[str]:
        return [f"agent {node.name}:", *self.properties(node.properties, level + 1)]

    def print_BlockDef(self, node: n.BlockDef, level: int) -> list[str]:
        params = f"({', '.join(node.params)})" if node.params else ""
        depth = f" (max_depth: {node.max_depth})" if node.max_depth is not None else ""
        return self.header(f"block {node.name}{params}{depth}", node.body, level)

    def print_Let(self, node: n.Let, level: int) -> list[str]:
        target = node.target if isinstance(node.target, str) else \
            "{ " + ", ".join(node.target.names) + " }"
        first, *rest = self.value(node.value, level)
        return [f"{node.kind} {target} = {first}", *rest]

    def print_Assign(self, node: n.Assign, level: int) -> list[str]:
        first, *rest = self.value(node.value, level)
        return [f"{node.target} = {first}", *rest]

    def print_Output(self, node: n.Output, level: int) -> list[str]:
        first, *rest = self.value(node.value, level)
        prefix = f"output {node.name} = " if node.name is not None else "output "
        return [prefix + first, *rest]

    def print_ExprStmt(self, node: n.ExprStmt, level: int) -> list[str]:
        return self.value(node.expr, level)

    def print_Throw(self, node: n.Throw, level: int) -> list[str]:
        if node.message is None:
            return ["throw"]
        first, *rest = self.value(node.message, level)
        return [f"throw {first}", *rest]

    def print_Parallel(self, node: n.Parallel, level: int) -> list[str]:
        mods = []
        if node.join != "all":
            mods.append(self.quote(node.join))
        if node.count is not None:
            mods.append(f"count: {node.count}")
        if node.on_fail != "fail-fast":
            mods.append(f"on-fail: {self.quote(node.on_fail)}")
        head = "parallel" + (f" ({', '.join(mods)})" if mods else "") + ":"
        out = [head]
        for branch in node.branches:
            first, *rest = self.lines(branch.body, level + 1)
            prefix = f"{branch.name} = " if branch.name else ""
            out.append(INDENT * (level + 1) + prefix + first)
            out.extend(rest)
        return out

    def print_For(self, node: n.For, level: int) -> list[str]:
        names = node.item + (f", {node.index}" if node.index else "")
        prefix = "parallel for" if node.parallel else "for"
        return self.header(f"{prefix} {names} in {self.inline(node.collection, 0)}",
                           node.body, level)

    def print_Repeat(self, node: n.Repeat, level: int) -> list[str]:
        index = f" as {node.index}" if node.index else ""
        return self.header(f"repeat {self.inline(node.count, 0)}{index}", node.body, level)

    def print_Loop(self, node: n.Loop, level: int) -> list[str]:
        head = "loop"
        cond_rest: list[str] = []
        if node.mode and node.condition is not None:
            first, *cond_rest = self.value(node.condition, level)
            head += f" {node.mode} {first}"
        tail = ""
        if node.max is not None:
            tail += f" (max: {node.max})"
        if node.index:
            tail += f" as {node.index}"
        if cond_rest:
            cond_rest[-1] += tail + ":"
            return [head, *cond_rest, *self.body(node.body, level + 1)]
        return self.header(head + tail, node.body, level)

    def print_Try(self, node: n.Try, level: int) -> list[str]:
        out = self.header("try", node.body, level)
        pad = INDENT * level
        if node.catch_body is not None:
            name = f" as {node.catch_name}" if node.catch_name else ""
            out.append(pad + f"catch{name}:")
            out.extend(self.body(node.catch_body, level + 1))
        if node.finally_body is not None:
            out.append(pad + "finally:")
            out.extend(self.body(node.finally_body, level + 1))
        return out

    def print_Choice(self, node: n.Choice, level: int) -> list[str]:
        first, *rest = self.value(node.criteria, level)
        out = [f"choice {first}", *rest]
        out[-1] += ":"
        for option in node.options:
            out.append(INDENT * (level + 1) + f"option {self.string(option.label)}:")
            out.extend(self.body(option.body, level + 2))
        return out

    def print_If(self, node: n.If, level: int) -> list[str]:
        out: list[str] = []
        for i, branch in enumerate(node.branches):
            first, *rest = self.value(branch.condition, level)
            head = ("if " if i == 0 else INDENT * level + "elif ") + first
            out.extend([head, *rest])
            out[-1] += ":"
            out.extend(self.body(branch.body, level + 1))
        if node.else_body is not None:
            out.append(INDENT * level + "else:")
            out.extend(self.body(node.else_body, level + 1))
        return out

    def print_DoBlock(self, node: n.DoBlock, level: int) -> list[str]:
        return self.header("do", node.body, level)

    # ------------------------------------------------------------------ multi-line values
    def value(self, node: n.Node, level: int) -> list[str]:
        return self.lines(node, level)

    def print_Discretion(self, node: n.Discretion, level: int) -> list[str]:
        if not node.multiline:
            return [_inline_discretion(node.text)]
        pad = INDENT * (level + 1)
        return ["***", *[(pad + line).rstrip() for line in node.text.split("\n")],
                INDENT * level + "***"]

    def print_Session(self, node: n.Session, level: int) -> list[str]:
        if node.resume:
            head = f"resume: {node.agent}"
        elif node.prompt is not None:
            head = f"session {self.string(node.prompt)}"
        elif node.label is not None:
            head = f"session {node.label}:" + (f" {node.agent}" if node.agent else "")
        else:
            head = f"session: {node.agent}"
        return [head, *self.properties(node.properties, level + 1)]

    def print_Arrow(self, node: n.Arrow, level: int) -> list[str]:
        out = self.lines(node.steps[0], level)
        for step in node.steps[1:]:
            first, *rest = self.lines(step, level)
            if len(out) == 1:
                out[0] += f" -> {first}"
                out.extend(rest)
            else:
                out.append(INDENT * level + f"-> {first}")
                out.extend(rest)
        return out

    def print_Pipeline(self, node: n.Pipeline, level: int) -> list[str]:
        out = self.lines(node.source, level)
        pad = INDENT * (level + 1)
        for op in node.ops:
            head = f"| reduce({op.accumulator}, {op.variable}):" if op.kind == "reduce" \
                else f"| {op.kind}:"
            out.append(pad + head)
            out.extend(self.body(op.body, level + 2))
        return out

    def properties(self, props: tuple[n.Property, ...], level: int) -> list[str]:
        out: list[str] = []
        pad = INDENT * level
        for prop in props:
            if isinstance(prop.value, n.PropertyBlock):
                out.append(pad + f"{prop.name}:")
                out.extend(self.properties(prop.value.properties, level + 1))
            else:
                first, *rest = self.value(prop.value, level)
                out.append(pad + f"{prop.name}: {first}")
                out.extend(rest)
        return out

    # ------------------------------------------------------------------ single-line values
    def inline(self, node: n.Node, parent: int) -> str:
        text, own = self.expr(node)
        return f"({text})" if own < parent else text

    def expr(self, node: n.Node) -> tuple[str, int]:
        match node:
            case n.String():
                return self.string(node), ATOM
            case n.Number():
                return repr(node.value), ATOM
            case n.Boolean():
                return ("true" if node.value else "false"), ATOM
            case n.Null():
                return "null", ATOM
            case n.Name():
                return node.id, ATOM
            case n.Discretion():
                return _inline_discretion(node.text), ATOM
            case n.Member():
                return f"{self.inline(node.obj, ATOM)}.{node.attr}", ATOM
            case n.Index():
                return f"{self.inline(node.obj, ATOM)}[{self.inline(node.index, 0)}]", ATOM
            case n.Array():
                return "[" + ", ".join(self.inline(i, 0) for i in node.items) + "]", ATOM
            case n.Object():
                if not node.entries:
                    return "{}", ATOM
                return "{ " + ", ".join(self.entry(e) for e in node.entries) + " }", ATOM
            case n.BinaryOp():
                prec = PRECEDENCE[node.op]
                left = self.inline(node.left, prec)
                right = self.inline(node.right, prec + 1)
                return f"{left} {node.op} {right}", prec
            case n.UnaryOp():
                if node.op == "not":
                    return f"not {self.inline(node.operand, PRECEDENCE['not'])}", PRECEDENCE["not"]
                return f"-{self.inline(node.operand, UNARY_MINUS)}", UNARY_MINUS
            case n.DoCall():
                args = f"({', '.join(self.inline(a, 0) for a in node.args)})" \
                    if node.has_parens else ""
                return f"do {node.block}{args}", ATOM
            case n.ProgramCall():
                args = ", ".join(f"{a.name}: {self.inline(a.value, 0)}" for a in node.args)
                return f"{node.callee}({args})", ATOM
        lines = self.lines(node, 0)
        return " ".join(line.strip() for line in lines), 0

    def entry(self, entry: n.ObjectEntry) -> str:
        if entry.shorthand:
            return entry.key
        key = self.quote(entry.key) if entry.quoted_key else entry.key
        return f"{key}: {self.inline(entry.value, 0)}"

    # ------------------------------------------------------------------ strings
    def quote(self, text: str) -> str:
        return self.string(n.String((text,), span=n.Span(0, 0, 0, 0)))

    def string(self, node: n.String) -> str:
        out = []
        for part in node.parts:
            if isinstance(part, n.Interpolation):
                out.append("{" + ".".join(part.path) + "}")
            else:
                out.append(_escape(part, node.triple))
        body = "".join(out)
        return f'"""{body}"""' if node.triple else f'"{body}"'


def _escape(text: str, triple: bool) -> str:
    text = text.replace("\\", "\\\\")
    text = INTERPOLATION_RE.sub(lambda m: "\\" + m.group(), text)
    if triple:
        return QUOTE_RUN.sub(lambda m: '\\"' * len(m.group()), text)
    return text.replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
