"""The OpenProse abstract syntax tree.

Every node is an immutable dataclass carrying its source :class:`Span`. Statement bodies
are tuples of statements. Expressions and statements share the :class:`Node` base so that
compound statements (``try``, ``parallel``, ``do``...) can stand where a value is expected,
e.g. a parallel branch ``primary = try: ...``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields

# How deep calls of a block nest when it names no ``max_depth`` (the one definition: the
# engine, the state contract and the guided outline all read it through BlockDef.depth_limit).
DEFAULT_MAX_DEPTH = 100

class Span:
    """A source region: 1-based lines and columns, end column exclusive. Immutable; its
    lines are counted from a shift it shares with the spans of one parse (see :func:`anchor`):
    the parse of statements an edit moved up or down is moved by one add to that shift."""

    __slots__ = ("_end_line", "_line", "_shift", "column", "end_column")

    def __init__(self, line: int, column: int, end_line: int, end_column: int) -> None:
        _SET_LINE(self, line)
        _SET_COLUMN(self, column)
        _SET_END_LINE(self, end_line)
        _SET_END_COLUMN(self, end_column)
        _SET_SHIFT(self, _FIXED)

    @property
    def line(self) -> int:
        return self._line + self._shift[0]

    @property
    def end_line(self) -> int:
        return self._end_line + self._shift[0]

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Span is immutable: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not Span:
            return NotImplemented
        return (self.line, self.column, self.end_line, self.end_column) == \
            (other.line, other.column, other.end_line, other.end_column)

    def __hash__(self) -> int:
        return hash((self.line, self.column, self.end_line, self.end_column))

    def __repr__(self) -> str:
        return (f"Span(line={self.line}, column={self.column}, end_line={self.end_line}, "
                f"end_column={self.end_column})")

    def __reduce__(self) -> tuple[type[Span], tuple[int, int, int, int]]:
        return Span, (self.line, self.column, self.end_line, self.end_column)

    def to(self, other: Span) -> Span:
        """The span from the start of ``self`` to the end of ``other``."""
        return Span(self.line, self.column, other.end_line, other.end_column)


#: the shift of a span no parse has anchored (never changed)
_FIXED = (0,)
_SET_LINE = Span._line.__set__  # type: ignore[attr-defined]
_SET_COLUMN = Span.column.__set__  # type: ignore[attr-defined]
_SET_END_LINE = Span._end_line.__set__  # type: ignore[attr-defined]
_SET_END_COLUMN = Span.end_column.__set__  # type: ignore[attr-defined]
_SET_SHIFT = Span._shift.__set__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Node:
    span: Span = field(compare=False, repr=False, kw_only=True)

    def children(self) -> list[Node]:
        """Direct child nodes, in source order."""
        names = _CHILD_FIELDS.get(type(self))
        if names is None:
            names = tuple(f.name for f in fields(self) if f.type not in _PLAIN)
            _CHILD_FIELDS[type(self)] = names
        out: list[Node] = []
        for name in names:
            value = getattr(self, name)
            if isinstance(value, Node):
                out.append(value)
            elif type(value) is tuple:
                _nodes_in(value, out)
        return out


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
#: the declared types of fields that never hold a node (looked past by ``children``)
_PLAIN = frozenset({"Span", "bool", "int | None", "int | float", "str", "str | None",
                    "tuple[str, ...]"})


def _nodes_in(items: tuple[object, ...], out: list[Node]) -> None:
    for item in items:
        if isinstance(item, Node):
            out.append(item)
        elif type(item) is tuple:
            _nodes_in(item, out)


# --------------------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class Interpolation(Node):
    """``{name}`` or ``{name.attr}`` inside a string."""

    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class String(Node):
    """A string literal; ``parts`` alternates literal text and interpolations."""

    parts: tuple[str | Interpolation, ...]
    triple: bool = False

    @property
    def text(self) -> str:
        """The string with interpolations written back as ``{name}``."""
        return "".join(p if isinstance(p, str) else "{" + ".".join(p.path) + "}" for p in self.parts)

    @property
    def interpolations(self) -> tuple[Interpolation, ...]:
        return tuple(p for p in self.parts if isinstance(p, Interpolation))


@dataclass(frozen=True, slots=True)
class Number(Node):
    value: int | float


@dataclass(frozen=True, slots=True)
class Boolean(Node):
    value: bool


@dataclass(frozen=True, slots=True)
class Null(Node):
    pass


@dataclass(frozen=True, slots=True)
class Name(Node):
    id: str


@dataclass(frozen=True, slots=True)
class Member(Node):
    """``obj.attr``."""

    obj: Expr
    attr: str


@dataclass(frozen=True, slots=True)
class Index(Node):
    """``obj[index]``."""

    obj: Expr
    index: Expr


@dataclass(frozen=True, slots=True)
class Array(Node):
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class ObjectEntry(Node):
    """``key: value``, or a shorthand ``key`` whose value is the name ``key``."""

    key: str
    value: Expr
    shorthand: bool = False
    quoted_key: bool = False


@dataclass(frozen=True, slots=True)
class Object(Node):
    entries: tuple[ObjectEntry, ...]


@dataclass(frozen=True, slots=True)
class Discretion(Node):
    """A condition judged by a model: ``**text**`` or ``***`` ... ``***``."""

    text: str
    multiline: bool = False


@dataclass(frozen=True, slots=True)
class BinaryOp(Node):
    """``left op right``; op is one of ``+ - * / < <= > >= == != and or``."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class UnaryOp(Node):
    """``not x`` or ``-x``."""

    op: str
    operand: Expr


@dataclass(frozen=True, slots=True)
class Property(Node):
    """``name: value`` under an agent, a session or a nested property block."""

    name: str
    value: Expr | PropertyBlock
    name_span: Span = field(compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class PropertyBlock(Node):
    """An indented block of properties (``permissions:``, block-form ``context:``)."""

    properties: tuple[Property, ...]


@dataclass(frozen=True, slots=True)
class Session(Node):
    """``session "prompt"``, ``session: agent``, ``session name: agent`` or ``resume: agent``.

    ``resume`` is true for ``resume:``. ``label`` is the named-session name.
    """

    prompt: String | None
    agent: str | None
    properties: tuple[Property, ...] = ()
    label: str | None = None
    resume: bool = False

    def property(self, name: str) -> Property | None:
        for prop in self.properties:
            if prop.name == name:
                return prop
        return None


@dataclass(frozen=True, slots=True)
class Arrow(Node):
    """``session "A" -> session "B"``: run in order; the value is the last one's."""

    steps: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class DoCall(Node):
    """``do name`` or ``do name(args)``."""

    block: str
    args: tuple[Expr, ...] = ()
    has_parens: bool = False


@dataclass(frozen=True, slots=True)
class Argument(Node):
    name: str
    value: Expr


@dataclass(frozen=True, slots=True)
class ProgramCall(Node):
    """``alias(name: expr, ...)``: invoke an imported program."""

    callee: str
    args: tuple[Argument, ...]


@dataclass(frozen=True, slots=True)
class PipeOp(Node):
    """One pipeline stage: ``map``/``filter``/``pmap`` (variable ``item``) or ``reduce(acc, x)``."""

    kind: str
    body: tuple[Stmt, ...]
    accumulator: str | None = None
    variable: str = "item"


@dataclass(frozen=True, slots=True)
class Pipeline(Node):
    source: Expr
    ops: tuple[PipeOp, ...]


# --------------------------------------------------------------------------- statements


@dataclass(frozen=True, slots=True)
class ImportSkill(Node):
    """``import "skill" from "source"``."""

    name: String
    source: String


@dataclass(frozen=True, slots=True)
class Use(Node):
    """``use "handle/slug" as alias``."""

    path: String
    alias: str | None = None

    @property
    def handle(self) -> str:
        """The name the program is called by: the alias, else the path's last segment."""
        if self.alias:
            return self.alias
        return self.path.text.rstrip("/").rsplit("/", 1)[-1].removesuffix(".prose")


@dataclass(frozen=True, slots=True)
class Input(Node):
    """``input name: "description"`` (or a discretion prompt)."""

    name: str
    prompt: String | Discretion


@dataclass(frozen=True, slots=True)
class AgentDef(Node):
    name: str
    properties: tuple[Property, ...]

    def property(self, name: str) -> Property | None:
        for prop in self.properties:
            if prop.name == name:
                return prop
        return None


@dataclass(frozen=True, slots=True)
class BlockDef(Node):
    name: str
    params: tuple[str, ...]
    body: tuple[Stmt, ...]
    max_depth: int | None = None

    @property
    def depth_limit(self) -> int:
        """How deep calls of this block may nest: its ``max_depth``, else the default."""
        return self.max_depth or DEFAULT_MAX_DEPTH


@dataclass(frozen=True, slots=True)
class Destructure(Node):
    """``{ a, b }`` on the left of ``let``."""

    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Let(Node):
    """``let``/``const`` binding; ``target`` is a name or a destructuring pattern."""

    kind: str
    target: str | Destructure
    value: Expr


@dataclass(frozen=True, slots=True)
class Assign(Node):
    """``name = expr`` (reassignment of a ``let``)."""

    target: str
    value: Expr


@dataclass(frozen=True, slots=True)
class Output(Node):
    """``output name = expr``, or ``output expr`` (a block's return value)."""

    name: str | None
    value: Expr


@dataclass(frozen=True, slots=True)
class ExprStmt(Node):
    """A statement that is just a value: a session, ``do``, pipeline, call..."""

    expr: Expr


@dataclass(frozen=True, slots=True)
class Branch(Node):
    """One ``parallel`` branch: ``name = statement`` or a bare statement."""

    name: str | None
    body: Stmt


@dataclass(frozen=True, slots=True)
class Parallel(Node):
    branches: tuple[Branch, ...]
    join: str = "all"
    on_fail: str = "fail-fast"
    count: int | None = None


@dataclass(frozen=True, slots=True)
class Repeat(Node):
    count: Expr
    body: tuple[Stmt, ...]
    index: str | None = None


@dataclass(frozen=True, slots=True)
class For(Node):
    """``for x in coll``, ``for x, i in coll``, ``parallel for ...``."""

    item: str
    collection: Expr
    body: tuple[Stmt, ...]
    index: str | None = None
    parallel: bool = False


@dataclass(frozen=True, slots=True)
class Loop(Node):
    """``loop``, ``loop until **c**``, ``loop while **c**``, with optional ``(max: N)`` and ``as i``."""

    body: tuple[Stmt, ...]
    mode: str | None = None
    condition: Expr | None = None
    max: int | None = None
    index: str | None = None


@dataclass(frozen=True, slots=True)
class Try(Node):
    body: tuple[Stmt, ...]
    catch_body: tuple[Stmt, ...] | None = None
    catch_name: str | None = None
    finally_body: tuple[Stmt, ...] | None = None


@dataclass(frozen=True, slots=True)
class Throw(Node):
    """``throw`` (re-raise inside catch) or ``throw "message"``."""

    message: Expr | None = None


@dataclass(frozen=True, slots=True)
class Option(Node):
    label: String
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Choice(Node):
    criteria: Expr
    options: tuple[Option, ...]


@dataclass(frozen=True, slots=True)
class CondBranch(Node):
    condition: Expr
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class If(Node):
    """``if``/``elif`` branches in order, then an optional ``else`` body."""

    branches: tuple[CondBranch, ...]
    else_body: tuple[Stmt, ...] | None = None


@dataclass(frozen=True, slots=True)
class DoBlock(Node):
    """Anonymous ``do:`` sequence."""

    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Program(Node):
    body: tuple[Stmt, ...]

    @property
    def agents(self) -> dict[str, AgentDef]:
        return {s.name: s for s in self.body if isinstance(s, AgentDef)}

    @property
    def blocks(self) -> dict[str, BlockDef]:
        return {s.name: s for s in self.body if isinstance(s, BlockDef)}

    @property
    def inputs(self) -> list[Input]:
        return [n for n in walk(self) if isinstance(n, Input)]

    @property
    def uses(self) -> list[Use]:
        return [s for s in self.body if isinstance(s, Use)]


Expr = (
    String | Number | Boolean | Null | Name | Member | Index | Array | Object | Discretion
    | BinaryOp | UnaryOp | Session | Arrow | DoCall | DoBlock | ProgramCall | Pipeline | Parallel
    | Try | Loop | For | Repeat | If | Choice
)
Stmt = (
    ImportSkill | Use | Input | AgentDef | BlockDef | Let | Assign | Output | ExprStmt | Parallel
    | Repeat | For | Loop | Try | Throw | Choice | If | DoBlock
)


def anchor(roots: tuple[object, ...]) -> list[int]:
    """Give every span under ``roots`` (nodes, tokens, diagnostics, spans and tuples of them,
    walked without recursion) that no parse has anchored yet one new shift, and return it:
    adding to it moves them all down that many lines, however many they are (the parse of
    statements an edit above them moved; see parser.Parses, whose trees are those of its
    latest text only). A span another parse anchored (read again here) keeps that one's."""
    shift = [0]
    stack = list(roots)
    while stack:
        value = stack.pop()
        cls = type(value)
        if cls is Span:
            if value._shift is _FIXED:
                _SET_SHIFT(value, shift)
        elif cls is tuple:
            stack.extend(value)
        else:
            names = _SPAN_FIELDS.get(cls)
            if names is None:
                names = _SPAN_FIELDS[cls] = tuple(
                    f.name for f in getattr(cls, "__dataclass_fields__", {}).values()
                    if f.type not in _NO_SPAN)
            stack.extend(getattr(value, name) for name in names)
    return shift


#: by class, the fields that may hold a span; the declared types of those that never do
_SPAN_FIELDS: dict[type, tuple[str, ...]] = {}
_NO_SPAN = (_PLAIN - {"Span"}) | {"T", "Severity", "str | None", "float"}


def bound_by(node: Node) -> tuple[str, ...]:
    """The names a node :func:`declaring` gives binds (none for an unnamed one)."""
    if isinstance(node, Let):
        return node.target.names if isinstance(node.target, Destructure) else (node.target,)
    name = getattr(node, "name", None)
    return (name,) if name else ()


def declaring(roots: tuple[Node, ...]) -> tuple[Node, ...]:
    """The nodes under ``roots`` that bind a name (``let``/``const``, ``output``, ``input``,
    a named parallel branch), in source order: what the validator's first pass reads."""
    return tuple(x for root in roots for x in walk(root)
                 if isinstance(x, Let | Output | Input | Branch))


def deeper_than(limit: int, roots: tuple[Node, ...], depth: int) -> Node | None:
    """The first node nested more than ``limit`` levels deep under ``roots`` (themselves at
    ``depth``), searched depth first from the last root back. Without recursion, as the tree
    may be that deep."""
    stack = [(root, depth) for root in roots]
    while stack:
        node, level = stack.pop()
        if level > limit:
            return node
        level += 1
        stack.extend([(child, level) for child in node.children()])
    return None


def walk(node: Node) -> Iterator[Node]:
    """Every node under ``node`` (inclusive), depth first, in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children()))
