"""The canonical form with comments kept (language.canonical.format_source), the form
``prose lsp`` formats with: every comment kept in place, or the text refused naming the
comment's line; never a changed program or a lost comment."""

from __future__ import annotations

import pytest

from openprose.language import compile
from openprose.language.canonical import NotFormatted, format_source
from openprose.language.lexer import Lexer


def comments(text: str) -> list[str]:
    lexer = Lexer(text)
    lexer.tokenize()
    lines = text.split("\n")
    return [lines[c.line - 1][c.column - 1:c.end_column - 1].rstrip() for c in lexer.comments]


def test_comments_stay_with_their_code() -> None:
    source = ("# about the agent\nagent a:   # the only one\n    model:   opus\n"
              "    # prompt is left out\n\nblock b(x):\n      session: a   # ask\n"
              "        prompt: \"Look at {x}\"\n      # more to come\n"
              "# calls\nlet y = do b(\"z\")\n# the end\n")
    assert format_source(source, compile(source).program) == (
        "# about the agent\nagent a:  # the only one\n  model: opus\n  # prompt is left out\n"
        "\nblock b(x):\n  session: a  # ask\n    prompt: \"Look at {x}\"\n  # more to come\n"
        "\n# calls\nlet y = do b(\"z\")\n\n# the end\n")


def test_corpus_programs_keep_every_comment_or_are_refused(corpus) -> None:
    """Each commented corpus program: formatted to a fixed point that compiles to the same
    tree with the same comments in the same order, or refused naming a comment's line."""
    formatted = 0
    for path in sorted(corpus.glob("*.prose")):
        source = path.read_text("utf-8")
        result = compile(source)
        if not result.ok or not comments(source):
            continue
        try:
            text = format_source(source, result.program)
        except NotFormatted as refusal:
            line = int(str(refusal).split("comment on line ")[1].split()[0])
            assert source.split("\n")[line - 1].lstrip().startswith("#") or \
                "#" in source.split("\n")[line - 1], path.name
            continue
        formatted += 1
        again = compile(text)
        assert again.ok and again.program == result.program, path.name
        assert comments(text) == comments(source), path.name
        assert format_source(text, again.program) == text, path.name
    assert formatted >= 40


def test_a_comment_in_a_literal_written_on_one_line_is_refused() -> None:
    source = 'let x = [\n  1,  # one\n  2\n]\nsession "{x}"\n'
    with pytest.raises(NotFormatted, match="comment on line 2"):
        format_source(source, compile(source).program)
