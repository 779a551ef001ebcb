"""Static checks: every diagnostic that can be decided without running the program.

Codes follow docs/diagnostics.md. Name rules, chosen so every real program passes:
- Declarations (``let``/``const``/``output NAME``/``input``/parallel branch names/destructuring)
  are visible program-wide, except loop, pipeline, catch and block-parameter names, which are
  scoped to their body.
- A duplicate ``let``/``const`` (E019) or ``output`` (E024) is one declared twice in the same
  statement list; declarations in different branches of an ``if`` or ``choice`` are fine.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from openprose.language import nodes as n
from openprose.language.analysis import NodeVisitor
from openprose.language.diagnostics import Diagnostic, Severity
from openprose.language.files import ProgramFileError, read_program_file
from openprose.paths import PathRefused, contained

MODELS = frozenset({"sonnet", "opus", "haiku"})
BACKOFFS = frozenset({"none", "linear", "exponential"})
JOINS = frozenset({"all", "first", "any"})
ON_FAIL = frozenset({"fail-fast", "continue", "ignore"})
SESSION_PROPERTIES = frozenset({"model", "prompt", "context", "retry", "backoff", "permissions",
                                "skills"})
AGENT_PROPERTIES = SESSION_PROPERTIES | {"persist"}
PATTERN_PERMISSIONS = frozenset({"read", "write", "execute"})
MODE_PERMISSIONS = frozenset({"bash", "network"})
PERMISSION_MODES = frozenset({"allow", "deny", "prompt"})
MAX_PROMPT = 10_000
#: The deepest block recursion the engine runs (``max_depth`` above it is an error).
MAX_DEPTH_SUPPORTED = 1_000
SKILL_SOURCE = re.compile(r"^(github:[\w.-]+/[\w.-]+(/[\w./-]*)?|npm:(@[\w.-]+/)?[\w.-]+"
                          r"|\.{1,2}/.*|/.*)$")
# Block-scoped bindings are stored as NAME__ID (NAME__ID.md on the filesystem): a name of that
# shape could be two bindings at once.
SCOPED_STORAGE_NAME = re.compile(r"^.+__\d+$")
#: the statements a body declares names with once (see Validator.declared_once)
_ONCE = frozenset({n.Let, n.Output})
#: the statements that define what any other may name (see _Definitions)
DEFINING = (n.AgentDef, n.BlockDef, n.Use, n.ImportSkill)
USE_PATH = re.compile(r"^(https?://\S+|@?[\w.-]+/[\w./-]+|\.{0,2}/?[\w./-]+\.prose)$")


def import_base(importer: str | None, root: Path | None) -> Path:
    """The directory a local ``use`` path is relative to: the importing program's own
    directory. In a project (``root``) a relative program path is the project's, an inline
    program sits at the project's top; without one, paths are the working directory's (the
    command line's files)."""
    if importer is None:
        return root if root is not None else Path.cwd()
    where = Path(importer)
    if root is not None and not where.is_absolute():
        where = root / where
    return where.parent


def local_import(target: str, importer: str | None, root: Path | None) -> Path:
    """Where a local ``use`` target is; in a project it must stay inside it
    (:class:`~openprose.paths.PathRefused` otherwise)."""
    base = import_base(importer, root)
    if root is None:
        return base / target
    return contained(target, [root], base=base, what="use", within="the project")


def load_contract(path: Path) -> n.Program | None:
    """Parse the local file a ``use`` names (see :func:`local_import`), to learn its inputs
    and outputs; None when it cannot be read."""
    from openprose.language.parser import parse

    try:
        source = read_program_file(path)
    except ProgramFileError:
        return None
    program, _ = parse(source, str(path))
    return program


class Validator(NodeVisitor):
    """Both passes over a program. Pass 2 dispatches a statement or expression by its class:
    ``visit(node, scope, in_catch)`` calls ``visit_<Node>``; a node without a method has
    nothing to check. ``scope`` holds the names bound around the node (loop, pipeline, catch,
    block parameters); ``in_catch`` whether a bare ``throw`` may re-raise there."""

    def __init__(self, program: n.Program, path: str | None, root: Path | None,
                 declaring: tuple[n.Node, ...] | None = None,
                 keys: tuple[object, ...] | None = None,
                 checked: dict[object, object] | None = None) -> None:
        self.program = program
        self.declaring = declaring  # nodes.declaring of the program, when known
        self.keys, self.checked = keys, checked  # see validate
        self.path = path
        self.root = root
        self.diagnostics: list[Diagnostic] = []
        self.agents: dict[str, n.AgentDef] = {}
        self.blocks: dict[str, n.BlockDef] = {}
        self.uses: dict[str, n.Use] = {}
        self.contracts: dict[str, n.Program | None] = {}
        self.skills: set[str] = set()
        self.declared: set[str] = set()
        self.consts: dict[str, n.Node] = {}
        self.lets: set[str] = set()
        self.call_results: dict[str, str] = {}

    # ------------------------------------------------------------------ reporting
    def error(self, code: str, message: str, span: n.Span) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, Severity.ERROR, self.path))

    def warn(self, code: str, message: str, span: n.Span) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, Severity.WARNING, self.path))

    # ------------------------------------------------------------------ pass 1: definitions
    def collect(self) -> None:
        inputs: dict[str, n.Input] = {}
        definitions = _Definitions(self)
        for stmt in self.program.body:  # by the class itself: this runs at every change
            if type(stmt) in DEFINING:
                definitions.visit(stmt)
        found = self.declaring
        declared, lets, consts, agents = self.declared, self.lets, self.consts, self.agents
        for node in n.declaring(self.program.body) if found is None else found:
            # the names it binds, and how (an output, input or parallel branch: no kind)
            names, kind = n.bound_by(node), getattr(node, "kind", None)
            if isinstance(node, n.Input):
                if not node.name:
                    self.error("E020", "input needs a name: input NAME: \"description\"", node.span)
                elif node.name in inputs:
                    self.error("E021", f"input '{node.name}' is already declared on line "
                               f"{inputs[node.name].span.line}", node.span)
                else:
                    inputs[node.name] = node
                if isinstance(node.prompt, n.String) and not node.prompt.text.strip():
                    self.warn("W016", f"input '{node.name}' has an empty description; say what "
                              "value the caller should give", node.prompt.span)
            for name in names:
                declared.add(name)
                self.check_storage_name(name, "variable", node)
                if kind == "const":
                    consts.setdefault(name, node)
                elif kind is not None:
                    lets.add(name)
                if name in agents:
                    self.error("E031", f"'{name}' is the name of an agent; choose another name "
                               "for this variable", node.span)

    def check_storage_name(self, name: str, what: str, node: n.Node) -> None:
        if "__" in name and SCOPED_STORAGE_NAME.match(name):
            self.error("E033", f"{what} '{name}' ends in '__' and digits, the way a block "
                       "call's bindings are stored (NAME__ID): choose another name", node.span)

    def collect_use(self, use: n.Use) -> None:
        target = use.path.text.strip()
        if not target:
            self.error("E011", "use needs a program path, e.g. use \"handle/slug\"", use.path.span)
            return
        if not USE_PATH.match(target):
            self.error("E012", f"'{target}' is not a program path: write handle/slug, an "
                       "http(s) URL, or a relative path ending in .prose", use.path.span)
            return
        for handle, other in self.uses.items():
            if other.path.text == target or handle == use.handle:
                what = "program" if other.path.text == target else f"name '{handle}'"
                self.error("E010", f"this {what} is already imported on line "
                           f"{other.span.line}", use.span)
                return
        self.uses[use.handle] = use
        self.skills.add(use.handle)
        local = not target.startswith(("http://", "https://")) and target.endswith(".prose")
        self.contracts[use.handle] = None
        if not local:
            return
        try:  # refused only in a project (self.root)
            path = local_import(target, self.path, self.root)
        except PathRefused as err:
            self.error("E034", f"{err}: a program imports only its project's files",
                       use.path.span)
            return
        self.contracts[use.handle] = load_contract(path)

    def collect_skill_import(self, imp: n.ImportSkill) -> None:
        self.skills.add(imp.name.text)
        if not SKILL_SOURCE.match(imp.source.text):
            self.warn("W006", f"unknown skill source '{imp.source.text}': expected "
                      "github:owner/repo[/path], npm:package or a local path (./, ../, /)",
                      imp.source.span)

    # ------------------------------------------------------------------ pass 2: statements
    def run(self) -> list[Diagnostic]:
        self.collect()
        if self.keys is None or self.checked is None or any(self.contracts.values()):
            self.statements(self.program.body, frozenset(), in_catch=False)
            return self.diagnostics
        # what every statement's findings may read of the others (a contract read from a
        # file may change without the text: those programs are checked in full), and the
        # names whose definitions changed since the text checked before
        found = self.checked
        where, definitions = (self.path, self.root), self.definitions()
        before = found.get(None)
        if not isinstance(before, tuple) or before[0] != where:
            found.clear()
            changed = frozenset()
        elif before[1] == definitions:
            changed = frozenset()
        else:  # the names added to or left out of a table, or known otherwise there
            changed = frozenset().union(*(
                old ^ new if isinstance(new, frozenset) else
                {name for name, _ in old.items() ^ new.items()}
                for old, new in zip(before[1], definitions, strict=True)))
        read: set[str] = set()  # the names the statement being checked looked up
        for table in ("declared", "lets", "consts", "agents", "blocks", "uses", "skills",
                      "contracts"):
            setattr(self, table, _Reads(getattr(self, table), read))
        self.statements(self.program.body, frozenset(), False, found, (changed, read))
        # the findings of statements no longer in the text go: the names changed until
        # one is written again are not known
        for key in found.keys() - set(self.keys):
            del found[key]
        found[None] = where, definitions
        return self.diagnostics

    def definitions(self) -> tuple[frozenset[str] | dict[str, object], ...]:
        """What a top-level statement's checks may read of the others, table by table: the
        names bound (and how), imported and their skills; each agent and whether it
        persists, each block's parameters, each const's line and whether it is a string."""
        return (frozenset(self.declared), frozenset(self.lets), frozenset(self.uses),
                frozenset(self.skills),
                {name: agent.property("persist") is None for name, agent in self.agents.items()},
                {name: block.params for name, block in self.blocks.items()},
                {name: (const.span.line, isinstance(getattr(const, "value", None), n.String))
                 for name, const in self.consts.items()})

    def top(self, stmt: n.Node, key: object, found: dict[object, object],
            read: set[str]) -> None:
        """Check a top-level statement whose findings kept (see :meth:`statements`) are not
        its own, keeping them for its parse; kept only from where no earlier statement has
        bound a program call's result (which the checks read)."""
        if self.call_results:
            found.pop(key, None)
            self.visit(stmt, frozenset(), False)
            return
        start = len(self.diagnostics)
        read.clear()
        self.visit(stmt, frozenset(), False)
        found[key] = (stmt.span.line, tuple(self.diagnostics[start:]), tuple(self.call_results.items()),
                      frozenset(read))

    def statements(self, body: tuple[n.Node, ...], scope: frozenset[str], in_catch: bool,
                   found: dict[object, object] | None = None,
                   names: tuple[frozenset[str], set[str]] = (frozenset(), set())) -> None:
        """``found``: the findings kept for the program's top-level statements (``body``);
        ``names``: the names whose definitions changed, and the set each statement's checks
        record the names they look up in (see :meth:`top`)."""
        lets: dict[str, n.Node] = {}
        outputs: dict[str, n.Node] = {}
        if found is None:
            for stmt in body:
                self.declared_once(stmt, scope, lets, outputs)
                self.visit(stmt, scope, in_catch)
            return
        # the findings kept, taken here without a call: most statements of a long text are
        # unchanged, and this runs for each at every change. They are the statement's when
        # there are none or they were made on the line it is on now (their messages may
        # name lines), and they looked up none of the changed names (nor all of them, as
        # a "did you mean" does)
        changed, read = names
        kept_for, call_results, diagnostics = found.get, self.call_results, self.diagnostics
        for stmt, key in zip(body, self.keys, strict=True):  # type: ignore[arg-type]
            if type(stmt) in _ONCE:
                self.declared_once(stmt, scope, lets, outputs)
            kept: Any = kept_for(key)
            if kept is not None and not call_results \
                    and (not kept[1] or kept[0] == stmt.span.line) \
                    and (not changed or (kept[3].isdisjoint(changed) and EVERY not in kept[3])):
                if kept[1]:
                    diagnostics.extend(kept[1])
                if kept[2]:
                    call_results.update(kept[2])
            else:
                self.top(stmt, key, found, read)

    def declared_once(self, stmt: n.Node, scope: frozenset[str], lets: dict[str, n.Node],
                      outputs: dict[str, n.Node]) -> None:
        """A ``let`` or ``output`` of a body: each name declared once in it (``lets`` and
        ``outputs``: those declared before), a ``let`` hiding one of ``scope`` warned of."""
        if isinstance(stmt, n.Let):
            for name in n.bound_by(stmt):
                if name in lets:
                    self.error("E019", f"'{name}' is already declared on line "
                               f"{lets[name].span.line}; assign to it without "
                               f"'{stmt.kind}' to change it", stmt.span)
                elif name in scope:
                    self.warn("W017", f"'{name}' hides the variable of the same name from "
                              "the enclosing scope", stmt.span)
                lets[name] = stmt
        elif isinstance(stmt, n.Output) and stmt.name:
            if stmt.name in outputs:
                self.error("E024", f"output '{stmt.name}' is already declared on line "
                           f"{outputs[stmt.name].span.line}", stmt.span)
            outputs[stmt.name] = stmt

    def generic_visit(self, node: n.Node, *args: object, **kwargs: object) -> None:
        return None

    def visit_AgentDef(self, stmt: n.AgentDef, scope: frozenset[str], in_catch: bool) -> None:
        self.properties(stmt.properties, AGENT_PROPERTIES, scope, f"agent '{stmt.name}'")

    def visit_BlockDef(self, stmt: n.BlockDef, scope: frozenset[str], in_catch: bool) -> None:
        self.block_def(stmt)

    def visit_Let(self, stmt: n.Let, scope: frozenset[str], in_catch: bool) -> None:
        self.expr(stmt.value, scope)
        if isinstance(stmt.target, n.Destructure):
            self.destructure(stmt.target, stmt.value)
        elif isinstance(stmt.value, n.ProgramCall):
            self.call_results[stmt.target] = stmt.value.callee

    def visit_Assign(self, stmt: n.Assign, scope: frozenset[str], in_catch: bool) -> None:
        self.assignment(stmt, scope)

    def visit_Output(self, stmt: n.Output, scope: frozenset[str], in_catch: bool) -> None:
        self.expr(stmt.value, scope)

    def visit_ExprStmt(self, stmt: n.ExprStmt, scope: frozenset[str], in_catch: bool) -> None:
        self.expr(stmt.expr, scope)

    def visit_Parallel(self, stmt: n.Parallel, scope: frozenset[str], in_catch: bool) -> None:
        self.parallel(stmt, scope, in_catch)

    def visit_Repeat(self, stmt: n.Repeat, scope: frozenset[str], in_catch: bool) -> None:
        self.expr(stmt.count, scope)
        self.loop_body(stmt.body, scope, (stmt.index,), stmt, in_catch)

    def visit_For(self, stmt: n.For, scope: frozenset[str], in_catch: bool) -> None:
        self.expr(stmt.collection, scope)
        self.loop_body(stmt.body, scope, (stmt.item, stmt.index), stmt, in_catch)

    def visit_Loop(self, stmt: n.Loop, scope: frozenset[str], in_catch: bool) -> None:
        if stmt.condition is not None:
            self.expr(stmt.condition, scope)
        if stmt.condition is None and stmt.max is None:
            self.warn("W015", "this loop has neither a condition nor (max: N): it runs "
                      "until the engine's safety limit stops it", stmt.span)
        if stmt.max is not None and stmt.max < 1:
            self.error("E005", "(max: N) must be at least 1", stmt.span)
        self.loop_body(stmt.body, scope, (stmt.index,), stmt, in_catch)

    def visit_Try(self, stmt: n.Try, scope: frozenset[str], in_catch: bool) -> None:
        self.statements(stmt.body, scope, in_catch)
        if stmt.catch_body is not None:
            names = (stmt.catch_name,) if stmt.catch_name else ()
            self.loop_body(stmt.catch_body, scope, names, stmt, in_catch=True,
                           role="error variable")
        if stmt.finally_body is not None:
            self.statements(stmt.finally_body, scope, in_catch)

    def visit_Throw(self, stmt: n.Throw, scope: frozenset[str], in_catch: bool) -> None:
        if stmt.message is None and not in_catch:
            self.error("E005", "a bare 'throw' re-raises the caught error, so it only "
                       "works inside a catch block; give a message: throw \"...\"",
                       stmt.span)
        elif stmt.message is not None:
            self.expr(stmt.message, scope)

    def visit_Choice(self, stmt: n.Choice, scope: frozenset[str], in_catch: bool) -> None:
        self.choice(stmt, scope, in_catch)

    def visit_If(self, stmt: n.If, scope: frozenset[str], in_catch: bool) -> None:
        for branch in stmt.branches:
            self.expr(branch.condition, scope)
            self.statements(branch.body, scope, in_catch)
        if stmt.else_body is not None:
            self.statements(stmt.else_body, scope, in_catch)

    def visit_DoBlock(self, stmt: n.DoBlock, scope: frozenset[str], in_catch: bool) -> None:
        self.statements(stmt.body, scope, in_catch)

    def visit_Input(self, stmt: n.Input, scope: frozenset[str], in_catch: bool) -> None:
        if isinstance(stmt.prompt, n.String):
            self.string(stmt.prompt, scope)

    def block_def(self, block: n.BlockDef) -> None:
        seen: set[str] = set()
        for param in block.params:
            if param in seen:
                self.error("E019", f"parameter '{param}' appears twice in block '{block.name}'",
                           block.span)
            seen.add(param)
            self.check_storage_name(param, "parameter", block)
        if block.max_depth is not None and block.max_depth < 1:
            self.error("E005", "max_depth must be at least 1", block.span)
        if block.max_depth is not None and block.max_depth > MAX_DEPTH_SUPPORTED:
            self.error("E005", f"max_depth {block.max_depth} is above the engine's limit of "
                       f"{MAX_DEPTH_SUPPORTED:,}", block.span)
        self.statements(block.body, frozenset(block.params), in_catch=False)

    def loop_body(self, body: tuple[n.Node, ...], scope: frozenset[str],
                  names: tuple[str | None, ...], node: n.Node, in_catch: bool,
                  role: str = "loop variable") -> None:
        fresh = {name for name in names if name}
        for name in sorted(fresh):
            if name in scope or name in self.declared or name in self.agents:
                what = "an agent" if name in self.agents else "a variable"
                self.warn("W017", f"{role} '{name}' hides {what} of the same name", node.span)
        self.statements(body, scope | fresh, in_catch)

    def assignment(self, stmt: n.Assign, scope: frozenset[str]) -> None:
        self.expr(stmt.value, scope)
        name = stmt.target
        if name in scope:
            return
        if name in self.consts and name not in self.lets:
            self.error("E030", f"'{name}' is a const (line {self.consts[name].span.line}) and "
                       "cannot be reassigned; declare it with let instead", stmt.span)
        elif name not in self.declared:
            self.error("E029", f"assignment to undeclared variable '{name}': declare it first "
                       f"with 'let {name} = ...'{did_you_mean(name, self.declared, '; or ')}",
                       stmt.span)

    def parallel(self, par: n.Parallel, scope: frozenset[str], in_catch: bool) -> None:
        if par.join not in JOINS:
            self.error("E005", f"unknown join strategy '{par.join}' (expected \"all\", \"first\" "
                       "or \"any\")", par.span)
        if par.on_fail not in ON_FAIL:
            self.error("E005", f"unknown on-fail policy '{par.on_fail}' (expected \"fail-fast\", "
                       "\"continue\" or \"ignore\")", par.span)
        if par.count is not None:
            if par.join != "any":
                self.error("E005", "count: only applies to the \"any\" join strategy", par.span)
            elif par.count < 1:
                self.error("E005", "count: must be at least 1", par.span)
            elif par.count > len(par.branches):
                self.warn("W012", f"count: {par.count} is more than the {len(par.branches)} "
                          "branches, so the block can never succeed", par.span)
        if not par.branches:
            self.error("E005", "parallel block has no branches", par.span)
        names: dict[str, n.Branch] = {}
        for branch in par.branches:
            if branch.name:
                if branch.name in names:
                    self.error("E019", f"branch name '{branch.name}' is used twice in this "
                               "parallel block", branch.span)
                names[branch.name] = branch
            self.statements((branch.body,), scope, in_catch)

    def choice(self, choice: n.Choice, scope: frozenset[str], in_catch: bool) -> None:
        self.expr(choice.criteria, scope)
        if isinstance(choice.criteria, n.Discretion) and not choice.criteria.text.strip():
            self.error("E005", "choice needs criteria: choice **what to decide on**:",
                       choice.criteria.span)
        if not choice.options:
            self.error("E005", "choice has no options: add 'option \"label\":' entries",
                       choice.span)
        labels: dict[str, n.Option] = {}
        for option in choice.options:
            label = option.label.text
            if label in labels:
                self.warn("W013", f"option \"{label}\" appears twice; only the first can be "
                          "chosen", option.span)
            labels.setdefault(label, option)
            if not option.body:
                self.warn("W014", f"option \"{label}\" has an empty body", option.span)
            self.statements(option.body, scope, in_catch)

    def destructure(self, target: n.Destructure, value: n.Node) -> None:
        if not isinstance(value, n.ProgramCall):
            return
        outputs = self.program_outputs(value.callee)
        if outputs is None:
            return
        for name in target.names:
            if name not in outputs:
                self.error("E028", f"program '{value.callee}' has no output '{name}' (it has: "
                           f"{', '.join(sorted(outputs)) or 'none'})", target.span)

    def program_outputs(self, handle: str) -> set[str] | None:
        contract = self.contracts.get(handle)
        if contract is None:
            return None
        return {node.name for node in n.walk(contract) if isinstance(node, n.Output) and node.name}

    # ------------------------------------------------------------------ expressions
    def expr(self, node: n.Node, scope: frozenset[str]) -> None:
        """Check ``node`` where a value is expected: a statement there (``let x = try: ...``)
        is not inside the surrounding catch block."""
        self.visit(node, scope, False)

    def visit_Name(self, node: n.Name, scope: frozenset[str], in_catch: bool) -> None:
        self.reference(node.id, node.span, scope)

    def visit_String(self, node: n.String, scope: frozenset[str], in_catch: bool) -> None:
        self.string(node, scope)

    def visit_Member(self, node: n.Member, scope: frozenset[str], in_catch: bool) -> None:
        self.member(node, scope)

    def visit_Session(self, node: n.Session, scope: frozenset[str], in_catch: bool) -> None:
        self.session(node, scope)

    def visit_DoCall(self, node: n.DoCall, scope: frozenset[str], in_catch: bool) -> None:
        self.do_call(node, scope)

    def visit_ProgramCall(self, node: n.ProgramCall, scope: frozenset[str],
                          in_catch: bool) -> None:
        self.program_call(node, scope)

    def visit_Pipeline(self, node: n.Pipeline, scope: frozenset[str], in_catch: bool) -> None:
        self.expr(node.source, scope)
        for op in node.ops:
            names = {op.variable} | ({op.accumulator} if op.accumulator else set())
            self.loop_body(op.body, scope, tuple(sorted(names)), node, in_catch=False,
                           role="pipeline variable")

    def visit_Object(self, node: n.Object, scope: frozenset[str], in_catch: bool) -> None:
        for entry in node.entries:
            self.expr(entry.value, scope)

    def visit_Arrow(self, node: n.Arrow, scope: frozenset[str], in_catch: bool) -> None:
        for step in node.steps:
            self.expr(step, scope)

    def visit_Array(self, node: n.Array | n.BinaryOp | n.UnaryOp | n.Index,
                    scope: frozenset[str], in_catch: bool) -> None:
        for child in node.children():
            self.expr(child, scope)

    visit_BinaryOp = visit_UnaryOp = visit_Index = visit_Array

    def reference(self, name: str, span: n.Span, scope: frozenset[str]) -> None:
        if name in scope or name in self.declared or name in self.uses:
            return
        if name in self.agents:
            return  # an agent named as context: its memory
        self.error("E029", f"undefined variable '{name}'{self.closest(name, scope)}", span)

    def closest(self, name: str, scope: frozenset[str]) -> str:
        """``; did you mean 'x'?`` naming the defined name closest to ``name`` (if any)."""
        return did_you_mean(name, scope | self.declared | set(self.uses), "; ")

    def member(self, node: n.Member, scope: frozenset[str]) -> None:
        self.expr(node.obj, scope)
        if isinstance(node.obj, n.Name) and node.obj.id in self.call_results \
                and node.obj.id not in scope:
            self.check_output(node.obj.id, node.attr, node.span)

    def check_output(self, variable: str, attr: str, span: n.Span) -> None:
        outputs = self.program_outputs(self.call_results[variable])
        if outputs is not None and attr not in outputs:
            self.error("E028", f"'{variable}' has no output '{attr}' (it has: "
                       f"{', '.join(sorted(outputs)) or 'none'})", span)

    def string(self, node: n.String, scope: frozenset[str]) -> None:
        for part in node.interpolations:
            root = part.path[0]
            if root in scope or root in self.declared or root in self.uses:
                if len(part.path) > 1 and root in self.call_results and root not in scope:
                    self.check_output(root, part.path[1], part.span)
                continue
            if node.triple:
                self.warn("W018", f"'{{{root}}}' names no variable, so it stays as literal text "
                          "(write \\{ for a literal brace)", part.span)
            else:
                self.error("E029", f"undefined variable '{root}' in interpolation"
                           f"{self.closest(root, scope)}", part.span)

    def session(self, session: n.Session, scope: frozenset[str]) -> None:
        where = "resume" if session.resume else "session"
        if session.agent is not None and session.agent not in self.agents:
            self.error("E007", f"undefined agent '{session.agent}'", session.span)
        agent = self.agents.get(session.agent or "")
        if session.resume and agent is not None and agent.property("persist") is None:
            self.error("E017", f"'resume:' needs a persistent agent, but '{agent.name}' has no "
                       "'persist:' property", session.span)
        prompt_prop = session.property("prompt")
        if session.prompt is None and session.agent is None and prompt_prop is None:
            self.error("E003", "session has neither a prompt nor an agent", session.span)
        if session.prompt is not None:
            self.check_prompt(session.prompt, "W001", "session prompt")
            self.string(session.prompt, scope)
        self.properties(session.properties, SESSION_PROPERTIES, scope, where)

    def do_call(self, call: n.DoCall, scope: frozenset[str]) -> None:
        for arg in call.args:
            self.expr(arg, scope)
        block = self.blocks.get(call.block)
        if block is None:
            self.error("E032", f"undefined block '{call.block}'", call.span)
        elif len(call.args) != len(block.params):
            self.error("E005", f"block '{call.block}' takes {len(block.params)} argument(s) "
                       f"({', '.join(block.params) or 'none'}), got {len(call.args)}", call.span)

    def program_call(self, call: n.ProgramCall, scope: frozenset[str]) -> None:
        for arg in call.args:
            self.expr(arg.value, scope)
        if call.callee not in self.uses:
            self.error("E025", f"'{call.callee}' is not an imported program: add "
                       f"'use \"handle/slug\" as {call.callee}'", call.span)
            return
        contract = self.contracts.get(call.callee)
        if contract is None:
            return
        inputs = {node.name for node in n.walk(contract) if isinstance(node, n.Input)}
        given = {arg.name for arg in call.args}
        for arg in call.args:
            if arg.name not in inputs:
                self.error("E027", f"program '{call.callee}' has no input '{arg.name}' (it "
                           f"takes: {', '.join(sorted(inputs)) or 'none'})", arg.span)
        for missing in sorted(inputs - given):
            self.error("E026", f"call to '{call.callee}' is missing input '{missing}'", call.span)

    # ------------------------------------------------------------------ properties
    def properties(self, props: tuple[n.Property, ...], allowed: frozenset[str],
                   scope: frozenset[str], owner: str) -> None:
        seen: dict[str, n.Property] = {}
        for prop in props:
            if prop.name in seen:
                self.error("E009", f"property '{prop.name}' is already set on line "
                           f"{seen[prop.name].span.line}", prop.name_span)
            seen[prop.name] = prop
            if prop.name not in allowed:
                self.warn("W005", f"unknown property '{prop.name}' on {owner} (known: "
                          f"{', '.join(sorted(allowed))})", prop.name_span)
                continue
            getattr(self, f"prop_{prop.name}")(prop, scope)

    def prop_model(self, prop: n.Property, scope: frozenset[str]) -> None:
        value = prop.value
        if isinstance(value, n.Name) and value.id in MODELS:
            return
        if isinstance(value, n.String) and value.text.strip():
            return
        shown = value.id if isinstance(value, n.Name) else "this value"
        self.error("E008", f"invalid model '{shown}': use sonnet, opus, haiku or a quoted "
                   "model id", value.span)

    def prop_prompt(self, prop: n.Property, scope: frozenset[str]) -> None:
        if isinstance(prop.value, n.String):
            self.check_prompt(prop.value, "W004", "prompt property")
            self.string(prop.value, scope)
        elif not isinstance(prop.value, n.Discretion):
            self.error("E005", "prompt: takes a string", prop.value.span)

    def check_prompt(self, text: n.String, empty_code: str, what: str) -> None:
        value = text.text
        if value == "":
            self.warn(empty_code, f"empty {what}", text.span)
        elif not value.strip():
            self.warn("W002", f"{what} is only whitespace", text.span)
        elif len(value) > MAX_PROMPT:
            self.warn("W003", f"{what} is {len(value):,} characters long (over {MAX_PROMPT:,}); "
                      "consider passing the material as context instead", text.span)

    def prop_persist(self, prop: n.Property, scope: frozenset[str]) -> None:
        value = prop.value
        if isinstance(value, n.Boolean) and value.value:
            return
        if isinstance(value, n.Name) and value.id in ("project", "user"):
            return
        if isinstance(value, n.String) and value.text.strip():
            return
        self.error("E005", "persist: takes true, project, user or a quoted path", value.span)

    def prop_context(self, prop: n.Property, scope: frozenset[str]) -> None:
        if isinstance(prop.value, n.PropertyBlock):
            for entry in prop.value.properties:
                if isinstance(entry.value, n.PropertyBlock):
                    self.error("E005", "context entries take a value, not a block", entry.span)
                else:
                    self.expr(entry.value, scope)
        else:
            self.expr(prop.value, scope)

    def prop_retry(self, prop: n.Property, scope: frozenset[str]) -> None:
        value = prop.value
        if not (isinstance(value, n.Number) and isinstance(value.value, int)):
            self.error("E005", "retry: takes a whole number of further attempts", value.span)

    def prop_backoff(self, prop: n.Property, scope: frozenset[str]) -> None:
        value = _word(prop.value)
        if value not in BACKOFFS:
            self.error("E005", "backoff: takes none, linear or exponential", prop.value.span)

    def prop_skills(self, prop: n.Property, scope: frozenset[str]) -> None:
        value = prop.value
        if not isinstance(value, n.Array):
            self.error("E013", "skills: takes an array of skill names, e.g. [\"web-search\"]",
                       value.span)
            return
        if not value.items:
            self.warn("W010", "skills: is empty", value.span)
        for item in value.items:
            if not isinstance(item, n.String):
                self.error("E014", "skill names are strings in quotes", item.span)
            elif item.text not in self.skills:
                self.warn("W007", f"skill \"{item.text}\" is not imported: add 'import "
                          f"\"{item.text}\" from \"...\"'", item.span)

    def prop_permissions(self, prop: n.Property, scope: frozenset[str]) -> None:
        if not isinstance(prop.value, n.PropertyBlock):
            self.error("E015", "permissions: takes an indented block (read:, write:, execute:, "
                       "bash:, network:)", prop.value.span)
            return
        for entry in prop.value.properties:
            value = entry.value
            if entry.name in PATTERN_PERMISSIONS or (entry.name == "network"
                                                     and isinstance(value, n.Array)):
                self.permission_patterns(entry, scope)
            elif entry.name in MODE_PERMISSIONS:
                if _word(value) not in PERMISSION_MODES:
                    self.warn("W009", f"unknown value for {entry.name}: (expected allow, deny or "
                              "prompt)", value.span)
            else:
                self.warn("W008", f"unknown permission '{entry.name}' (known: bash, execute, "
                          "network, read, write)", entry.name_span)

    def permission_patterns(self, entry: n.Property, scope: frozenset[str]) -> None:
        value = entry.value
        if not isinstance(value, n.Array):
            self.error("E016", f"{entry.name}: takes an array of glob patterns in quotes",
                       value.span)
            return
        for item in value.items:
            if isinstance(item, n.String):
                self.string(item, scope)
            elif isinstance(item, n.Name) and isinstance(
                    getattr(self.consts.get(item.id), "value", None), n.String):
                continue
            else:
                self.error("E016", "permission patterns are strings in quotes (or the name of "
                           "a string const)", item.span)


#: recorded for a statement whose checks went through every name of a table (no name is
#: written so; one that were would only have its readers checked more often)
EVERY = "\0every"


class _Reads:
    """A table of definitions (a set, or a dict by name) the checks of one statement read
    through: each name looked up is recorded in ``read``, and :data:`EVERY` when the table is
    gone through (a "did you mean" suggestion, a union), so that what the findings depend on
    is recorded whatever the check."""

    __slots__ = ("read", "table")

    def __init__(self, table: Any, read: set[str]) -> None:
        self.table, self.read = table, read

    def __contains__(self, name: object) -> bool:
        self.read.add(name)  # type: ignore[arg-type]
        return name in self.table

    def get(self, name: str, default: object = None) -> Any:
        self.read.add(name)
        return self.table.get(name, default)

    def __getitem__(self, name: str) -> Any:
        self.read.add(name)
        return self.table[name]

    def __iter__(self) -> Iterator[str]:
        self.read.add(EVERY)
        return iter(self.table)

    def __len__(self) -> int:
        self.read.add(EVERY)
        return len(self.table)

    def __or__(self, other: Any) -> Any:
        self.read.add(EVERY)
        return set(self.table) | other

    def __ror__(self, other: Any) -> Any:
        self.read.add(EVERY)
        return other | set(self.table)

    def values(self) -> Any:
        self.read.add(EVERY)
        return self.table.values()

    def items(self) -> Any:
        self.read.add(EVERY)
        return self.table.items()


class _Definitions(NodeVisitor):
    """Pass 1 over the top-level statements: the agents, blocks, imported programs and skills
    every later statement may name, whatever line defines them."""

    def __init__(self, validator: Validator) -> None:
        self.validator = validator

    def visit_AgentDef(self, stmt: n.AgentDef) -> None:
        self._define(self.validator.agents, "agent", "E006", stmt)

    def visit_BlockDef(self, stmt: n.BlockDef) -> None:
        self._define(self.validator.blocks, "block", "E005", stmt)

    def _define(self, table: dict, kind: str, code: str, stmt: n.AgentDef | n.BlockDef) -> None:
        """The first definition of a name wins; another is ``code``, naming the first's line."""
        if stmt.name in table:
            self.validator.error(code, f"{kind} '{stmt.name}' is already defined on line "
                                 f"{table[stmt.name].span.line}", stmt.span)
        else:
            table[stmt.name] = stmt

    def visit_Use(self, stmt: n.Use) -> None:
        self.validator.collect_use(stmt)

    def visit_ImportSkill(self, stmt: n.ImportSkill) -> None:
        self.validator.collect_skill_import(stmt)

    def generic_visit(self, node: n.Node, *args: object, **kwargs: object) -> None:
        return None


def _word(value: n.Node | n.PropertyBlock) -> str | None:
    if isinstance(value, n.Name):
        return value.id
    if isinstance(value, n.String):
        return value.text
    return None


def validate(program: n.Program, path: str | None = None, root: Path | None = None,
             declaring: tuple[n.Node, ...] | None = None, keys: tuple[object, ...] | None = None,
             checked: dict[object, object] | None = None) -> list[Diagnostic]:
    """All static diagnostics for ``program`` (parse errors are reported by the parser);
    ``root``: the project the program belongs to (see :func:`import_base`); ``declaring``:
    its nodes that bind names (:func:`nodes.declaring`), when kept with its parse. ``keys``:
    a key for each top-level statement naming its parse (parser.Parses.keys), and
    ``checked``: the findings on the statements of the text checked before, by key, made
    this text's: a statement whose parse is unchanged, and none of whose definitions
    changed, is not checked again."""
    return Validator(program, path, root, declaring, keys, checked).run()


def did_you_mean(name: str, known: Iterable[str], lead: str) -> str:
    """``{lead}did you mean 'x'?`` for the name in ``known`` closest to ``name``, or ``""``."""
    match = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.5)
    return f"{lead}did you mean '{match[0]}'?" if match else ""
