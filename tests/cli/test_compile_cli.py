"""`prose compile` as a user runs it: a real subprocess, real files, exit codes and output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROSE = str(Path(sys.executable).with_name("prose"))

GOOD = 'input topic: "What to research"\nlet notes = session "Research {topic}"\n'
BAD = 'session: ghost\nlet x = session "unterminated\n'
WARN = 'session ""\n'


def prose(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROSE, *args], capture_output=True, text=True, input=stdin,
                          timeout=60)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_clean_program_exits_zero_and_prints_nothing(tmp_path: Path) -> None:
    result = prose("compile", write(tmp_path, "good.prose", GOOD))
    assert result.returncode == 0
    assert result.stdout == "" and result.stderr == ""


def test_errors_exit_one_with_location_source_line_and_caret(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.prose", BAD)
    result = prose("compile", path)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert f"{path}:1:1: E007 undefined agent 'ghost'" in lines
    assert f"{path}:2:17: E001 unterminated string" in result.stderr
    at = lines.index(next(line for line in lines if ":2:17: E001" in line))
    assert lines[at + 1].strip() == 'let x = session "unterminated'
    assert lines[at + 2] == "    " + " " * 16 + "^"
    assert "2 error(s), 0 warning(s) in 1 file(s)" in result.stderr


def test_warnings_alone_exit_zero(tmp_path: Path) -> None:
    result = prose("compile", write(tmp_path, "warn.prose", WARN))
    assert result.returncode == 0
    assert "W001" in result.stderr


def test_json_lists_every_diagnostic_of_every_file(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.prose", BAD)
    warn = write(tmp_path, "warn.prose", WARN)
    result = prose("compile", "--json", bad, warn)
    assert result.returncode == 1
    payload = json.loads(result.stdout)
    found = {(d["file"], d["code"], d["severity"], d["line"], d["column"])
             for d in payload["diagnostics"]}
    assert found == {(bad, "E007", "error", 1, 1), (bad, "E001", "error", 2, 17),
                     (warn, "W001", "warning", 1, 9)}
    assert set(payload["diagnostics"][0]) == {"file", "code", "severity", "line", "column",
                                              "end_line", "end_column", "message"}


@pytest.mark.parametrize(("args", "message"), [
    (("compile", "missing.prose"), "missing.prose: no such file"),
    (("compile", "."), "is a directory"),
    (("compile",), "Missing argument"),
    (("compile", "--emit", "canonical", "a.prose", "b.prose"), "exactly one FILE"),
])
def test_usage_problems_exit_two_without_traceback(args: tuple[str, ...], message: str) -> None:
    result = prose(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_binary_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "blob.prose"
    path.write_bytes(b"\xff\xfe\x00session")
    result = prose("compile", str(path))
    assert result.returncode == 2
    assert "not UTF-8 text" in result.stderr


def test_emit_canonical_normalizes_and_is_stable(tmp_path: Path) -> None:
    messy = ('parallel ( "all" , on-fail : "continue" ) :\n'
             '    a = session "x"   # comment\n'
             '    b = session "y"\n'
             'let s = [ "p" ,\n   "q" ]\n')
    first = prose("compile", "--emit", "canonical", write(tmp_path, "m.prose", messy))
    assert first.returncode == 0
    assert first.stdout == ('parallel (on-fail: "continue"):\n'
                            '  a = session "x"\n'
                            '  b = session "y"\n'
                            '\n'
                            'let s = ["p", "q"]\n')
    again = prose("compile", "--emit", "canonical", write(tmp_path, "c.prose", first.stdout))
    assert again.stdout == first.stdout


def test_canonical_refuses_a_program_with_errors(tmp_path: Path) -> None:
    result = prose("compile", "--emit", "canonical", write(tmp_path, "bad.prose", BAD))
    assert result.returncode == 1
    assert result.stdout == ""
    assert "E007" in result.stderr


def test_reads_standard_input() -> None:
    result = prose("compile", "-", stdin=BAD)
    assert result.returncode == 1
    assert "<stdin>:1:1: E007" in result.stderr


def test_compile_does_not_import_engine_sdks_or_drivers() -> None:
    code = ("import sys, openprose.cli.compile_cmd; "
            "heavy = [m for m in ('mcp', 'anthropic', 'psycopg', 'openprose.engine', "
            "'openprose.state', 'rich', 'pygls', 'lsprotocol', 'openprose.lsp') "
            "if m in sys.modules]; print(heavy)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_a_flood_of_diagnostics_is_capped_with_a_count(tmp_path: Path) -> None:
    path = write(tmp_path, "parens.prose", "let x = " + "(" * 20_000 + "\n")
    text = prose("compile", path)
    assert text.returncode == 1
    assert f"... and {20_000 + 1 - 100} more diagnostic(s) in {path}" in text.stderr
    assert len(text.stderr) < 40_000
    as_json = prose("compile", "--json", path)
    payload = json.loads(as_json.stdout)
    assert len(payload["diagnostics"]) == 100
    assert payload["omitted"] == {path: 20_000 + 1 - 100}


def test_a_long_line_is_clipped_in_the_excerpt(tmp_path: Path) -> None:
    path = write(tmp_path, "long.prose", 'let x = "' + "a" * 100_000 + '" +\n')
    text = prose("compile", path)
    assert text.returncode == 1
    excerpt, caret = text.stderr.splitlines()[1:3]
    assert len(excerpt) < 200 and excerpt.strip().startswith("...")
    assert excerpt.rstrip().endswith('" +')
    assert caret.index("^") == len(excerpt.rstrip())  # just past the "+": a value is due
