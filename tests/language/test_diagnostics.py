"""One small program per diagnostic code, asserting code, line, column and severity.

Lines and columns are 1-based. Each case also checks that the program produces *only* the
expected diagnostics, so a test cannot pass because of some unrelated problem.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from openprose.language import Diagnostic, Severity, compile, nodes


def diagnostics(source: str, path: str | None = None) -> list[tuple[str, int, int]]:
    result = compile(source, path)
    return [(d.code, d.span.line, d.span.column) for d in result.diagnostics]


def only(source: str, code: str, line: int, column: int, *, path: str | None = None,
         message: str = "", also: tuple[tuple[str, int, int], ...] = ()) -> Diagnostic:
    """Assert ``source`` reports exactly ``code`` at ``line:column`` (plus ``also``)."""
    result = compile(source, path)
    found = sorted((d.code, d.span.line, d.span.column) for d in result.diagnostics)
    assert found == sorted(((code, line, column), *also)), "\n".join(
        d.format(source) for d in result.diagnostics)
    diag = next(d for d in result.diagnostics if d.code == code)
    expected = Severity.ERROR if code.startswith("E") else Severity.WARNING
    assert diag.severity is expected
    assert diag.is_error is (expected is Severity.ERROR)
    assert result.ok is (not any(d.is_error for d in result.diagnostics))
    assert message in diag.message
    assert diag.span.end_line > diag.span.line or diag.span.end_column > diag.span.column
    return diag


AGENT = "agent a:\n  model: sonnet\n"

# (code, source, line, column, message fragment)
CASES = [
    ("E001", 'let x = "abc\n', 1, 9, "unterminated string"),
    ("E002", 'session "a\\qb"\n', 1, 11, "unknown escape '\\q'"),
    ("E003", "session research:\n  model: sonnet\n", 1, 1, "neither a prompt nor an agent"),
    ("E004", 'session "x" "y"\n', 1, 13, "unexpected string"),
    ("E005", 'if **c**\n  session "a"\n', 1, 9, "expected ':'"),
    ("E006", AGENT + "agent a:\n  model: opus\n", 3, 1, "already defined on line 1"),
    ("E007", 'session "x"\nsession: ghost\n', 2, 1, "undefined agent 'ghost'"),
    ("E008", "agent a:\n  model: gpt4\n", 2, 10, "invalid model 'gpt4'"),
    ("E009", AGENT + "  model: opus\n", 3, 3, "'model' is already set on line 2"),
    ("E010", 'use "a/b"\nuse "a/b"\n', 2, 1, "already imported on line 1"),
    ("E011", 'use ""\n', 1, 5, "needs a program path"),
    ("E012", 'use "not a path"\n', 1, 5, "is not a program path"),
    ("E013", 'agent a:\n  skills: "x"\n', 2, 11, "array"),
    ("E014", "agent a:\n  skills: [x]\n", 2, 12, "strings"),
    ("E015", 'agent a:\n  permissions: "x"\n', 2, 16, "indented block"),
    ("E016", 'agent a:\n  permissions:\n    read: "x"\n', 3, 11, "array of glob patterns"),
    ("E017", AGENT + "resume: a\n", 3, 1, "has no 'persist:'"),
    ("E019", 'let x = session "a"\nlet x = session "b"\n', 2, 1, "already declared on line 1"),
    ("E020", 'input : "d"\n', 1, 1, "input needs a name"),
    ("E021", 'input x: "d"\ninput x: "e"\n', 2, 1, "already declared on line 1"),
    ("E023", 'output = session "a"\n', 1, 8, "output needs a name"),
    ("E024", 'output x = session "a"\noutput x = session "b"\n', 2, 1,
     "already declared on line 1"),
    ("E025", 'let r = foo(a: 1)\n', 1, 9, "'foo' is not an imported program"),
    ("E029", 'session "a"\n  context: y\n', 2, 12, "undefined variable 'y'"),
    ("E030", 'const x = "a"\nx = "b"\n', 2, 1, "is a const (line 1)"),
    ("E031", AGENT + 'let a = session "x"\n', 3, 1, "name of an agent"),
    ("E032", 'session "x"\ndo nope\n', 2, 1, "undefined block 'nope'"),
    ("E033", 'let a__1 = session "x"\n', 1, 1, "variable 'a__1' ends in '__' and digits"),
    ("E033", 'block b(n__2):\n  session "x"\ndo b(1)\n', 1, 1, "parameter 'n__2'"),
    ("E033", 'parallel:\n  r__10 = session "x"\n', 2, 3, "variable 'r__10'"),
    ("W001", 'session ""\n', 1, 9, "empty session prompt"),
    ("W002", 'session "   "\n', 1, 9, "only whitespace"),
    ("W003", 'session "' + "a" * 10_001 + '"\n', 1, 9, "10,001 characters"),
    ("W004", 'session "x"\n  prompt: ""\n', 2, 11, "empty prompt property"),
    ("W005", 'session "x"\n  colour: red\n', 2, 3, "unknown property 'colour'"),
    ("W006", 'import "s" from "pypi:s"\n', 1, 17, "unknown skill source 'pypi:s'"),
    ("W007", 'agent a:\n  skills: ["s"]\n', 2, 12, 'skill "s" is not imported'),
    ("W008", "agent a:\n  permissions:\n    fly: allow\n", 3, 5, "unknown permission 'fly'"),
    ("W009", "agent a:\n  permissions:\n    bash: maybe\n", 3, 11, "bash"),
    ("W010", "agent a:\n  skills: []\n", 2, 11, "empty"),
    ("W012", 'parallel ("any", count: 3):\n  session "a"\n  session "b"\n', 1, 1,
     "count: 3 is more than the 2 branches"),
    ("W013", 'choice **c**:\n  option "A":\n    session "a"\n  option "A":\n    session "b"\n',
     4, 3, 'option "A" appears twice'),
    ("W015", 'loop:\n  session "a"\n', 1, 1, "neither a condition nor (max: N)"),
    ("W016", 'input x: ""\n', 1, 10, "empty description"),
    ("W017", 'let x = "a"\nfor x in [1]:\n  session "a"\n', 2, 1,
     "loop variable 'x' hides a variable"),
    ("W018", 'session """hello {nobody}"""\n', 1, 18, "'{nobody}' names no variable"),
    ("W019", 'session """a \\q"""\n', 1, 14, "unknown escape '\\q' is kept as written"),
]


@pytest.mark.parametrize(("code", "source", "line", "column", "message"), CASES,
                         ids=[c[0] for c in CASES])
def test_code(code, source, line, column, message):
    only(source, code, line, column, message=message)


def test_w014_empty_option_body():
    """An option body can only be empty when its statements failed to parse, so W014 comes with
    the parse error that emptied it."""
    source = 'choice **c**:\n  option "A":\n    )\n  option "B":\n    session "b"\n'
    only(source, "W014", 2, 3, message='option "A" has an empty body', also=(("E004", 3, 5),))


# --------------------------------------------------------------------------- imported programs

LIB = 'input topic: "t"\ninput depth: "d"\nlet r = session "x {topic} {depth}"\noutput findings = r\n'


@pytest.fixture
def main_path(tmp_path: Path) -> str:
    (tmp_path / "lib.prose").write_text(LIB, encoding="utf-8")
    return str(tmp_path / "main.prose")


def test_e026_missing_input(main_path):
    source = 'use "./lib.prose" as lib\nlet r = lib(topic: "a")\n'
    only(source, "E026", 2, 9, path=main_path, message="missing input 'depth'")


def test_e027_unknown_input(main_path):
    source = 'use "./lib.prose" as lib\nlet r = lib(topic: "a", depth: "b", colour: "c")\n'
    only(source, "E027", 2, 37, path=main_path, message="has no input 'colour'")


def test_e028_unknown_output_member(main_path):
    source = ('use "./lib.prose" as lib\nlet r = lib(topic: "a", depth: "b")\n'
              'session "x"\n  context: r.summary\n')
    only(source, "E028", 4, 12, path=main_path, message="has no output 'summary'")


def test_e028_unknown_output_destructured(main_path):
    source = 'use "./lib.prose" as lib\nlet { findings, summary } = lib(topic: "a", depth: "b")\n'
    only(source, "E028", 2, 5, path=main_path, message="no output 'summary' (it has: findings)")


def test_correct_call_of_local_program_is_clean(main_path):
    source = ('use "./lib.prose" as lib\nlet { findings } = lib(topic: "a", depth: "b")\n'
              'let r = lib(depth: "c", topic: "d")\nsession "{r.findings}"\n  context: findings\n')
    assert diagnostics(source, main_path) == []


def test_contract_checks_need_the_file(tmp_path):
    """Without a readable local file there is no contract, so E026-E028 cannot be decided."""
    source = 'use "./missing.prose" as lib\nlet r = lib(topic: "a")\nsession "x"\n  context: r.q\n'
    assert diagnostics(source, str(tmp_path / "main.prose")) == []


def test_e028_unknown_output_in_interpolation(main_path):
    source = 'use "./lib.prose" as lib\nlet r = lib(topic: "a", depth: "b")\nsession "{r.summary}"\n'
    only(source, "E028", 3, 10, path=main_path)


# --------------------------------------------------------------------------- variants per code


def test_e001_unterminated_string_at_end_of_file_without_newline():
    only('session "abc', "E001", 1, 9, message='close it with "')


def test_e001_recovers_on_the_next_line():
    source = 'session "abc\nsession "ok"\nsession: ghost\n'
    assert diagnostics(source) == [("E001", 1, 9), ("E007", 3, 1)]
    program = compile(source).program
    assert len(program.body) == 3


def test_e001_unterminated_triple_quoted_string():
    source = 'session "a"\nlet x = """abc\n\nmore text\n'
    diag = only(source, "E001", 2, 9, message='triple-quoted string (close it with """)')
    assert (diag.span.end_line, diag.span.end_column) == (2, 12)


def test_e001_triple_quote_closed_by_two_quotes_is_still_open():
    only('session """abc""\n', "E001", 1, 9, message="triple-quoted")


def test_e002_every_bad_escape_is_reported():
    source = 'session "\\a\\b"\nsession "x\\z"\n'
    assert diagnostics(source) == [("E002", 1, 10), ("E002", 1, 12), ("E002", 2, 11)]


def test_w019_triple_quoted_unknown_escapes_are_kept_as_written():
    source = 'let x = session """curl -s \\\n  -H a \\z\n"""\n'
    assert diagnostics(source) == [("W019", 1, 28), ("W019", 2, 8)]
    result = compile(source, "t.prose")
    assert result.ok
    [let] = result.program.body
    assert let.value.prompt.parts == ("curl -s \\\n  -H a \\z\n",)


def test_valid_escapes_are_clean():
    assert diagnostics('session "a\\\\b\\"c\\nd\\te\\{f}"\n') == []


def test_e004_stray_character_and_unmatched_bracket():
    assert diagnostics('session "x" @\n') == [("E004", 1, 13)]
    assert diagnostics('session "x" )\n') == [("E004", 1, 13)]
    assert diagnostics('let x = ]\n')[0] == ("E004", 1, 9)


def test_e005_unterminated_discretion():
    result = compile('loop until **done\n  session "a"\n')
    first = result.errors[0]
    assert (first.code, first.span.line, first.span.column) == ("E005", 1, 12)
    assert "unterminated '**'" in first.message


def test_e005_unterminated_triple_star_discretion():
    source = 'session "before"\nloop until ***\n  done\n  session "a"\n'
    result = compile(source)
    first = result.errors[0]
    assert (first.code, first.span.line, first.span.column) == ("E005", 2, 12)
    assert "unterminated '***'" in first.message
    assert (first.span.end_line, first.span.end_column) == (2, 15)
    assert isinstance(result.program.body[0], nodes.ExprStmt)


def test_e005_inconsistent_dedent():
    source = 'if **a**:\n    session "a"\n  session "b"\n'
    only(source, "E005", 3, 1, message="inconsistent indentation")


def test_e005_unexpected_indentation():
    source = 'let x = "a"\n\n  # comment\n    do:\n      session "b"\n'
    only(source, "E005", 4, 1, message="unexpected indentation")


@pytest.mark.parametrize(("source", "line", "column", "message"), [
    ('gate review:\n  session "a"\n', 1, 1, "later OpenProse version"),
    ('parallel ("bogus"):\n  session "a"\n', 1, 1, "unknown join strategy 'bogus'"),
    ('parallel (on-fail: "explode"):\n  session "a"\n', 1, 1, "unknown on-fail policy 'explode'"),
    ('parallel (count: 1):\n  session "a"\n', 1, 1, "only applies to the \"any\""),
    ('parallel ("any", count: 0):\n  session "a"\n', 1, 1, "at least 1"),
    ('loop (max: 0):\n  session "a"\n', 1, 1, "(max: N) must be at least 1"),
    ('block b (max_depth: 0):\n  session "a"\n', 1, 1, "max_depth must be at least 1"),
    ('block b:\n  session "a"\nblock b:\n  session "c"\n', 3, 1, "already defined on line 1"),
    ('block b(x):\n  session "{x}"\ndo b\n', 3, 1, "takes 1 argument(s) (x), got 0"),
    ("throw\n", 1, 1, "only works inside a catch block"),
    ('try:\n  session "a"\nsession "b"\n', 1, 1, "needs a 'catch' or a 'finally'"),
    ('else:\n  session "a"\n', 1, 1, "'else' without an 'if'"),
    ('catch:\n  session "a"\n', 1, 1, "'catch' without a 'try'"),
    ('session "a" (retry: 3)\n', 1, 13, "session options in parentheses"),
    ('session "a":\n  model: opus\n', 1, 12, "no ':' after a session prompt"),
    ('session "x" | frobnicate: session "y"\n', 1, 15, "unknown pipeline operation"),
    ("foo bar:\n  session \"x\"\n", 1, 1, "unknown statement 'foo'"),
    ("agent a: x\n", 1, 10, "needs an indented block of properties"),
    ('session "x"\n  retry: "a"\n', 2, 10, "whole number"),
    ('session "x"\n  backoff: quadratic\n', 2, 12, "none, linear or exponential"),
    ("agent a:\n  persist: maybe\n", 2, 12, "persist: takes"),
    ('session "x"\n  prompt: 3\n', 2, 11, "prompt: takes a string"),
    ('session "a" ->\n', 1, 15, "expected a value"),
])
def test_e005_variants(source, line, column, message):
    only(source, "E005", line, column, message=message)


def test_e005_choice_without_options_and_without_criteria():
    result = compile('choice **c**:\n  session "a"\n')
    assert [(d.code, d.span.line, d.span.column) for d in result.diagnostics] == [
        ("E005", 1, 1), ("E005", 2, 3)]
    assert "no options" in result.diagnostics[0].message
    result = compile('choice:\n  option "A":\n    session "a"\n')
    assert {(d.code, d.span.line) for d in result.diagnostics} == {("E005", 1)}
    assert any("criteria" in d.message for d in result.diagnostics)


def test_choice_without_criteria_is_reported_once():
    only('choice:\n  option "A":\n    session "a"\n', "E005", 1, 7, message="criteria")


def test_gate_is_a_clear_later_version_error_and_parsing_goes_on():
    source = 'gate review:\n  session "a"\n  session "b"\nsession "after"\n  context: zz\n'
    result = compile(source)
    assert [(d.code, d.span.line, d.span.column) for d in result.diagnostics] == [
        ("E005", 1, 1), ("E029", 5, 12)]
    message = result.diagnostics[0].message
    assert "'gate'" in message and "later" in message
    body = result.program.body
    assert len(body) == 1 and body[0].expr.prompt.text == "after"


def test_gate_as_a_variable_name_is_not_a_gate_block():
    assert diagnostics('let gate = session "a"\nsession "b"\n  context: gate\n') == []


def test_e016_pattern_item_not_a_string_but_const_string_is_fine():
    only("agent a:\n  permissions:\n    read: [x]\n", "E016", 3, 12, message="strings in quotes")
    assert diagnostics('const SPEC = "https://x"\nagent a:\n  permissions:\n    network: [SPEC]\n'
                       ) == []


def test_e019_duplicates_in_other_lists():
    only('block b(x, x):\n  session "{x}"\n', "E019", 1, 1, message="parameter 'x' appears twice")
    only('parallel:\n  a = session "x"\n  a = session "y"\n', "E019", 3, 3,
         message="branch name 'a'")
    # the same name in different branches of an if is fine
    assert diagnostics('if **c**:\n  let r = session "a"\nelse:\n  let r = session "b"\n'
                       'session "x"\n  context: r\n') == []


def test_e029_variants():
    only('let s = "a"\nsession "{s}"\nsession "{t}"\n', "E029", 3, 10, message="'t' in interp")
    only('x = session "a"\n', "E029", 1, 1, message="undeclared variable 'x'")
    only('repeat 3 as i:\n  session "{i}"\nsession "{i}"\n', "E029", 3, 10)
    only('let xs = [1]\nlet r = xs | map:\n  session "{item}"\nsession "{item}"\n',
         "E029", 4, 10)
    only('try:\n  session "a"\ncatch as err:\n  session "{err}"\nsession "{err}"\n',
         "E029", 5, 10)
    only('for x in things:\n  session "{x}"\n', "E029", 1, 10, message="'things'")


def test_e017_not_raised_for_persistent_agent_and_throw_inside_catch_is_fine():
    assert diagnostics(AGENT + "  persist: true\nresume: a\n") == []
    assert diagnostics('try:\n  session "a"\ncatch as e:\n  throw\n') == []


def test_agents_as_context_and_named_sessions_are_fine():
    assert diagnostics(AGENT + 'session "x"\n  context: a\nsession s: a\n  prompt: "p"\n') == []


def test_w012_not_raised_when_count_fits():
    assert diagnostics('parallel ("any", count: 2):\n  session "a"\n  session "b"\n') == []


# --------------------------------------------------------------------------- recovery


def test_one_pass_reports_every_independent_error():
    source = (
        'let a = session "x"\n'          # 1 fine
        'session "y"\n'                  # 2
        '  context: zz\n'                # 3 E029
        'agent q:\n'                     # 4
        '  model: gpt\n'                 # 5 E008
        'session "z\n'                   # 6 E001
        'do nope\n'                      # 7 E032
        'parallel ("sometimes"):\n'      # 8 E005
        '  session "p"\n'                # 9
        'session "w" "v"\n'              # 10 E004
        'session: ghost\n'               # 11 E007
        'output = a\n'                   # 12 E023
    )
    assert diagnostics(source) == [
        ("E029", 3, 12), ("E008", 5, 10), ("E001", 6, 9), ("E032", 7, 1), ("E005", 8, 1),
        ("E004", 10, 13), ("E007", 11, 1), ("E023", 12, 8),
    ]


def test_recovery_skips_the_block_under_a_broken_statement():
    source = 'foo bar:\n  session "x" "y"\n  session "{undefined}"\nsession "after"\n'
    assert diagnostics(source) == [("E005", 1, 1)]
    assert compile(source).program.body[0].expr.prompt.text == "after"


def test_errors_inside_blocks_and_properties_recover():
    source = ('agent a:\n  model: sonnet\n  oops\n  prompt: ""\n'
              'parallel:\n  session "x" )\n  session: nobody\n')
    assert diagnostics(source) == [
        ("E005", 3, 3), ("W004", 4, 11), ("E004", 6, 15), ("E007", 7, 3)]


# --------------------------------------------------------------------------- source text


def test_tab_indentation_is_accepted_and_columns_count_characters():
    source = 'if **a**:\n\tsession "a"\n\tsession "b\n'
    assert diagnostics(source) == [("E001", 3, 10)]
    clean = compile('if **a**:\n\tsession "a"\n\tif **b**:\n\t\tsession "b"\n')
    assert clean.diagnostics == []
    outer = clean.program.body[0]
    assert len(outer.branches[0].body) == 2


def test_crlf_line_endings_give_the_same_program_and_positions():
    lf = 'agent a:\n  model: sonnet\nsession: a\n  prompt: "p"\n  context: qq\nsession "x\n'
    crlf = lf.replace("\n", "\r\n")
    cr = lf.replace("\n", "\r")
    expected = [("E029", 5, 12), ("E001", 6, 9)]
    assert diagnostics(lf) == expected
    assert diagnostics(crlf) == expected
    assert diagnostics(cr) == expected
    assert compile(crlf).program == compile(lf).program


def test_crlf_inside_triple_quoted_string_is_normalized():
    program = compile('session """a\r\nb"""\r\n').program
    assert program.body[0].expr.prompt.parts == ("a\nb",)


def test_bom_is_ignored():
    source = 'session "a"\nsession "b\n'
    assert diagnostics("\ufeff" + source) == [("E001", 2, 9)]
    assert compile("\ufeff" + source).program == compile(source).program
    # columns on the first line are counted without the BOM
    assert diagnostics('\ufeffsession "x') == [("E001", 1, 9)]


def test_empty_and_comment_only_programs():
    for source in ("", "\n", "# nothing\n   # indented comment\n\n", "\ufeff", "   "):
        result = compile(source)
        assert result.diagnostics == [], source
        assert result.program is not None and result.program.body == ()


# --------------------------------------------------------------------------- reporting


def test_format_shows_location_source_line_and_caret():
    source = 'session "x"\n  context: missing\n'
    diag = compile(source, "prog.prose").diagnostics[0]
    text = diag.format(source)
    assert text.splitlines() == [
        "prog.prose:2:12: E029 undefined variable 'missing'",
        "      context: missing",
        "               ^~~~~~~",
    ]
    assert diag.to_dict() == {
        "file": "prog.prose", "code": "E029", "severity": "error", "line": 2, "column": 12,
        "end_line": 2, "end_column": 19, "message": "undefined variable 'missing'",
    }


def test_diagnostics_are_sorted_by_position():
    source = 'session: x\nsession "a\\q"\nlet y = zz\n'
    found = diagnostics(source)
    assert found == sorted(found, key=lambda t: (t[1], t[2]))
    assert [c for c, _, _ in found] == ["E007", "E002", "E029"]


def test_w017_pipeline_variable_hides_outer_name():
    only('let xs = [1]\nlet item = "a"\nlet r = xs | map: session "{item}"\n', "W017", 3, 9)


# --------------------------------------------------------------------------- coverage of codes

DOCS = Path(__file__).resolve().parents[2] / "docs" / "diagnostics.md"
SOURCES = Path(__file__).resolve().parents[2] / "src" / "openprose" / "language"
RUN_TIME_OR_RETIRED = {"E018", "E022", "W011"}
# E034: test_imports_root.py; E035, E036, W020: test_newer_syntax.py
TESTED_OUTSIDE_CASES = {"W014", "E026", "E027", "E028", "E034", "E035", "E036", "W020"}


def test_every_static_code_has_a_test():
    """Each code the front end can emit is covered above (fails when a new code appears)."""
    tested = {case[0] for case in CASES} | TESTED_OUTSIDE_CASES
    emitted = set()
    for module in ("lexer.py", "parser.py", "validator.py"):
        emitted |= set(re.findall(r'"([EW]\d{3})"', (SOURCES / module).read_text("utf-8")))
    assert emitted, "no codes found in the front-end sources"
    assert emitted - tested == set()
    if DOCS.is_file():
        documented = set(re.findall(r"^\| ([EW]\d{3}) \|", DOCS.read_text("utf-8"), re.M))
        assert documented - RUN_TIME_OR_RETIRED == tested


# --------------------------------------------------------------------------- no false positives

VALID = {
    "use paths": 'use "https://example.com/p.prose" as a\nuse "@alice/research" as b\n'
                 'use "./local.prose" as c\nuse "../x/y.prose" as d\nuse "alice/tools/sum"\n',
    "skill sources": 'import "a" from "npm:@scope/pkg"\nimport "b" from "./local"\n'
                     'import "c" from "/abs/x"\nimport "d" from "github:o/r/some/path"\n'
                     'import "e" from "npm:plain"\nimport "f" from "../up"\n',
    "models and persist": 'agent a:\n  model: "claude-sonnet-4"\n  persist: project\n'
                          'agent b:\n  model: haiku\n  persist: "./mem"\n'
                          'agent c:\n  model: opus\n  persist: user\nresume: c\n',
    "permissions": 'const SPEC = "https://x"\nagent a:\n  model: opus\n  permissions:\n'
                   '    read: ["*.md", "src/**"]\n    write: []\n    execute: ["make"]\n'
                   '    bash: prompt\n    network: allow\n'
                   'agent b:\n  model: opus\n  permissions:\n    network: [SPEC, "https://y"]\n',
    "skill imported by use": 'use "alice/research" as research\nagent a:\n  model: opus\n'
                             '  skills: ["research"]\n',
    "inputs and interpolation": 'input topic: "t"\nsession "about {topic}"\n',
    "let reassignment": 'let x = session "a"\nx = session "b"\n',
    "branch names are visible after": 'parallel:\n  a = session "x"\nsession "{a}"\n',
    "session properties": 'session "a"\n  retry: 3\n  backoff: exponential\n  model: "id-1"\n'
                          '  context: { a: [], b: "x" }\n',
    "block hoisting": 'do b("x")\nblock b(q):\n  session "{q}"\n',
    "loop variables in scope": 'for x, i in ["a"]:\n  session "{x} {i}"\n'
                               'repeat 2 as k:\n  session "{k}"\n'
                               'loop until **done** (max: 3) as j:\n  session "{j}"\n',
    "pipeline variables": 'let xs = ["a"]\nlet r = xs | map: session "{item}"\n'
                          '  | reduce(acc, y):\n      session "{acc} {y}"\n',
    "catch variable": 'try:\n  session "a"\ncatch as err:\n  session "{err}"\n  throw\n'
                      'finally:\n  session "c"\n',
    "triple-quoted literal braces": 'session """JSON: {"a": 1} and {}"""\n',
    "escaped brace": 'session "\\{not_defined}"\n',
}


@pytest.mark.parametrize("source", VALID.values(), ids=VALID.keys())
def test_valid_forms_have_no_diagnostics(source):
    assert diagnostics(source) == []


def test_e010_same_alias_for_different_programs():
    only('use "a/b" as x\nuse "c/d" as x\n', "E010", 2, 1, message="name 'x'")


def test_tabs_mixed_with_spaces_are_named_as_the_problem():
    """A tab-indented line among space-indented ones used to read as a property of the line
    above (a tab is 8 columns): `E005 expected a property ..., found 'let'`."""
    diag = only('if **ok**:\n  session "a"\n\tlet y = session "b"\n', "E005", 3, 1)
    assert "mixes tabs and spaces" in diag.message and "found" not in diag.message
    only('agent w:\n    model: sonnet\n\tprompt: "x"\n', "E005", 3, 1, message="tabs")
    assert diagnostics('agent w:\n\tmodel: sonnet\n\tprompt: "x"\n') == []  # tabs only


def test_an_undefined_name_suggests_the_closest_defined_one():
    only('let xy = session "a"\nsession "b"\n  context: xx\n', "E029", 3, 12,
         message="undefined variable 'xx'; did you mean 'xy'?")
    only('let draft = session "a"\nsession "Fix {drfat}"\n', "E029", 2, 14,
         message="did you mean 'draft'?")
    only('let total = session "a"\ntotl = session "b"\n', "E029", 2, 1,
         message="or did you mean 'total'?")
    diag = only('let alpha = session "a"\nsession "b"\n  context: zzz\n', "E029", 3, 12)
    assert "did you mean" not in diag.message  # nothing close: no guess
