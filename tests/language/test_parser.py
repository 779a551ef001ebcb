"""AST shapes for the tricky corners of the syntax.

Nodes compare without their spans, so expected trees are built with a dummy span; spans are
checked separately at the end.
"""

from __future__ import annotations

import pytest

from openprose.language import compile
from openprose.language import nodes as n
from openprose.language.lexer import T, tokenize
from openprose.language.parser import parse

S = n.Span(0, 0, 0, 0)


def body(source: str) -> tuple[n.Node, ...]:
    """Parse ``source`` (parser only: names need not be defined) and demand no diagnostics."""
    program, diagnostics = parse(source)
    assert diagnostics == [], [(d.code, d.span.line, d.span.column, d.message)
                               for d in diagnostics]
    assert program is not None
    return program.body


def one(source: str) -> n.Node:
    stmts = body(source)
    assert len(stmts) == 1, stmts
    return stmts[0]


def expr(source: str) -> n.Node:
    """The value of ``let v = <source>``."""
    stmt = one(f"let v = {source}\n")
    assert isinstance(stmt, n.Let)
    return stmt.value


def s(*parts: str | n.Interpolation, triple: bool = False) -> n.String:
    return n.String(tuple(parts), triple, span=S)


def i(*path: str) -> n.Interpolation:
    return n.Interpolation(tuple(path), span=S)


def name(id_: str) -> n.Name:
    return n.Name(id_, span=S)


def num(value: int) -> n.Number:
    return n.Number(value, span=S)


def sess(prompt: str | n.String | None = None, agent: str | None = None,
         props: tuple[n.Property, ...] = (), label: str | None = None,
         resume: bool = False) -> n.Session:
    if isinstance(prompt, str):
        prompt = s(prompt)
    return n.Session(prompt, agent, props, label, resume, span=S)


def prop(key: str, value: n.Node) -> n.Property:
    return n.Property(key, value, span=S, name_span=S)


def es(node: n.Node) -> n.ExprStmt:
    return n.ExprStmt(node, span=S)


def op(kind: str, *stmts: n.Node, acc: str | None = None, var: str = "item") -> n.PipeOp:
    return n.PipeOp(kind, tuple(stmts), acc, var, span=S)


# --------------------------------------------------------------------------- continuation lines


def test_pipeline_continuation_lines():
    source = ('let r = xs\n'
              '  | map:\n'
              '      session "x {item}"\n'
              '  | filter: session "ok?"\n'
              '  | reduce(acc, x):\n'
              '      session "{acc} {x}"\n'
              'session "after"\n')
    stmts = body(source)
    assert stmts[0] == n.Let("let", "r", n.Pipeline(name("xs"), (
        op("map", es(sess(s("x ", i("item"))))),
        op("filter", es(sess("ok?"))),
        op("reduce", es(sess(s(i("acc"), " ", i("x")))), acc="acc", var="x"),
    ), span=S), span=S)
    assert stmts[1] == es(sess("after"))


def test_pipeline_continuation_starting_at_column_one():
    stmts = body('xs\n| map: session "a"\n')
    assert stmts == (es(n.Pipeline(name("xs"), (op("map", es(sess("a"))),), span=S)),)


def test_arrow_continuation_lines():
    source = 'session "A"\n  -> session "B"\n  -> session "C"\nsession "D"\n'
    assert body(source) == (
        es(n.Arrow((sess("A"), sess("B"), sess("C")), span=S)),
        es(sess("D")),
    )


def test_arrow_after_a_session_property_block():
    """roadmap/simple-pipeline.prose: '->' continues after the indented properties."""
    source = ('session research: researcher\n'
              '  prompt: "Research"\n'
              '\n'
              '-> session article: writer\n'
              '  prompt: "Write"\n')
    assert one(source) == es(n.Arrow((
        sess(agent="researcher", label="research", props=(prop("prompt", s("Research")),)),
        sess(agent="writer", label="article", props=(prop("prompt", s("Write")),)),
    ), span=S))


def test_arrow_after_a_nested_property_block_keeps_the_statement():
    source = ('let r = session "a"\n'
              '  context:\n'
              '    x: y\n'
              '-> session "b"\n')
    value = one(source).value
    assert isinstance(value, n.Arrow)
    first, second = value.steps
    assert first.property("context").value == n.PropertyBlock((prop("x", name("y")),), span=S)
    assert second == sess("b")


def test_indented_arrow_after_properties_continues_the_session():
    source = 'session "a"\n  context: x\n  -> session "b"\n'
    assert one(source) == es(n.Arrow((
        sess("a", props=(prop("context", name("x")),)), sess("b")), span=S))


def test_indented_arrows_after_properties_inside_a_block():
    source = ('if **x**:\n'
              '  session "a"\n'
              '    model: opus\n'
              '    -> session "b"\n'
              '      model: haiku\n'
              '  session "c"\n'
              'session "d"\n')
    stmts = body(source)
    assert stmts == (
        n.If((n.CondBranch(n.Discretion("x", span=S), (
            es(n.Arrow((sess("a", props=(prop("model", name("opus")),)),
                        sess("b", props=(prop("model", name("haiku")),))), span=S)),
            es(sess("c")),
        ), span=S),), None, span=S),
        es(sess("d")),
    )
    assert stmts[0].span == n.Span(1, 1, 6, 14)


def test_a_line_starting_with_bar_never_opens_a_block():
    tokens, diagnostics = tokenize('xs\n    | map: session "a"\nsession "b"\n')
    assert diagnostics == []
    kinds = [t.kind for t in tokens]
    assert T.INDENT not in kinds and T.DEDENT not in kinds


def test_inline_pipe_bodies_chain_instead_of_nesting():
    assert expr('xs | map: session "x" | filter: session "y"') == n.Pipeline(name("xs"), (
        op("map", es(sess("x"))),
        op("filter", es(sess("y"))),
    ), span=S)
    assert expr('xs | pmap: session "p {item}"') == n.Pipeline(
        name("xs"), (op("pmap", es(sess(s("p ", i("item"))))),), span=S)


def test_reduce_names_accumulator_and_item():
    pipeline = expr('xs | reduce(summary, entry):\n  session "{summary} + {entry}"')
    (stage,) = pipeline.ops
    assert (stage.kind, stage.accumulator, stage.variable) == ("reduce", "summary", "entry")


# --------------------------------------------------------------------------- brackets


def test_multiline_arrays_and_objects_join_lines():
    source = ('let a = [\n'
              '  "x",   # a comment inside brackets\n'
              '    # an own-line comment\n'
              '      "y",\n'
              ']\n'
              'let o = {\n'
              '  k: a,\n'
              '  "quoted key": "v",\n'
              '  nested: { inner: [1,\n'
              '     2] },\n'
              '  a\n'
              '}\n')
    first, second = body(source)
    assert first.value == n.Array((s("x"), s("y")), span=S)
    assert second.value == n.Object((
        n.ObjectEntry("k", name("a"), span=S),
        n.ObjectEntry("quoted key", s("v"), quoted_key=True, span=S),
        n.ObjectEntry("nested", n.Object((
            n.ObjectEntry("inner", n.Array((num(1), num(2)), span=S), span=S),), span=S),
            span=S),
        n.ObjectEntry("a", name("a"), shorthand=True, span=S),
    ), span=S)


def test_object_shorthand_in_context():
    session = one('session "s"\n  context: { security, perf }\n').expr
    entries = session.property("context").value.entries
    assert [(e.key, e.value, e.shorthand) for e in entries] == [
        ("security", name("security"), True), ("perf", name("perf"), True)]


def test_empty_array_and_object():
    assert expr("[]") == n.Array((), span=S)
    assert expr("{}") == n.Object((), span=S)


# --------------------------------------------------------------------------- loops and blocks


def test_for_with_index_and_parallel_for():
    assert one('for x, i in xs:\n  session "{x} {i}"\n') == n.For(
        "x", name("xs"), (es(sess(s(i("x"), " ", i("i")))),), "i", span=S)
    loop = one('parallel for file in files:\n  session "{file}"\n')
    assert (loop.item, loop.index, loop.parallel) == ("file", None, True)


def test_loop_until_with_max_and_index():
    assert one('loop until **c** (max: 3) as i:\n  session "{i}"\n') == n.Loop(
        (es(sess(s(i("i")))),), "until", n.Discretion("c", span=S), 3, "i", span=S)
    loop = one('loop while **more** (max: 10):\n  session "a"\n')
    assert (loop.mode, loop.condition, loop.max, loop.index) == (
        "while", n.Discretion("more", span=S), 10, None)
    bare = one('loop:\n  session "a"\n')
    assert (bare.mode, bare.condition, bare.max) == (None, None, None)


def test_repeat_with_index():
    assert one('repeat 3 as k:\n  session "{k}"\n') == n.Repeat(
        num(3), (es(sess(s(i("k")))),), "k", span=S)


def test_block_with_params_and_max_depth():
    assert one('block b(a, c) (max_depth: 5):\n  session "{a}"\n') == n.BlockDef(
        "b", ("a", "c"), (es(sess(s(i("a")))),), 5, span=S)
    no_params = one('block b (max_depth: 7):\n  session "x"\n')
    assert (no_params.params, no_params.max_depth) == ((), 7)
    plain = one('block review-pipeline:\n  session "x"\n')
    assert (plain.name, plain.params, plain.max_depth) == ("review-pipeline", (), None)


def test_do_forms():
    stmts = body('do b\ndo b("x", y)\ndo:\n  session "a"\n  session "b"\n')
    assert stmts == (
        es(n.DoCall("b", (), False, span=S)),
        es(n.DoCall("b", (s("x"), name("y")), True, span=S)),
        n.DoBlock((es(sess("a")), es(sess("b"))), span=S),
    )


def test_output_expression_in_a_block_and_named_output():
    block = one('block b(x):\n  output session "{x}"\n')
    assert block.body == (n.Output(None, sess(s(i("x"))), span=S),)
    assert one('output result = { inventory: inv, hint: "h" }\n') == n.Output(
        "result", n.Object((n.ObjectEntry("inventory", name("inv"), span=S),
                            n.ObjectEntry("hint", s("h"), span=S)), span=S), span=S)


# --------------------------------------------------------------------------- parallel


def test_parallel_modifiers():
    par = one('parallel ("any", count: 2, on-fail: "ignore"):\n  session "a"\n  session "b"\n')
    assert (par.join, par.count, par.on_fail) == ("any", 2, "ignore")
    assert par.branches == (n.Branch(None, es(sess("a")), span=S),
                            n.Branch(None, es(sess("b")), span=S))
    default = one('parallel:\n  session "a"\n')
    assert (default.join, default.count, default.on_fail) == ("all", None, "fail-fast")
    bare_word = one('parallel (first, on-fail: continue):\n  session "a"\n')
    assert (bare_word.join, bare_word.on_fail) == ("first", "continue")


def test_named_branches_with_compound_values():
    par = one('parallel:\n'
              '  x = try:\n'
              '    session "a"\n'
              '  catch as err:\n'
              '    session "b {err}"\n'
              '  y = session "c"\n'
              '  session "d"\n')
    assert par.branches == (
        n.Branch("x", n.Try((es(sess("a")),), (es(sess(s("b ", i("err")))),), "err", None,
                            span=S), span=S),
        n.Branch("y", es(sess("c")), span=S),
        n.Branch(None, es(sess("d")), span=S),
    )


# --------------------------------------------------------------------------- programs and names


def test_destructuring_a_program_call():
    assert one('let { a, b } = prog(x: 1, y: "z")\n') == n.Let(
        "let", n.Destructure(("a", "b"), span=S),
        n.ProgramCall("prog", (n.Argument("x", num(1), span=S),
                               n.Argument("y", s("z"), span=S)), span=S), span=S)


def test_member_access_and_index():
    assert expr("a.b.c") == n.Member(n.Member(name("a"), "b", span=S), "c", span=S)
    assert expr("a[0]") == n.Index(name("a"), num(0), span=S)
    assert expr("[a] ") == n.Array((name("a"),), span=S)


def test_use_import_input():
    stmts = body('import "web-search" from "github:anthropic/skills"\n'
                 'use "alice/research" as research\n'
                 'use "bob/tools/summarize.prose"\n'
                 'input topic: "What to research"\n'
                 'input depth: **how deep?**\n')
    assert stmts[0] == n.ImportSkill(s("web-search"), s("github:anthropic/skills"), span=S)
    assert stmts[1] == n.Use(s("alice/research"), "research", span=S)
    assert stmts[2].handle == "summarize"
    assert stmts[3] == n.Input("topic", s("What to research"), span=S)
    assert stmts[4] == n.Input("depth", n.Discretion("how deep?", span=S), span=S)


def test_keywords_are_contextual():
    stmts = body('let context = session "a"\nlet r = context\nsession "x"\n  context: context\n')
    assert stmts[1].value == name("context")
    assert stmts[2].expr.property("context").value == name("context")


def test_session_forms():
    assert body('session: writer\nresume: captain\n  prompt: "x"\nsession review: critic\n') == (
        es(sess(agent="writer")),
        es(sess(agent="captain", resume=True, props=(prop("prompt", s("x")),))),
        es(sess(agent="critic", label="review")),
    )


def test_agent_with_nested_permissions():
    agent = one('agent a:\n  model: opus\n  permissions:\n    read: ["*.md"]\n    bash: deny\n'
                '  skills: ["x"]\n')
    assert agent == n.AgentDef("a", (
        prop("model", name("opus")),
        prop("permissions", n.PropertyBlock((
            prop("read", n.Array((s("*.md"),), span=S)),
            prop("bash", name("deny")),
        ), span=S)),
        prop("skills", n.Array((s("x"),), span=S)),
    ), span=S)


def test_if_elif_else_try_finally_choice():
    stmts = body('if **a**:\n  session "a"\nelif **b**:\n  session "b"\nelse:\n  session "c"\n'
                 'try:\n  session "t"\nfinally:\n  session "f"\n'
                 'choice **x**:\n  option "A":\n    session "a"\n  option "B": session "b"\n')
    assert stmts[0] == n.If((
        n.CondBranch(n.Discretion("a", span=S), (es(sess("a")),), span=S),
        n.CondBranch(n.Discretion("b", span=S), (es(sess("b")),), span=S),
    ), (es(sess("c")),), span=S)
    assert stmts[1] == n.Try((es(sess("t")),), None, None, (es(sess("f")),), span=S)
    assert stmts[2] == n.Choice(n.Discretion("x", span=S), (
        n.Option(s("A"), (es(sess("a")),), span=S),
        n.Option(s("B"), (es(sess("b")),), span=S),
    ), span=S)


def test_throw_forms():
    stmts = body('try:\n  session "a"\ncatch:\n  throw\nthrow "bad {x}"\n')
    assert stmts[0].catch_body == (n.Throw(None, span=S),)
    assert stmts[1] == n.Throw(s("bad ", i("x")), span=S)


# --------------------------------------------------------------------------- strings


@pytest.mark.parametrize(("literal", "parts"), [
    ('"""x"""', ("x",)),
    ('"""x""""', ('x"',)),
    ('"""x"""""', ('x""',)),
    ('""""""', ()),
    ('"""a"b""c"""', ('a"b""c',)),
    ('"""\n  keep  \n\n"""', ("\n  keep  \n\n",)),
    ('"""line {a}\nline {b.c}"""', ("line ", i("a"), "\nline ", i("b", "c"))),
])
def test_triple_quoted_strings(literal, parts):
    assert expr(literal) == n.String(parts, True, span=S)


def test_escapes():
    assert expr(r'"a\\b\"c\nd\te\{f}"') == s('a\\b"c\nd\te{f}')
    assert expr(r'"""\"""\{x}"""') == s('"""' + "{x}", triple=True)


def test_escaped_brace_is_not_interpolation():
    value = expr(r'"\{a} {a}"')
    assert value.parts == ("{a} ", i("a"))


@pytest.mark.parametrize(("literal", "parts"), [
    ('"{a.b}"', (i("a", "b"),)),
    ('"{a-b} {a.b-c}"', (i("a-b"), " ", i("a", "b-c"))),
    ('"{not an identifier}"', ("{not an identifier}",)),
    ('"{}"', ("{}",)),
    ('"{ a }"', ("{ a }",)),
    ('"{a."', ("{a.",)),
    ('"{1x} {x"', ("{1x} {x",)),
    ('"x{a}y{b}z"', ("x", i("a"), "y", i("b"), "z")),
])
def test_interpolation(literal, parts):
    assert expr(literal) == s(*parts)


def test_string_text_writes_interpolations_back():
    assert expr('"x {a.b} {} y"').text == "x {a.b} {} y"


# --------------------------------------------------------------------------- discretion


def test_multiline_discretion_is_dedented_and_verbatim():
    loop = one('loop until ***\n  the thing\n    is **really** done\n***:\n  session "a"\n')
    assert loop.condition == n.Discretion("the thing\n  is **really** done", True, span=S)


def test_single_line_discretion_is_stripped_and_not_tokenized():
    assert expr('**  a "quoted" # not a comment: x  **') == n.Discretion(
        'a "quoted" # not a comment: x', span=S)


# --------------------------------------------------------------------------- comments


def test_comments_after_statements_and_properties():
    stmts = body('let s = "a" # c\n'
                 '# own line\n'
                 'session "b"  # c3\n'
                 '  # comment inside the property block\n'
                 '  model: opus # after a property\n'
                 'session "# not a comment"\n')
    assert stmts == (
        n.Let("let", "s", s("a"), span=S),
        es(sess("b", props=(prop("model", name("opus")),))),
        es(sess("# not a comment")),
    )


# --------------------------------------------------------------------------- spans


def test_spans_of_nodes():
    source = ('agent writer:\n'
              '  model: opus\n'
              'let draft = session "Write {topic}"\n'
              'session: writer\n'
              '  context: draft\n')
    agent, let, stmt = body(source)
    assert agent.span.line == 1 and agent.span.column == 1
    model = agent.properties[0]
    assert model.name_span == n.Span(2, 3, 2, 8)
    assert model.value.span == n.Span(2, 10, 2, 14)
    assert (let.span.line, let.span.column) == (3, 1)
    session = let.value
    assert session.span == n.Span(3, 13, 3, 36)
    assert session.prompt.span == n.Span(3, 21, 3, 36)
    assert session.prompt.interpolations[0].span == n.Span(3, 28, 3, 35)
    assert stmt.expr.span.line == 4 and stmt.expr.span.column == 1
    context = stmt.expr.property("context")
    assert context.span.line == 5 and context.span.column == 3
    assert context.value.span == n.Span(5, 12, 5, 17)


def test_spans_of_multiline_nodes():
    source = 'let a = [\n  "x",\n  "y"\n]\nsession """one\ntwo"""\n'
    let, stmt = body(source)
    assert let.value.span == n.Span(1, 9, 4, 2)
    assert let.value.items[1].span == n.Span(3, 3, 3, 6)
    assert stmt.expr.prompt.span == n.Span(5, 9, 6, 7)


def test_span_of_a_node_after_a_continuation_line():
    stmt = one('session "A"\n  -> session "B"\n')
    assert stmt.expr.steps[1].span == n.Span(2, 6, 2, 17)
    assert stmt.expr.span == n.Span(1, 1, 2, 17)


def test_span_of_an_expression_statement_ends_at_its_last_token():
    assert one('session "a"  # trailing comment\n').span == n.Span(1, 1, 1, 12)


def test_span_of_a_let_statement_ends_at_its_last_token():
    assert one('let x = "a"  # comment\n').span == n.Span(1, 1, 1, 12)


def test_compile_facade_and_parser_agree():
    source = 'agent a:\n  model: sonnet\nsession: a\n  prompt: "x"\n'
    program, diagnostics = parse(source)
    result = compile(source)
    assert diagnostics == [] and result.ok
    assert result.program == program
