"""Recursive-descent parser: tokens → :mod:`openprose.language.nodes`.

Keywords are contextual (``context`` or ``exec`` are fine variable names). On a syntax error
the parser records a diagnostic, skips to the end of the offending statement (including any
block indented under it) and goes on, so independent problems are all reported in one pass.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from openprose.errors import OpenProseError
from openprose.language import MAX_TREE_DEPTH, Parsed
from openprose.language import nodes as n
from openprose.language.diagnostics import Diagnostic, Severity
from openprose.language.lexer import NOT_IMPLEMENTED, Lexer, T, Token

NodeT = TypeVar("NodeT")

SIMPLE_STATEMENTS = frozenset({
    "import", "use", "input", "agent", "block", "let", "const", "output", "throw",
})
STATEMENT_KEYWORDS = frozenset({
    "import", "use", "input", "agent", "block", "let", "const", "output", "parallel", "for",
    "repeat", "loop", "try", "throw", "choice", "if", "do", "session", "resume",
})
DANGLING = {
    "catch": "'catch' without a 'try' before it",
    "finally": "'finally' without a 'try' before it",
    "elif": "'elif' without an 'if' before it",
    "else": "'else' without an 'if' before it",
    "option": "'option' outside a 'choice' block",
}
LATER_VERSIONS = {
    "gate": "'gate' blocks belong to a later OpenProse version; this front end implements 0.8",
}
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
MAX_NESTING = 64  # blocks, brackets and unary operators; keeps every later pass off the C stack


class ParseError(OpenProseError):
    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


class Parser:
    def __init__(self, tokens: list[Token], path: str | None = None, source: str = "",
                 first_line: int = 1) -> None:
        self.tokens = tokens
        self.lines = source.split("\n")  # for the text of an input's default (W020)
        self.first_line = first_line  # the line ``source`` starts on
        self.pos = 0
        self.path = path
        self.diagnostics: list[Diagnostic] = []
        self.inline = 0  # > 0 while parsing a body written on its header's line
        self.single_line = 0  # > 0 while parsing a property value: no continuation lines
        self.pending_dedents = 0  # property blocks left open by an indented '->' or '|' line
        self.depth = 0

    # ------------------------------------------------------------------ token helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, offset: int = 1) -> Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def next(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind is not T.EOF:
            self.pos += 1
        return token

    def fail(self, code: str, message: str, token: Token | None = None) -> NoReturn:
        token = token or self.tok
        raise ParseError(self.nested_triple(token) or
                         Diagnostic(code, message, token.span, Severity.ERROR, self.path))

    def report(self, code: str, message: str, span: n.Span) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, Severity.ERROR, self.path))

    def warn(self, code: str, message: str, span: n.Span) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, Severity.WARNING, self.path))

    def nested_triple(self, token: Token) -> Diagnostic | None:
        """E036 when ``token``, a token the parser cannot take, comes right after a
        triple-quoted string: a nested triple quote closed that string early, and what
        follows is the rest of the text it was meant to hold."""
        at = next((j for j in range(min(self.pos, len(self.tokens) - 1), max(-1, self.pos - 4), -1)
                   if self.tokens[j] is token), None)
        if at is None:
            return None
        i = at - 1
        while i >= 0 and self.tokens[i].kind in (T.NEWLINE, T.INDENT, T.DEDENT):
            i -= 1
        before = self.tokens[i] if i >= 0 else None
        if before is None or before.kind is not T.STRING or not before.triple \
                or token.kind in (T.EOF, T.DEDENT):
            return None
        end = before.span
        return Diagnostic("E036", 'nested """ inside a """ string: triple-quoted strings do not '
                          'nest, so this one ended at the inner """ (write the inner quotes as '
                          '\\"\\"\\")', n.Span(end.end_line, max(1, end.end_column - 3),
                                                 end.end_line, end.end_column),
                          Severity.ERROR, self.path)

    def unexpected(self, expected: str) -> NoReturn:
        token = self.tok
        if token.kind is T.INDENT:
            self.fail("E005", f"unexpected indentation (expected {expected})")
        if token.kind in (T.NEWLINE, T.EOF, T.DEDENT):
            self.fail("E005", f"the line ends too early: expected {expected}")
        self.fail("E004", f"unexpected {token.describe()}: expected {expected}")

    def expect_op(self, op: str, expected: str | None = None) -> Token:
        if not self.tok.is_op(op):
            self.unexpected(expected or f"'{op}'")
        return self.next()

    def expect_name(self, what: str = "a name") -> Token:
        if self.tok.kind is not T.NAME:
            self.unexpected(what)
        return self.next()

    def expect_keyword(self, word: str) -> Token:
        if not self.tok.is_name(word):
            self.unexpected(f"'{word}'")
        return self.next()

    def end_statement(self) -> None:
        if self.pos > 0 and self.tokens[self.pos - 1].kind is T.DEDENT:
            pass  # the statement ended with an indented block
        elif self.tok.kind is T.NEWLINE:
            self.next()
        elif self.tok.kind not in (T.EOF, T.DEDENT):
            self.unexpected("the end of the line")
        while self.pending_dedents and self.tok.kind is T.DEDENT:
            self.next()
            self.pending_dedents -= 1

    def nest(self, token: Token) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            self.depth = 0
            self.fail("E005", f"nested more than {MAX_NESTING} levels deep; split the program "
                      "into blocks", token)

    def continues_with(self, *ops: str) -> bool:
        """True if the next token (or the first of a continuation line) is one of ``ops``.

        Inside an inline body (``| map: session "x"``) a following ``|`` belongs to the
        enclosing pipeline, and continuation lines are never taken.
        """
        if self.inline:
            ops = tuple(op for op in ops if op != "|")
            return self.tok.is_op(*ops) if ops else False
        if self.tok.is_op(*ops):
            return True
        if not self.single_line and self.tok.kind is T.NEWLINE and self.peek().is_op(*ops):
            self.next()
            return True
        return False

    def span(self, start: Token) -> n.Span:
        """From ``start`` to the last token consumed that is not layout (newline, dedent)."""
        i = self.pos - 1
        while i > 0 and self.tokens[i].kind in (T.NEWLINE, T.INDENT, T.DEDENT):
            i -= 1
        previous = self.tokens[i] if i >= 0 else start
        if (previous.span.line, previous.span.column) < (start.span.line, start.span.column):
            previous = start
        return start.span.to(previous.span)

    def synchronize(self) -> None:
        """Skip the rest of a broken statement, including any block indented under it."""
        self.inline = self.single_line = 0
        depth = 0
        while self.tok.kind is not T.EOF:
            kind = self.tok.kind
            if kind is T.INDENT:
                depth += 1
            elif kind is T.DEDENT:
                if depth == 0:
                    return
                depth -= 1
                if depth == 0 and self.peek().kind is not T.INDENT:
                    self.next()
                    return
            elif kind is T.NEWLINE and depth == 0 and self.peek().kind is not T.INDENT:
                self.next()
                return
            self.next()

    # ------------------------------------------------------------------ program and bodies
    def parse_program(self) -> n.Program:
        start = self.tok
        body = self.statements(until=T.EOF)
        return n.Program(tuple(body), span=start.span.to(self.tok.span))

    def statements(self, until: T) -> list[n.Node]:
        out: list[n.Node] = []
        while self.tok.kind is not until and self.tok.kind is not T.EOF:
            if self.tok.kind is T.NEWLINE:
                self.next()
                continue
            if self.tok.kind is T.INDENT:
                self.diagnostics.append(self.nested_triple(self.tok) or Diagnostic(
                    "E005", "unexpected indentation: this line is indented but nothing above "
                    "it opens a block", self.tok.span, Severity.ERROR, self.path))
                self.next()
                out.extend(self.statements(until=T.DEDENT))
                if self.tok.kind is T.DEDENT:
                    self.next()
                continue
            if self.tok.kind is T.DEDENT:
                self.next()
                continue
            before = self.pos
            try:
                out.append(self.statement())
            except ParseError as err:
                self.diagnostics.append(err.diagnostic)
                self.synchronize()
                if self.pos == before:
                    self.next()
        return out

    def body(self, what: str) -> tuple[n.Node, ...]:
        """``:`` then an indented block of statements, or one statement on the same line."""
        colon = self.expect_op(":", f"':' to open the body of {what}")
        if self.tok.kind is T.NEWLINE:
            self.next()
            if self.tok.kind is not T.INDENT:
                self.fail("E005", f"expected an indented block for {what}")
            self.next()
            self.nest(colon)
            stmts = self.statements(until=T.DEDENT)
            self.depth -= 1
            if self.tok.kind is T.DEDENT:
                self.next()
            return tuple(stmts)
        if self.tok.kind in (T.EOF, T.DEDENT):
            self.fail("E005", f"expected an indented block for {what}")
        return (self.inline_statement(),)

    def inline_statement(self) -> n.Node:
        """A statement on the same line as a ``:`` (no trailing newline consumed)."""
        start = self.tok
        self.inline += 1
        try:
            value = self.value()
        finally:
            self.inline -= 1
        if _is_statement(value):
            return value
        return n.ExprStmt(value, span=self.span(start))

    # ------------------------------------------------------------------ statements
    def statement(self) -> n.Node:
        tok = self.tok
        if tok.kind is T.NAME:
            word = tok.value
            if word in DANGLING and not self.peek().is_op("="):
                self.fail("E005", DANGLING[word])
            if word in LATER_VERSIONS and self.peek().kind is T.NAME:
                self.fail("E005", LATER_VERSIONS[word])
            if word == "assert" and self.peek().kind not in (T.NEWLINE, T.EOF) \
                    and not self.peek().is_op("=", ".", ":", ",", ")", "]", "}"):
                return self.stmt_assert()
            if word in SIMPLE_STATEMENTS and (word == "output" or not self.peek().is_op("=", ".")):
                handler: Callable[[], n.Node] = getattr(self, f"stmt_{word}")
                return handler()
            if self.peek().is_op("=") and word not in STATEMENT_KEYWORDS:
                return self.stmt_assign()
            if (word not in STATEMENT_KEYWORDS and self.peek().kind is T.NAME
                    and self.peek(2).is_op(":")):
                self.fail("E005", f"unknown statement '{word}'")
        start = self.tok
        value = self.value()
        if not _is_statement(value):
            value = n.ExprStmt(value, span=self.span(start))
        self.end_statement()
        return value

    def value(self) -> n.Node:
        """An expression, or a compound statement standing where a value is expected."""
        tok = self.tok
        if tok.kind is T.NAME:
            compound = {
                "parallel": self.stmt_parallel, "for": self.stmt_for, "repeat": self.stmt_repeat,
                "loop": self.stmt_loop, "try": self.stmt_try, "if": self.stmt_if,
                "choice": self.stmt_choice,
            }.get(tok.value)
            if compound is not None and not self.peek().is_op("=", "."):
                return compound()
        return self.expression()

    def stmt_import(self) -> n.Node:
        start = self.next()
        name = self.string("the skill name in quotes")
        self.expect_keyword("from")
        source = self.string("the skill source in quotes")
        self.end_statement()
        return n.ImportSkill(name, source, span=self.span(start))

    def stmt_use(self) -> n.Node:
        start = self.next()
        path = self.string('the program path in quotes, e.g. use "handle/slug"')
        alias = None
        if self.tok.is_name("as"):
            self.next()
            alias = self.expect_name("an alias after 'as'").value
        self.end_statement()
        return n.Use(path, alias, span=self.span(start))

    def stmt_input(self) -> n.Node:
        start = self.next()
        name = ""
        if self.tok.kind is T.NAME:
            name = self.next().value
        elif not self.tok.is_op(":"):
            self.unexpected("the input's name")
        self.expect_op(":", "':' and a description after the input name")
        prompt: n.String | n.Discretion
        if self.tok.is_op("[", "{"):  # a later version's default in place of a description
            prompt = self.input_default(None)
        elif self.tok.kind is T.STRING:
            prompt = self.string("a description")
            if self.tok.is_op("="):
                self.next()
                prompt = self.input_default(prompt)
        elif self.tok.kind is T.DISCRETION:
            t = self.next()
            prompt = n.Discretion(t.value, t.multiline, span=t.span)
        else:
            self.unexpected("a description in quotes or a **prompt**")
        self.end_statement()
        return n.Input(name, prompt, span=self.span(start))

    def input_default(self, description: n.String | None) -> n.String:
        """An array or object literal as an input's default (newer syntax): OpenProse 0.8
        inputs have none, so the literal's text joins the description the caller (or the
        user, when the run pauses for it) reads, and a value must still be supplied."""
        if not self.tok.is_op("[", "{"):
            self.unexpected("an array or object literal as the input's default")
        literal = self.primary()
        text = self.source_text(literal.span)
        self.warn("W020", "an input default is newer syntax: OpenProse 0.8 inputs have no "
                  "default, so its text is added to the description and a value must still be "
                  "supplied", literal.span)
        parts: list[str | n.Interpolation] = list(description.parts if description else ())
        added = (" " if description else "") + f"(default: {text})"
        if parts and isinstance(parts[-1], str):
            parts[-1] += added
        else:
            parts.append(added)
        span = description.span.to(literal.span) if description else literal.span
        return n.String(tuple(parts), span=span)

    def source_text(self, span: n.Span) -> str:
        """The source of ``span`` on one line (line breaks and their indentation made one
        space)."""
        lines = self.lines[span.line - self.first_line:span.end_line - self.first_line + 1]
        lines[-1] = lines[-1][:span.end_column - 1]
        lines[0] = lines[0][span.column - 1:]
        return " ".join(line.strip() for line in lines)

    def stmt_agent(self) -> n.Node:
        start = self.next()
        name = self.expect_name("the agent's name").value
        self.expect_op(":", "':' after the agent name")
        if self.tok.kind is not T.NEWLINE or self.peek().kind is not T.INDENT:
            self.fail("E005", f"agent '{name}' needs an indented block of properties "
                      "(model, prompt, persist, ...)")
        props = self.property_block()
        return n.AgentDef(name, props, span=self.span(start))

    def stmt_block(self) -> n.Node:
        start = self.next()
        name = self.expect_name("the block's name").value
        params: list[str] = []
        max_depth = None
        if self.tok.is_op("(") and not (self.peek().is_name("max_depth") and self.peek(2).is_op(":")):
            self.next()
            while not self.tok.is_op(")"):
                params.append(self.expect_name("a parameter name").value)
                if not self.tok.is_op(","):
                    break
                self.next()
            self.expect_op(")", "')' or ',' in the parameter list")
        if self.tok.is_op("("):
            self.next()
            self.expect_keyword("max_depth")
            self.expect_op(":")
            max_depth = self.integer("the maximum recursion depth")
            self.expect_op(")")
        body = self.body(f"block '{name}'")
        return n.BlockDef(name, tuple(params), body, max_depth, span=self.span(start))

    def stmt_let(self) -> n.Node:
        start = self.next()
        target: str | n.Destructure
        if self.tok.is_op("{"):
            brace = self.next()
            names = []
            while not self.tok.is_op("}"):
                names.append(self.expect_name("a name to destructure").value)
                if not self.tok.is_op(","):
                    break
                self.next()
            self.expect_op("}")
            target = n.Destructure(tuple(names), span=self.span(brace))
        else:
            target = self.expect_name(f"a variable name after '{start.value}'").value
        self.expect_op("=", f"'=' after the name in '{start.value}'")
        value = self.value()
        self.end_statement()
        return n.Let(start.value, target, value, span=self.span(start))

    stmt_const = stmt_let

    def stmt_assign(self) -> n.Node:
        start = self.next()
        self.expect_op("=")
        value = self.value()
        self.end_statement()
        return n.Assign(start.value, value, span=self.span(start))

    def stmt_output(self) -> n.Node:
        start = self.next()
        if self.tok.is_op("="):
            self.report("E023", "output needs a name: output NAME = expression", self.tok.span)
            self.next()
            name: str | None = ""
        elif self.tok.kind is T.NAME and self.peek().is_op("="):
            name = self.next().value
            self.next()
        else:
            name = None
        value = self.value()
        self.end_statement()
        return n.Output(name, value, span=self.span(start))

    def stmt_assert(self) -> n.Node:
        """``assert COND: MESSAGE`` (a later version's statement) read as its 0.8 meaning:
        ``if not COND: throw MESSAGE``."""
        start = self.next()
        condition = self.or_expr()
        message: n.Node | None = None
        if self.tok.is_op(":"):
            self.next()
            message = self.expression()
        self.end_statement()
        span = self.span(start)
        if message is None:
            message = n.String(("assertion failed",), span=span)
        self.warn("W020", "'assert' is newer syntax, read as 'if not CONDITION: throw MESSAGE' "
                  "(write that in OpenProse 0.8)", start.span)
        throw = n.Throw(message, span=span)
        negated = n.UnaryOp("not", condition, span=condition.span)
        return n.If((n.CondBranch(negated, (throw,), span=span),), span=span)

    def stmt_throw(self) -> n.Node:
        start = self.next()
        message = None
        if self.tok.kind not in (T.NEWLINE, T.EOF, T.DEDENT):
            message = self.expression()
        self.end_statement()
        return n.Throw(message, span=self.span(start))

    # ------------------------------------------------------------------ compound statements
    def stmt_parallel(self) -> n.Node:
        start = self.next()
        if self.tok.is_name("for"):
            return self.stmt_for(parallel_start=start)
        join, on_fail, count = "all", "fail-fast", None
        if self.tok.is_op("("):
            self.next()
            while not self.tok.is_op(")"):
                if self.tok.kind is T.STRING:
                    join = self.string("a join strategy").text
                elif self.tok.is_name("on-fail"):
                    self.next()
                    self.expect_op(":")
                    on_fail = self.word_or_string("a failure policy")
                elif self.tok.is_name("count"):
                    self.next()
                    self.expect_op(":")
                    count = self.integer("the number of branches to wait for")
                elif self.tok.kind is T.NAME and not self.peek().is_op(":"):
                    join = self.next().value
                else:
                    self.unexpected('a join strategy ("all", "first", "any"), on-fail: or count:')
                if not self.tok.is_op(","):
                    break
                self.next()
            self.expect_op(")", "')' or ',' between parallel modifiers")
        self.expect_op(":", "':' after parallel")
        if self.tok.kind is not T.NEWLINE or self.peek().kind is not T.INDENT:
            self.fail("E005", "parallel needs an indented block of branches")
        self.next()
        self.nest(self.next())  # INDENT
        branches = []
        while self.tok.kind not in (T.DEDENT, T.EOF):
            if self.tok.kind is T.NEWLINE:
                self.next()
                continue
            before = self.pos
            try:
                branches.append(self.branch())
            except ParseError as err:
                self.diagnostics.append(err.diagnostic)
                self.synchronize()
                if self.pos == before:
                    self.next()
        self.depth -= 1
        if self.tok.kind is T.DEDENT:
            self.next()
        return n.Parallel(tuple(branches), join, on_fail, count, span=self.span(start))

    def branch(self) -> n.Branch:
        start = self.tok
        name = None
        if (self.tok.kind is T.NAME and self.peek().is_op("=")
                and self.tok.value not in STATEMENT_KEYWORDS):
            name = self.next().value
            self.next()
            body = self.value()
            if not _is_statement(body):
                body = n.ExprStmt(body, span=body.span)
            self.end_statement()
        else:
            body = self.statement()
        return n.Branch(name, body, span=self.span(start))

    def stmt_for(self, parallel_start: Token | None = None) -> n.Node:
        start = parallel_start or self.tok
        self.expect_keyword("for")
        item = self.expect_name("the loop variable").value
        index = None
        if self.tok.is_op(","):
            self.next()
            index = self.expect_name("the index variable after ','").value
        self.expect_keyword("in")
        collection = self.expression()
        body = self.body("the for loop")
        return n.For(item, collection, body, index, parallel_start is not None,
                     span=self.span(start))

    def stmt_repeat(self) -> n.Node:
        start = self.next()
        count = self.expression()
        index = None
        if self.tok.is_name("as"):
            self.next()
            index = self.expect_name("the index variable after 'as'").value
        body = self.body("repeat")
        return n.Repeat(count, body, index, span=self.span(start))

    def stmt_loop(self) -> n.Node:
        start = self.next()
        mode = condition = max_ = index = None
        if self.tok.is_name("until", "while"):
            mode = self.next().value
            condition = self.expression()
        if self.tok.is_op("("):
            self.next()
            self.expect_keyword("max")
            self.expect_op(":")
            max_ = self.integer("the maximum number of iterations")
            self.expect_op(")")
        if self.tok.is_name("as"):
            self.next()
            index = self.expect_name("the index variable after 'as'").value
        body = self.body("the loop")
        return n.Loop(body, mode, condition, max_, index, span=self.span(start))

    def clause(self, keyword: str) -> bool:
        """True if the next statement line starts with ``keyword`` (a continuation clause)."""
        if self.tok.is_name(keyword):
            return True
        if self.tok.kind is T.NEWLINE and self.peek().is_name(keyword):
            self.next()
            return True
        return False

    def stmt_try(self) -> n.Node:
        start = self.next()
        body = self.body("try")
        catch_body = catch_name = finally_body = None
        if self.clause("catch"):
            self.next()
            if self.tok.is_name("as"):
                self.next()
                catch_name = self.expect_name("the error variable after 'as'").value
            catch_body = self.body("catch")
        if self.clause("finally"):
            self.next()
            finally_body = self.body("finally")
        if catch_body is None and finally_body is None:
            self.report("E005", "'try' needs a 'catch' or a 'finally' block", start.span)
        return n.Try(body, catch_body, catch_name, finally_body, span=self.span(start))

    def stmt_if(self) -> n.Node:
        start = self.next()
        branches = [n.CondBranch(self.expression(), self.body("if"), span=self.span(start))]
        else_body = None
        while self.clause("elif"):
            elif_tok = self.next()
            cond = self.expression()
            branches.append(n.CondBranch(cond, self.body("elif"), span=self.span(elif_tok)))
        if self.clause("else"):
            self.next()
            else_body = self.body("else")
        return n.If(tuple(branches), else_body, span=self.span(start))

    def stmt_choice(self) -> n.Node:
        start = self.next()
        if self.tok.is_op(":"):
            criteria: n.Node = n.Discretion("", span=self.tok.span)
        else:
            criteria = self.expression()
        self.expect_op(":", "':' after the choice criteria")
        if self.tok.kind is not T.NEWLINE or self.peek().kind is not T.INDENT:
            self.fail("E005", "choice needs an indented block of 'option \"label\":' entries")
        self.next()
        self.next()
        options = []
        while self.tok.kind not in (T.DEDENT, T.EOF):
            if self.tok.kind is T.NEWLINE:
                self.next()
                continue
            before = self.pos
            try:
                if not self.tok.is_name("option"):
                    self.fail("E005", "a choice block holds only 'option \"label\":' entries; "
                              f"found {self.tok.describe()}")
                opt = self.next()
                label = self.string('the option label in quotes, e.g. option "Fast":')
                options.append(n.Option(label, self.body("the option"), span=self.span(opt)))
            except ParseError as err:
                self.diagnostics.append(err.diagnostic)
                self.synchronize()
                if self.pos == before:
                    self.next()
        if self.tok.kind is T.DEDENT:
            self.next()
        return n.Choice(criteria, tuple(options), span=self.span(start))

    # ------------------------------------------------------------------ properties
    def property_block(self) -> tuple[n.Property, ...]:
        """NEWLINE INDENT (name: value NEWLINE)* DEDENT."""
        self.next()  # NEWLINE
        self.nest(self.next())  # INDENT
        props: list[n.Property] = []
        while self.tok.kind not in (T.DEDENT, T.EOF):
            if self.tok.kind is T.NEWLINE:
                self.next()
                continue
            if self.tok.is_op("->", "|"):
                # An indented continuation line: the expression this block belongs to goes on;
                # the block's DEDENT comes after it and is consumed at the statement's end.
                self.pending_dedents += 1
                self.depth -= 1
                return tuple(props)
            before = self.pos
            try:
                props.append(self.property())
            except ParseError as err:
                if err.diagnostic.code == "E036":  # the block is the broken string's text
                    raise
                self.diagnostics.append(err.diagnostic)
                self.synchronize()
                if self.pos == before:
                    self.next()
        self.depth -= 1
        if self.tok.kind is T.DEDENT:
            self.next()
        return tuple(props)

    def property(self) -> n.Property:
        start = self.tok
        if self.tok.kind is not T.NAME or not self.peek().is_op(":"):
            self.fail("E005", f"expected a property ('name: value'), found {self.tok.describe()}")
        name = self.next()
        self.next()  # ':'
        if self.tok.kind is T.NEWLINE and self.peek().kind is T.INDENT:
            block_start = self.peek(2)
            props = self.property_block()
            value: n.Node = n.PropertyBlock(props, span=block_start.span.to(
                self.tokens[self.pos - 1].span))
            return n.Property(name.value, value, span=self.span(start), name_span=name.span)
        if self.tok.kind in (T.NEWLINE, T.EOF, T.DEDENT):
            self.fail("E005", f"property '{name.value}' has no value")
        self.single_line += 1
        try:
            value = self.expression()
        finally:
            self.single_line -= 1
        self.end_statement()
        return n.Property(name.value, value, span=self.span(start), name_span=name.span)

    # ------------------------------------------------------------------ expressions
    def expression(self) -> n.Node:
        start = self.tok
        expr = self.arrow()
        ops: list[n.PipeOp] = []
        while self.continues_with("|"):
            ops.append(self.pipe_op())
        if ops:
            return n.Pipeline(expr, tuple(ops), span=self.span(start))
        return expr

    def pipe_op(self) -> n.PipeOp:
        bar = self.next()
        kind = self.expect_name("map, filter, pmap or reduce after '|'")
        if kind.value in ("map", "filter", "pmap"):
            body = self.body(f"'{kind.value}'")
            return n.PipeOp(kind.value, body, span=self.span(bar))
        if kind.value == "reduce":
            self.expect_op("(", "'(accumulator, item)' after reduce")
            acc = self.expect_name("the accumulator name").value
            self.expect_op(",")
            var = self.expect_name("the item name").value
            self.expect_op(")")
            body = self.body("'reduce'")
            return n.PipeOp("reduce", body, acc, var, span=self.span(bar))
        self.fail("E005", f"unknown pipeline operation '{kind.value}' "
                  "(expected map, filter, pmap or reduce)", kind)

    def arrow(self) -> n.Node:
        start = self.tok
        steps = [self.or_expr()]
        while self.continues_with("->"):
            self.next()
            steps.append(self.or_expr())
        if len(steps) == 1:
            return steps[0]
        return n.Arrow(tuple(steps), span=self.span(start))

    def or_expr(self) -> n.Node:
        return self._binary(self.and_expr, ("or",), word=True)

    def and_expr(self) -> n.Node:
        return self._binary(self.not_expr, ("and",), word=True)

    def not_expr(self) -> n.Node:
        if self.tok.is_name("not"):
            start = self.next()
            self.nest(start)
            operand = self.not_expr()
            self.depth -= 1
            return n.UnaryOp("not", operand, span=self.span(start))
        return self.comparison()

    def comparison(self) -> n.Node:
        start = self.tok
        left = self.additive()
        if self.tok.is_op(*COMPARISONS):
            op = self.next().value
            right = self.additive()
            return n.BinaryOp(op, left, right, span=self.span(start))
        if self.tok.is_name("is"):
            word = self.next()
            op = "!=" if self.tok.is_name("not") and self.next() else "=="
            said = "is not" if op == "!=" else "is"
            self.warn("W020", f"'{said}' is newer syntax, read as '{op}' (write '{op}' in "
                      "OpenProse 0.8)", word.span.to(self.tokens[self.pos - 1].span))
            right = self.additive()
            return n.BinaryOp(op, left, right, span=self.span(start))
        return left

    def additive(self) -> n.Node:
        return self._binary(self.multiplicative, ("+", "-"))

    def multiplicative(self) -> n.Node:
        return self._binary(self.unary, ("*", "/"))

    def _binary(self, operand: Callable[[], n.Node], ops: tuple[str, ...],
                word: bool = False) -> n.Node:
        start = self.tok
        left = operand()
        while (self.tok.is_name(*ops) if word else self.tok.is_op(*ops)):
            op = self.next().value
            right = operand()
            left = n.BinaryOp(op, left, right, span=self.span(start))
        return left

    def unary(self) -> n.Node:
        if self.tok.is_op("-"):
            start = self.next()
            self.nest(start)
            operand = self.unary()
            self.depth -= 1
            return n.UnaryOp("-", operand, span=self.span(start))
        return self.postfix()

    def postfix(self) -> n.Node:
        start = self.tok
        expr = self.primary()
        while True:
            if self.tok.is_op("."):
                self.next()
                attr = self.expect_name("a property name after '.'").value
                expr = n.Member(expr, attr, span=self.span(start))
            elif self.tok.is_op("[") and self.tok.span.column == self.tokens[self.pos - 1].span.end_column \
                    and self.tok.span.line == self.tokens[self.pos - 1].span.end_line:
                self.next()
                index = self.expression()
                self.expect_op("]", "']' to close the index")
                expr = n.Index(expr, index, span=self.span(start))
            else:
                return expr

    def primary(self) -> n.Node:
        tok = self.tok
        if tok.kind is T.STRING:
            return self.string("a string")
        if tok.kind is T.NUMBER:
            self.next()
            value: int | float = float(tok.value) if "." in tok.value else int(tok.value)
            return n.Number(value, span=tok.span)
        if tok.kind is T.DISCRETION:
            self.next()
            return n.Discretion(tok.value, tok.multiline, span=tok.span)
        if tok.is_op("[", "{", "("):
            self.nest(tok)
            if tok.value == "[":
                inner = self.array()
            elif tok.value == "{":
                inner = self.object()
            else:
                self.next()
                inner = self.expression()
                self.expect_op(")", "')' to close the parenthesis")
            self.depth -= 1
            return inner
        if tok.kind is T.NAME:
            if tok.value in ("session", "resume") and not self.peek().is_op("=", "."):
                return self.session()
            if tok.value == "do" and not self.peek().is_op("=", "."):
                return self.do()
            if tok.value in ("parallel", "try", "loop", "if", "choice", "for", "repeat") \
                    and not self.peek().is_op("=", ".", ","):
                return self.value()
            self.refuse_later(tok)
            self.next()
            if tok.value in ("true", "false"):
                return n.Boolean(tok.value == "true", span=tok.span)
            if tok.value == "null":
                return n.Null(span=tok.span)
            if self.tok.is_op("(") and self.tok.span.column == tok.span.end_column:
                return self.program_call(tok)
            return n.Name(tok.value, span=tok.span)
        self.unexpected("a value")

    def refuse_later(self, tok: Token) -> None:
        """E035 for calls of a later version this compiler does not implement: ``http.get(…)``
        and the like, and ``env("NAME")``."""
        what = None
        if tok.value == "http" and self.peek().is_op(".") and self.peek(2).kind is T.NAME \
                and self.peek(3).is_op("("):
            what, last = f"'http.{self.peek(2).value}(...)' (an http.* call)", self.peek(3)
        elif tok.value == "env" and self.peek().is_op("(") and self.peek(2).kind is T.STRING:
            what, last = "'env(...)' (reading an environment variable)", self.peek()
        if what is not None:
            raise ParseError(Diagnostic(
                "E035", f"{what} is newer syntax that {NOT_IMPLEMENTED}",
                tok.span.to(last.span), Severity.ERROR, self.path))

    def array(self) -> n.Node:
        start = self.next()
        items = []
        while not self.tok.is_op("]"):
            items.append(self.expression())
            if not self.tok.is_op(","):
                break
            self.next()
        self.expect_op("]", "']' or ',' in the array")
        return n.Array(tuple(items), span=self.span(start))

    def object(self) -> n.Node:
        start = self.next()
        entries = []
        while not self.tok.is_op("}"):
            key_tok = self.tok
            if key_tok.kind is T.STRING:
                key = self.string("a key").text
                self.expect_op(":", "':' after a quoted key")
                entries.append(n.ObjectEntry(key, self.expression(), quoted_key=True,
                                             span=self.span(key_tok)))
            else:
                key = self.expect_name("a key or a name").value
                if self.tok.is_op(":"):
                    self.next()
                    entries.append(n.ObjectEntry(key, self.expression(), span=self.span(key_tok)))
                else:
                    entries.append(n.ObjectEntry(key, n.Name(key, span=key_tok.span),
                                                 shorthand=True, span=key_tok.span))
            if not self.tok.is_op(","):
                break
            self.next()
        self.expect_op("}", "'}' or ',' in the object")
        return n.Object(tuple(entries), span=self.span(start))

    def program_call(self, callee: Token) -> n.Node:
        self.next()  # '('
        args = []
        while not self.tok.is_op(")"):
            arg_tok = self.tok
            if arg_tok.kind is not T.NAME or not self.peek().is_op(":"):
                self.fail("E005", f"arguments to '{callee.value}(...)' are named: "
                          f"{callee.value}(input_name: value)")
            self.next()
            self.next()
            args.append(n.Argument(arg_tok.value, self.expression(), span=self.span(arg_tok)))
            if not self.tok.is_op(","):
                break
            self.next()
        self.expect_op(")", "')' or ',' in the call")
        return n.ProgramCall(callee.value, tuple(args), span=self.span(callee))

    def do(self) -> n.Node:
        start = self.next()
        if self.tok.is_op(":"):
            body = self.body("do")
            return n.DoBlock(body, span=self.span(start))
        name = self.expect_name("a block name or ':' after 'do'").value
        args: list[n.Node] = []
        has_parens = False
        if self.tok.is_op("("):
            has_parens = True
            self.next()
            while not self.tok.is_op(")"):
                args.append(self.expression())
                if not self.tok.is_op(","):
                    break
                self.next()
            self.expect_op(")", "')' or ',' in the block arguments")
        return n.DoCall(name, tuple(args), has_parens, span=self.span(start))

    def session(self) -> n.Node:
        start = self.next()
        resume = start.value == "resume"
        prompt = agent = label = None
        if resume:
            self.expect_op(":", "':' and an agent name after 'resume'")
            agent = self.expect_name("the persistent agent's name").value
        elif self.tok.kind is T.STRING:
            prompt = self.string("the session prompt")
        elif self.tok.is_op(":"):
            self.next()
            agent = self.expect_name("an agent name after 'session:'").value
        elif self.tok.kind is T.NAME and self.peek().is_op(":"):
            label = self.next().value
            self.next()
            if self.tok.kind is T.NAME:
                agent = self.next().value
        else:
            self.unexpected('a prompt in quotes, ": agent" or "name: agent" after session')
        if self.tok.is_op("("):
            self.fail("E005", "session options in parentheses are not supported: put each "
                      "property (e.g. 'retry: 3') on its own indented line under the session")
        if self.tok.is_op(":") and prompt is not None:
            self.report("E005", "no ':' after a session prompt: properties follow on indented "
                        "lines directly", self.tok.span)
            self.next()
        props: tuple[n.Property, ...] = ()
        if self.tok.kind is T.NEWLINE and self.peek().kind is T.INDENT:
            props = self.property_block()
        return n.Session(prompt, agent, props, label, resume, span=self.span(start))

    # ------------------------------------------------------------------ literals
    def string(self, expected: str) -> n.String:
        tok = self.tok
        if tok.kind is not T.STRING:
            self.unexpected(expected)
        self.next()
        return n.String(tok.parts, tok.triple, span=tok.span)

    def word_or_string(self, expected: str) -> str:
        if self.tok.kind is T.STRING:
            return self.string(expected).text
        return self.expect_name(expected).value

    def integer(self, expected: str) -> int:
        tok = self.tok
        if tok.kind is not T.NUMBER or "." in tok.value:
            self.unexpected(f"{expected} (a whole number)")
        self.next()
        return int(tok.value)


def _is_statement(node: n.Node) -> bool:
    return not isinstance(node, (
        n.String, n.Number, n.Boolean, n.Null, n.Name, n.Member, n.Index, n.Array, n.Object, n.Discretion,
        n.BinaryOp, n.UnaryOp, n.Session, n.Arrow, n.DoCall, n.ProgramCall, n.Pipeline,
    ))


def parse(source: str, path: str | None = None) -> tuple[n.Program | None, list[Diagnostic]]:
    """Parse ``source`` into a program. Syntax errors become diagnostics, never exceptions."""
    lexer = Lexer(source, path)
    tokens = lexer.tokenize()
    diagnostics = lexer.diagnostics
    parser = Parser(tokens, path, lexer.src)
    program = parser.parse_program()
    return program, diagnostics + parser.diagnostics


#: where a top-level statement may start: a name at the margin that continues nothing above
TOP_LEVEL = re.compile(r"^(?!(?:elif|else|catch|finally|option)\b)[A-Za-z_]", re.M)


@dataclass(frozen=True, slots=True)
class Piece:
    """The parse of a run of top-level statements, read on its own from its first line."""

    statements: tuple[n.Node, ...]
    lexed: tuple[Diagnostic, ...]  # the lexer's diagnostics
    parsed: tuple[Diagnostic, ...]  # the parser's
    tokens: tuple[Token, ...]  # up to its end of text (left out)
    comments: tuple[n.Span, ...]
    start: n.Span  # of its first token
    end: n.Span  # of its end of text
    deep: n.Node | None  # its first node nested too deeply (see nodes.deeper_than)
    declaring: tuple[n.Node, ...]  # its nodes that bind names (see nodes.declaring)
    #: its last token when a triple-quoted string: a failure right after it, in the next
    #: piece, is reported as a nested triple quote (see Parser.nested_triple)
    tail: Token | None
    #: the shift of every span of its tree, diagnostics, tokens and comments (and of its
    #: tail): added to when an edit moves it (see nodes.anchor); it is now at ``line``
    #: (where it was read from) plus its shift
    shift: list[int]
    line: int
    #: a key for each of its statements, naming its parse wherever it is moved (see
    #: Parses.keys): integers, unique in the Parses that read it, quick to hash
    keys: range


class Parses:
    """Parses successive versions of one text (an editor's buffer), keeping the parse of each
    run of top-level statements for the next version: a change re-reads only the statements
    whose text it changed; those it moved up or down keep their parse, moved in place (one
    add to the shift its spans share, see nodes.anchor; no tree copied), so the trees it
    gives are those of its latest text only. A piece is read on its own only where that
    reads it as the whole text would (nothing left open at its end, nothing reported past
    it), so :meth:`parse` always equals :func:`parse` of the whole text."""

    def __init__(self) -> None:
        #: by text, whether the text's end, and where the last piece's tail is: its parse
        #: and, when it cannot be read on its own (None), the line it was last read from
        #: (a parse is where its line and shift say), for this text's pieces and some of
        #: the texts' before
        self.kept: dict[tuple[str, bool, tuple[int, ...] | None],
                        tuple[int, Piece | None]] = {}
        #: for each top-level statement of the last text, in order, a key that names its
        #: parse whatever lines it was moved by (see Piece.keys), and the next key to give
        self.keys: tuple[int, ...] = ()
        self.serial = 0
        #: the validator's findings on the statements of the last text, by key (see
        #: validator.validate), checked again only where they may differ
        self.checked: dict[object, object] = {}
        #: the language server's semantic tokens of each piece of the last texts, by the
        #: piece's key (its text: the same wherever an edit moved it)
        self.coloured: dict[object, object] = {}
        #: how the last text was cut: the text, where each statement starts and its line,
        #: for each piece where it starts (an index into those), its key, its parse and how
        #: many statements came before it, and where each piece ends
        self.cut: tuple[str, list[int], list[int],
                        list[tuple[int, tuple[str, bool, tuple[int, ...] | None], Piece, int]],
                        list[int]] = ("", [0], [1], [], [])

    def parse(self, source: str) -> Parsed:
        """What ``compile`` reads of a text: its tree, the parser's diagnostics, its first
        node nested too deeply (the last piece's that has one: the search runs from the last
        statement back), and its nodes that bind names."""
        pieces = self.pieces(source)
        statements: list[n.Node] = []
        lexed: list[Diagnostic] = []
        parsed: list[Diagnostic] = []
        declaring: list[n.Node] = []
        deep = None
        for piece in pieces:  # each piece's in turn, in one pass: reaching them is the cost
            statements += piece.statements
            declaring += piece.declaring
            if piece.lexed:
                lexed += piece.lexed
            if piece.parsed:
                parsed += piece.parsed
            if piece.deep:
                deep = piece.deep
        program = n.Program(tuple(statements), span=pieces[0].start.to(pieces[-1].end))
        return program, (*lexed, *parsed), deep, tuple(declaring)

    def lexed(self, source: str) -> tuple[list[Token], list[n.Span]]:
        """The tokens and comments of the text (its end of text left out)."""
        pieces = self.pieces(source)
        return [t for p in pieces for t in p.tokens], [x for p in pieces for x in p.comments]

    def pieces(self, source: str) -> list[Piece]:
        text = source.replace("\r\n", "\n").replace("\r", "\n")
        old, old_starts, old_lines, old_cut, old_ends = self.cut
        # the pieces ending well before the first character changed are the last text's, at
        # the same lines (where a statement starts is decided by the few characters around)
        same = _common_prefix(old, text)
        m = bisect.bisect_right(old_ends, same - 16)
        i = old_cut[m][0] if m else 0
        # and the pieces starting well after the last character changed (``r`` on), the
        # same text, moved by ``offset`` characters (and ``moved`` lines)
        r = bisect.bisect_left(old_ends, len(old) - _common_suffix(
            old, text, min(len(old), len(text)) - same) + 16) + 1
        offset, shared = len(text) - len(old), None
        starts = old_starts[:i] if i else [0]
        found = (x.start() for x in TOP_LEVEL.finditer(text, old_starts[i] if i else 1))
        if r < len(old_cut):
            start = old_starts[old_cut[r][0]] + offset
            starts.extend(itertools.takewhile(lambda x: x < start, found))
            shared = len(starts)
            starts.extend(x + offset for x in old_starts[old_cut[r][0]:-1])
        else:
            starts.extend(found)
        starts.append(len(text))
        lines = old_lines[:i] if i else [1]
        for k in range(len(lines), len(starts) - 1 if shared is None else shared + 1):
            lines.append(lines[-1] + text.count("\n", starts[k - 1], starts[k]))
        moved = 0
        if shared is not None:
            moved = lines[-1] - old_lines[old_cut[r][0]]
            lines.extend(x + moved for x in old_lines[old_cut[r][0] + 1:])
        cut, ends = old_cut[:m], old_ends[:m]
        out = [c[2] for c in cut]
        placed = {id(p) for p in out}  # a parse is moved in place: placed once in a text
        kept = self.kept  # added to; rebuilt from this text's pieces once it has grown
        keys = list(self.keys[:old_cut[m][3]]) if m else []
        last = len(starts) - 1
        while i < last:
            step = 1
            tail = out[-1].tail if out else None
            if i == shared and tail is None and old_cut[r][1][2] is None \
                    and placed.isdisjoint(id(c[2]) for c in old_cut[r:]):
                # read from here on as before (the same keys): the last text's pieces,
                # moved by the lines the edit added or removed
                before, first = len(keys) - old_cut[r][3], old_cut[r][0]
                for c in old_cut[r:] if moved else ():
                    c[2].shift[0] += moved
                cut.extend((k - first + i, key, piece, count + before)
                           for k, key, piece, count in old_cut[r:])
                out.extend(c[2] for c in old_cut[r:])
                ends.extend(e + offset for e in old_ends[r:])
                keys.extend(self.keys[old_cut[r][3]:])
                break
            while True:  # widen a piece that cannot be read alone: 1, 2, 4, ... statements
                j = min(i + step, last)
                key = (text[starts[i]:starts[j]], j == last, tail and _at(tail.span))
                line, piece = kept.get(key) or (0, None)
                if piece is not None and id(piece) in placed:
                    line, piece = 0, None  # the same text earlier in this one: read again
                elif piece is not None:
                    line = piece.line + piece.shift[0]
                if line != lines[i] and piece is not None and tail is None:
                    piece = _moved(piece, lines[i] - line)  # the same text, moved by an edit
                elif line != lines[i]:
                    piece = _piece(key[0], lines[i], lines[j] if j < last else None, tail,
                                   self.serial)
                    self.serial += len(piece.keys) if piece is not None else 0
                kept[key] = lines[i], piece
                if piece is not None:
                    break
                step *= 2
            out.append(piece)
            placed.add(id(piece))
            cut.append((i, key, piece, len(keys)))
            ends.append(starts[j])
            keys.extend(piece.keys)
            i = j
        if len(kept) > 2 * len(cut) + 64:
            kept = {c[1]: (lines[c[0]], c[2]) for c in cut}
        self.kept, self.keys = kept, tuple(keys)
        self.cut = text, starts, lines, cut, ends
        return out


def _common_suffix(a: str, b: str, most: int) -> int:
    """How many characters, at most ``most``, ``a`` and ``b`` end with in common."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a.startswith(b[len(b) - mid:len(b) - lo], len(a) - mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_prefix(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` begin with in common (compared in halves)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a.startswith(b[lo:mid], lo):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _at(span: n.Span) -> tuple[int, ...]:
    """Where ``span`` is now (a span is moved in place: no key to keep)."""
    return span.line, span.column, span.end_line, span.end_column


def _moved(piece: Piece, lines: int) -> Piece:
    piece.shift[0] += lines
    return piece


def _piece(text: str, line: int, next_line: int | None, after: Token | None, first: int
           ) -> Piece | None:
    """``text`` from ``line`` parsed on its own (``after``: the tail of the piece before), its
    statements' keys from ``first`` on; None when the text after it (from ``next_line``)
    could change how it reads."""
    lexer = Lexer(text, None, line)
    tokens = lexer.tokenize()
    parser = Parser([after, *tokens] if after else tokens, None, lexer.src, line)
    parser.pos = 1 if after else 0
    statements = parser.statements(until=T.EOF)
    diagnostics = (*lexer.diagnostics, *parser.diagnostics)
    if next_line is not None and (
            lexer.unfinished or parser.pending_dedents or parser.depth or parser.inline
            or parser.single_line or any(d.span.line >= next_line for d in diagnostics)):
        return None
    lexed, parsed = tuple(lexer.diagnostics), tuple(parser.diagnostics)
    body, kept = tuple(statements), tuple(tokens[:-1])
    comments, start, end = tuple(lexer.comments), tokens[0].span, tokens[-1].span
    tail = _tail(tokens)
    return Piece(body, lexed, parsed, kept, comments, start, end,
                 n.deeper_than(MAX_TREE_DEPTH, body, 2), n.declaring(body), tail,
                 n.anchor((body, lexed, parsed, kept, comments, start, end)), line,
                 range(first, first + len(body)))


def _tail(tokens: list[Token]) -> Token | None:
    last = next((t for t in reversed(tokens) if t.kind not in (T.NEWLINE, T.INDENT, T.DEDENT,
                                                                  T.EOF)), None)
    return last if last is not None and last.kind is T.STRING and last.triple else None
