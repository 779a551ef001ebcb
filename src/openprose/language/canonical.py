"""Canonical form: print an AST back as normalized OpenProse source.

Two-space indentation, one statement per line, strings re-escaped, parallel modifiers in a
fixed order with defaults omitted, pipeline stages and arrow steps after multi-line sessions
on continuation lines. Parsing the output gives an equal AST, and formatting it again changes
nothing. Comments are not part of the AST: :func:`format_source` puts them back, each next
to the code it was next to.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from difflib import SequenceMatcher

from openprose.errors import OpenProseError
from openprose.language import compile
from openprose.language import nodes as n
from openprose.language.analysis import NodeVisitor
from openprose.language.lexer import INTERPOLATION_RE, Lexer, T, Token

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


class NotFormatted(OpenProseError):
    """The canonical form of a text would lose a comment's place (the message names it)."""


#: tokens that carry meaning (layout tokens are the printer's to choose)
_LAYOUT = (T.NEWLINE, T.INDENT, T.DEDENT, T.EOF)


def format_source(source: str, program: n.Program) -> str:
    """The canonical form of ``source`` (which compiles to ``program``) with its comments
    kept in place: a comment on a line of its own above the code that followed it (at that
    code's indentation, or the block's before it when it was indented under that block), a
    trailing comment after the code it followed. Raises :class:`NotFormatted`, naming the
    line, for a comment whose place the canonical form does not keep (its code joined to
    another line, or rewritten); the result always reads back as ``program`` with every
    comment, and formats to itself."""
    text = _with_comments(source, program)
    if text == source:
        return text
    again = compile(text)
    if again.program != program or _comments(source) != _comments(text) or \
            _with_comments(text, again.program) != text:
        raise NotFormatted("not formatted: the canonical form would move a comment away "
                           "from its code")
    return text


def _comments(text: str) -> list[str]:
    lexer = Lexer(text)
    lexer.tokenize()
    lines = lexer.src.split("\n")
    return [lines[c.line - 1][c.column - 1:c.end_column - 1].rstrip() for c in lexer.comments]


def _with_comments(source: str, program: n.Program) -> str:
    text = format_program(program)
    lexer = Lexer(source)
    before = [t for t in lexer.tokenize() if t.kind not in _LAYOUT]
    if not lexer.comments:
        return text
    after = [t for t in Lexer(text).tokenize() if t.kind not in _LAYOUT]
    matched = SequenceMatcher(None, [_key(t) for t in before], [_key(t) for t in after],
                              autojunk=False)
    to: dict[int, int] = {a + k: b + k for a, b, size in matched.get_matching_blocks()
                          for k in range(size)}
    lines = text.split("\n")[:-1] if text else []
    starts = [(t.span.line, t.span.column) for t in before]
    source_lines = lexer.src.split("\n")
    above: dict[int, list[str]] = {}  # output line → comment lines written above it
    below: dict[int, list[str]] = {}  # output line → comment lines written below it
    trailing: dict[int, str] = {}
    last: list[str] = []
    for comment in lexer.comments:
        line = source_lines[comment.line - 1]
        body = line[comment.column - 1:comment.end_column - 1].rstrip()
        k = bisect_left(starts, (comment.line, comment.column))
        if line[:comment.column - 1].strip():  # after code on its line
            o = to.get(k - 1)
            if o is None or (o + 1 < len(after) and
                             after[o + 1].span.line <= after[o].span.end_line):
                raise _misplaced(comment)
            end = after[o].span.end_line - 1
            if end in trailing:
                raise _misplaced(comment)
            trailing[end] = body
        elif k == len(before):
            last.append(body)
        elif comment.column > before[k].span.column and k > 0 and to.get(k - 1) is not None:
            # indented under the block before the code that follows: at the indentation of
            # the last line there that starts as far left as the comment
            o = to[k - 1]
            j = next((j for j in range(k - 1, -1, -1) if before[j].span.column <= comment.column
                      and (j == 0 or before[j - 1].span.end_line < before[j].span.line)), k - 1)
            level = to.get(j, o)
            below.setdefault(after[o].span.end_line - 1, []).append(
                _indent(lines[after[level].span.line - 1]) + body)
        else:
            o = to.get(k)
            if o is None or (o > 0 and after[o - 1].span.end_line >= after[o].span.line):
                raise _misplaced(comment)
            at = after[o].span.line - 1
            above.setdefault(at, []).append(_indent(lines[at]) + body)
    out: list[str] = []
    for i, line in enumerate(lines):
        out.extend(above.get(i, ()))
        out.append(f"{line}  {trailing[i]}" if i in trailing else line)
        out.extend(below.get(i, ()))
    if last:
        out.extend(["", *last] if out else last)
    return "\n".join(out) + "\n"


def _key(token: Token) -> object:
    """What a token means, as the printer keeps it (a string re-escaped is the same)."""
    if token.kind is T.STRING:
        return T.STRING, token.parts, token.triple
    if token.kind is T.NUMBER:
        return T.NUMBER, float(token.value)
    return token.kind, token.value


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _misplaced(comment: n.Span) -> NotFormatted:
    return NotFormatted(f"not formatted: the canonical form does not keep the place of the "
                        f"comment on line {comment.line} (its code is joined to another line "
                        "or rewritten)")


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
