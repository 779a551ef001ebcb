"""``prose lsp`` driven by a real LSP client (pytest-lsp) over stdio, on corpus programs:
diagnostics as edits break and fix a text, imports, hover, navigation, completion, outline,
folding, formatting, highlighting, and no crash on fuzzed texts. Every wait is on a
notification or a reply, never on time."""

from __future__ import annotations

import asyncio
import random
import re
import sys
from pathlib import Path

import prose_fuzzgen as g
import pytest
import pytest_lsp
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

from openprose.language import compile
from openprose.language.canonical import format_program

pytestmark = [pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.xdist_group("lsp")]  # one server for the module, one worker
SERVER = [sys.executable, "-c", "from openprose.cli import main; main()", "lsp"]
FUZZ_CASES = 40


class Published:
    """Every publishDiagnostics by (uri, version), and who waits for which: waiting for one
    notification at a time would miss one that arrives with another in the same read."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, int | None], list[lsp.Diagnostic]] = {}
        self.waiting: dict[tuple[str, int | None], asyncio.Future] = {}

    def __call__(self, ls: LanguageClient, params: lsp.PublishDiagnosticsParams) -> None:
        key = (params.uri, params.version)
        self.seen[key] = list(params.diagnostics)
        waiter = self.waiting.pop(key, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, uri: str, version: int) -> list[lsp.Diagnostic]:
        key = (uri, version)
        if key not in self.seen:
            self.waiting[key] = asyncio.get_running_loop().create_future()
            await self.waiting[key]
        return self.seen.pop(key)


def make_client() -> LanguageClient:
    client = LanguageClient(converter_factory=default_converter)
    client.published = Published()
    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES,
                                   lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: client.published})
    return client


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER,
                                                              client_factory=make_client))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(lsp.InitializeParams(
        capabilities=pytest_lsp.client_capabilities("visual-studio-code")))
    yield
    await lsp_client.shutdown_session()


class Editor:
    """Open documents with versions, waiting for the diagnostics of each version."""

    def __init__(self, client: LanguageClient) -> None:
        self.client = client
        self.versions: dict[str, int] = {}

    async def open(self, path: Path, text: str | None = None) -> tuple[str, list]:
        uri = path.resolve().as_uri()
        text = path.read_text("utf-8") if text is None else text
        self.versions[uri] = 1
        waiting = self.diagnostics(uri, 1)
        self.client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            lsp.TextDocumentItem(uri, "prose", 1, text)))
        return uri, await waiting

    async def change(self, uri: str, text: str) -> list[lsp.Diagnostic]:
        version = self.versions[uri] = self.versions[uri] + 1
        waiting = self.diagnostics(uri, version)
        self.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            lsp.VersionedTextDocumentIdentifier(version, uri),
            [lsp.TextDocumentContentChangeWholeDocument(text)]))
        return await waiting

    async def diagnostics(self, uri: str, version: int) -> list[lsp.Diagnostic]:
        return await self.client.published.wait(uri, version)

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(lsp.DidCloseTextDocumentParams(
            lsp.TextDocumentIdentifier(uri)))


def at(text: str, needle: str, occurrence: int = 0, offset: int = 0) -> lsp.Position:
    """The position of the ``occurrence``-th ``needle`` in ``text`` (plus ``offset``)."""
    index = -1
    for _ in range(occurrence + 1):
        index = text.index(needle, index + 1)
    index += offset
    line = text.count("\n", 0, index)
    return lsp.Position(line, index - (text.rfind("\n", 0, index) + 1))


def doc(uri: str) -> lsp.TextDocumentIdentifier:
    return lsp.TextDocumentIdentifier(uri)


async def test_diagnostics_follow_edits_that_break_and_fix_a_file(client, corpus, tmp_path):
    editor = Editor(client)
    source = (corpus / "13-variables-and-context.prose").read_text("utf-8")
    uri, found = await editor.open(tmp_path / "thirteen.prose", source)
    assert found == []
    broken = source + 'session: ghost\nlet mode = "a"\nif mode is "b":\n  session "x"\n'
    found = await editor.change(uri, broken)
    last = source.count("\n")
    assert [(d.code, d.severity, d.range) for d in found] == [
        ("E007", lsp.DiagnosticSeverity.Error,
         lsp.Range(lsp.Position(last, 0), lsp.Position(last, 14))),
        ("W020", lsp.DiagnosticSeverity.Warning,
         lsp.Range(lsp.Position(last + 2, 8), lsp.Position(last + 2, 10)))]
    hint = found[1].related_information
    assert hint and hint[0].message == "write '==' in OpenProse 0.8"
    assert hint[0].location.uri == uri
    assert await editor.change(uri, source) == []
    editor.close(uri)


async def test_use_is_followed_into_the_imported_file(client, tmp_path):
    editor = Editor(client)
    lib = tmp_path / "lib.prose"
    lib.write_text('input topic: "What"\nsession: nobody\noutput summary = session "S {topic}"\n')
    main = tmp_path / "main.prose"
    text = 'use "./lib.prose" as lib\nlet r = lib(topic: "x")\nsession "{r}"\n'
    uri, found = await editor.open(main, text)
    assert [(d.code, d.range.start.line) for d in found] == [("E007", 0)]
    assert "lib.prose has 1 error(s)" in found[0].message
    related = found[0].related_information
    assert related[0].location.uri == lib.resolve().as_uri()
    assert related[0].location.range.start == lsp.Position(1, 0)
    for position in (at(text, "lib", 1), at(text, "lib(")):  # the alias, a call
        places = await client.text_document_definition_async(
            lsp.DefinitionParams(doc(uri), position))
        assert [p.uri for p in places] == [lib.resolve().as_uri()]
    lib.write_text('input topic: "What"\noutput summary = session "S {topic}"\n')
    assert await editor.change(uri, text + "\n") == []
    editor.close(uri)


async def test_hover_on_bindings_agents_blocks_and_sessions(client, corpus, tmp_path):
    editor = Editor(client)
    text = (corpus / "13-variables-and-context.prose").read_text("utf-8")
    uri, _ = await editor.open(tmp_path / "hover.prose", text)

    async def hover(position: lsp.Position) -> str:
        answer = await client.text_document_hover_async(lsp.HoverParams(doc(uri), position))
        assert answer is not None
        return answer.contents.value

    agent = await hover(at(text, "session: analyst", offset=10))
    assert "**agent** `analyst`" in agent and "model: opus" in agent
    assert "persist: no" in agent and "data analyst" in agent
    binding = await hover(at(text, "context: research", offset=10))
    line = text[:text.index("let research")].count("\n") + 1
    assert "**binding** `research`" in binding and f"`let` on line {line} by a session" in \
        binding
    session = await hover(at(text, "session: analyst", offset=2))
    assert "agent: `analyst`" in session and "context: research" in session
    editor.close(uri)
    blocks = (corpus / "26-parameterized-blocks.prose").read_text("utf-8")
    uri, _ = await editor.open(tmp_path / "blocks.prose", blocks)
    assert "**block** `review_code(language, focus_area)`" in await hover(
        at(blocks, "do review_code", offset=4))
    assert "**parameter** `focus_area` of block `review_code`" in await hover(
        at(blocks, "{focus_area}", offset=1))
    editor.close(uri)


async def test_definition_and_references(client, corpus, tmp_path):
    editor = Editor(client)
    text = (corpus / "26-parameterized-blocks.prose").read_text("utf-8")
    uri, _ = await editor.open(tmp_path / "nav.prose", text)

    async def definition(position: lsp.Position) -> list[lsp.Position]:
        places = await client.text_document_definition_async(
            lsp.DefinitionParams(doc(uri), position))
        return [p.range.start for p in places]

    async def references(position: lsp.Position) -> list[lsp.Position]:
        places = await client.text_document_references_async(lsp.ReferenceParams(
            text_document=doc(uri), position=position,
            context=lsp.ReferenceContext(include_declaration=True)))
        return sorted((p.range.start for p in places), key=lambda p: (p.line, p.character))

    block = at(text, "block review_code", offset=6)
    assert await definition(at(text, "do review_code", 1, offset=3)) == [block]
    calls = [at(text, "do review_code", i, offset=3) for i in range(text.count("do review_code"))]
    assert await references(block) == [block, *calls]
    param = at(text, "review_code(language", offset=12)
    uses = [m.start() + 1 for m in re.finditer(r"\{language\}", text)]
    assert await definition(at(text, "{language}", 1, offset=1)) == [param]
    assert len(await references(param)) == 1 + len(uses)
    # a parameter of another block with the same name is another symbol
    other = (corpus / "13-variables-and-context.prose").read_text("utf-8")
    uri2, _ = await editor.open(tmp_path / "agents.prose", other)
    places = await client.text_document_references_async(lsp.ReferenceParams(
        text_document=doc(uri2), position=at(other, "agent writer", offset=6),
        context=lsp.ReferenceContext(include_declaration=False)))
    assert len(places) == other.count("session: writer")
    editor.close(uri)
    editor.close(uri2)


async def test_document_highlight_marks_where_a_name_is_bound_and_read(client, corpus,
                                                                       tmp_path):
    editor = Editor(client)
    text = (corpus / "26-parameterized-blocks.prose").read_text("utf-8")
    uri, _ = await editor.open(tmp_path / "highlight.prose", text)
    answer = await client.text_document_document_highlight_async(
        lsp.DocumentHighlightParams(doc(uri), at(text, "{language}", 1, offset=1)))
    found = sorted(((h.range.start.line, h.range.start.character), h.kind) for h in answer)
    param = at(text, "review_code(language", offset=12)
    assert found[0] == ((param.line, param.character), lsp.DocumentHighlightKind.Write)
    uses = [at(text, "{language}", i, offset=1) for i in range(text.count("{language}"))]
    assert found[1:] == [((u.line, u.character), lsp.DocumentHighlightKind.Read)
                         for u in uses]
    editor.close(uri)


async def test_completion_offers_what_fits_the_place(client, corpus, tmp_path):
    editor = Editor(client)
    text = (corpus / "26-parameterized-blocks.prose").read_text("utf-8")
    text += ('\nagent critic:\n  model: sonnet\n\nlet verdict = session: critic\n'
             '  prompt: "Judge"\n')
    uri, _ = await editor.open(tmp_path / "complete.prose", text)

    async def labels(line_text: str, extra: str = "") -> list[str]:
        """The labels offered at the end of ``line_text`` written as the last line."""
        edited = text + extra + line_text
        await editor.change(uri, edited)
        lines = edited.split("\n")
        answer = await client.text_document_completion_async(lsp.CompletionParams(
            doc(uri), lsp.Position(len(lines) - 1, len(lines[-1]))))
        return [item.label for item in answer.items]

    assert await labels("session: ") == ["critic"]
    assert "review_code" in await labels("do re")
    assert await labels("  model: ", "session: critic\n") == ["haiku", "opus", "sonnet"]
    properties = await labels("  ", "session: critic\n")
    assert {"model", "prompt", "context", "retry", "backoff"} <= set(properties)
    assert "persist" not in properties
    assert "persist" in await labels("  ", "agent other:\n  model: opus\n")
    visible = await labels('session "about {', "")
    assert "verdict" in visible and "language" not in visible
    inside = await labels('  session "about {', "block b(language):\n")
    assert "language" in inside
    assert "verdict" in await labels("  context: ", "session: critic\n")
    editor.close(uri)


async def test_symbols_folding_and_highlighting(client, corpus, tmp_path):
    editor = Editor(client)
    text = (corpus / "13-variables-and-context.prose").read_text("utf-8")
    uri, _ = await editor.open(tmp_path / "outline.prose", text)
    symbols = await client.text_document_document_symbol_async(
        lsp.DocumentSymbolParams(doc(uri)))
    names = {(s.name, s.kind) for s in symbols}
    assert {("researcher", lsp.SymbolKind.Class), ("research", lsp.SymbolKind.Variable),
            ("report", lsp.SymbolKind.Variable)} <= names
    folds = await client.text_document_folding_range_async(lsp.FoldingRangeParams(doc(uri)))
    agent_line = text[:text.index("agent researcher")].count("\n")
    assert lsp.FoldingRange(agent_line, agent_line + 2) in folds
    tokens = await client.text_document_semantic_tokens_full_async(
        lsp.SemanticTokensParams(doc(uri)))
    decoded = decode(tokens.data, text)
    assert ("agent", "keyword") in decoded and ("researcher", "class") in decoded
    assert ("model", "property") in decoded and ("research", "variable") in decoded
    assert any(t == "comment" for _, t in decoded) and any(t == "string" for _, t in decoded)
    editor.close(uri)


TYPES = ["keyword", "variable", "parameter", "function", "class", "namespace", "property",
         "string", "number", "comment", "macro"]


def decode(data: list[int], text: str) -> list[tuple[str, str]]:
    """(text, type) of each semantic token (ASCII text: units are characters)."""
    lines = text.split("\n")
    out, line, start = [], 0, 0
    for i in range(0, len(data), 5):
        delta_line, delta_start, length, kind, _ = data[i:i + 5]
        line += delta_line
        start = start + delta_start if delta_line == 0 else delta_start
        out.append((lines[line][start:start + length], TYPES[kind]))
    return out


async def test_formatting_is_canonical_or_refused(client, corpus, tmp_path):
    editor = Editor(client)
    source = (corpus / "14-composition-blocks.prose").read_text("utf-8")
    plain = "\n".join(line for line in source.split("\n") if not line.startswith("#"))
    uri, _ = await editor.open(tmp_path / "fmt.prose", "\n\n" + plain)

    async def fmt() -> list[lsp.TextEdit]:
        return await client.text_document_formatting_async(lsp.DocumentFormattingParams(
            doc(uri), lsp.FormattingOptions(2, True)))

    edits = await fmt()
    assert len(edits) == 1
    formatted = edits[0].new_text
    assert compile(formatted).ok and compile(formatted).program == compile(plain).program
    await editor.change(uri, formatted)
    assert not await fmt()
    await editor.change(uri, formatted + "session: ghost\n")
    with pytest.raises(JsonRpcException, match="1 error"):
        await fmt()
    editor.close(uri)


async def test_no_crash_on_fuzzed_texts(client, tmp_path):
    """Mutated corpus programs and token soup: every request is answered, and the server
    still works afterwards."""
    editor = Editor(client)
    rng = random.Random(33)
    sources = g.corpus_sources()
    uri, _ = await editor.open(tmp_path / "fuzz.prose", "")
    for case in range(FUZZ_CASES):
        text = g.token_soup(rng) if case % 4 == 0 or not sources else \
            g.mutate(rng, g.excerpt(rng, rng.choice(sources)))
        await editor.change(uri, text)
        lines = text.split("\n")
        line = rng.randrange(len(lines))
        position = lsp.Position(line, rng.randrange(len(lines[line]) + 1))
        await client.text_document_hover_async(lsp.HoverParams(doc(uri), position))
        await client.text_document_completion_async(lsp.CompletionParams(doc(uri), position))
        await client.text_document_references_async(lsp.ReferenceParams(
            text_document=doc(uri), position=position,
            context=lsp.ReferenceContext(include_declaration=True)))
        await client.text_document_document_symbol_async(lsp.DocumentSymbolParams(doc(uri)))
        await client.text_document_semantic_tokens_full_async(
            lsp.SemanticTokensParams(doc(uri)))
        await client.text_document_folding_range_async(lsp.FoldingRangeParams(doc(uri)))
    assert await editor.change(uri, 'session "still here"\n') == []
    editor.close(uri)


async def test_interpolations_and_discretion_are_highlighted(client, tmp_path):
    """``{name}`` inside a string is a reference (coloured as what it names, the string cut
    around it, over lines in a triple-quoted one); ``**…**`` is its own colour."""
    editor = Editor(client)
    text = ('let topic = session "Pick a topic"\nblock b(depth):\n'
            '  session "Go {depth} deep on {topic.title}"\n'
            'if **the {topic} is done**:\n  session """Line one\n  then {topic} again"""\n')
    uri, found = await editor.open(tmp_path / "colours.prose", text)
    assert found == []
    tokens = await client.text_document_semantic_tokens_full_async(
        lsp.SemanticTokensParams(doc(uri)))
    decoded = decode(tokens.data, text)
    assert decoded[decoded.index(('"Go ', "string")):][:5] == [
        ('"Go ', "string"), ("{depth}", "parameter"), (" deep on ", "string"),
        ("{topic.title}", "variable"), ('"', "string")]
    assert ("**the {topic} is done**", "macro") in decoded
    assert ("  then ", "string") in decoded and decoded.count(("{topic}", "variable")) == 1
    editor.close(uri)


async def test_semantic_tokens_delta_is_the_edit_from_the_tokens_last_sent(client, tmp_path):
    """After a line inserted mid-text, a delta request answers one edit that takes the
    tokens the client has to the new text's; an unknown result id gets them all."""
    editor = Editor(client)
    text = "".join(f'agent a{i}:\n  model: sonnet\n\nlet x{i} = session: a{i}\n'
                   f'  prompt: "Part {i} of {{x{i - 1 if i else 0}}}"\n\n' for i in range(20))
    uri, _ = await editor.open(tmp_path / "delta.prose", text)
    first = await client.text_document_semantic_tokens_full_async(
        lsp.SemanticTokensParams(doc(uri)))
    at = text.index("let x10")
    text = text[:at] + 'session "inserted {x3}"\n' + text[at:]
    await editor.change(uri, text)
    delta = await client.text_document_semantic_tokens_full_delta_async(
        lsp.SemanticTokensDeltaParams(doc(uri), first.result_id))
    assert isinstance(delta, lsp.SemanticTokensDelta) and len(delta.edits) == 1
    edit = delta.edits[0]
    assert edit.delete_count < 20 and len(edit.data or []) < 40  # the place changed only
    data = first.data[:edit.start] + (edit.data or []) + \
        first.data[edit.start + edit.delete_count:]
    assert ("{x3}", "variable") in decode(data, text)
    whole = await client.text_document_semantic_tokens_full_async(
        lsp.SemanticTokensParams(doc(uri)))
    assert data == whole.data and whole.result_id != first.result_id
    again = await client.text_document_semantic_tokens_full_delta_async(
        lsp.SemanticTokensDeltaParams(doc(uri), "unknown"))
    assert isinstance(again, lsp.SemanticTokens) and again.data == whole.data
    editor.close(uri)


async def test_formatting_keeps_comments_in_place(client, corpus, tmp_path):
    """A commented file is formatted with every comment where it was; one whose place the
    canonical form cannot keep (inside an object literal it writes on one line) is refused,
    naming its line."""
    editor = Editor(client)
    source = (corpus / "14-composition-blocks.prose").read_text("utf-8")
    messy = source.replace("\n  ", "\n    ").replace("session:", "session:   ")
    messy = messy.replace('\n\n', '\n\n# a note\n', 1) + "# the end\n"
    uri, _ = await editor.open(tmp_path / "fmt.prose", messy)
    edits = await client.text_document_formatting_async(lsp.DocumentFormattingParams(
        doc(uri), lsp.FormattingOptions(2, True)))
    formatted = edits[0].new_text
    assert compile(formatted).program == compile(source).program
    comments = [line.strip() for line in messy.split("\n") if line.strip().startswith("#")]
    assert [line.strip() for line in formatted.split("\n")
            if line.strip().startswith("#")] == comments
    assert formatted.endswith("# the end\n")
    code = [line for line in formatted.split("\n") if not line.strip().startswith("#")]
    assert "\n".join(code).rstrip() == format_program(compile(source).program).rstrip()
    text = 'let x = {\n  a: 1,\n  # why b\n  b: 2\n}\nsession "{x}"\n'
    await editor.change(uri, text)
    with pytest.raises(JsonRpcException, match="comment on line 3"):
        await client.text_document_formatting_async(lsp.DocumentFormattingParams(
            doc(uri), lsp.FormattingOptions(2, True)))
    editor.close(uri)


async def test_ranged_edits_move_and_change_statements(client, corpus, tmp_path):
    """Edits sent as ranges (the incremental sync the server asks for): lines added above
    and below statements the server keeps parsed, one statement broken and fixed; each
    version's diagnostics are a whole compile's, at the moved places."""
    editor = Editor(client)
    source = (corpus / "26-parameterized-blocks.prose").read_text("utf-8")
    text = source + 'session: ghost\n'
    uri, found = await editor.open(tmp_path / "ranged.prose", text)

    async def edit(line: int, end_line: int, new: str) -> list[lsp.Diagnostic]:
        nonlocal text
        lines = text.split("\n")
        text = "\n".join([*lines[:line], *new.split("\n"), *lines[end_line:]])
        version = editor.versions[uri] = editor.versions[uri] + 1
        waiting = editor.diagnostics(uri, version)
        client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            lsp.VersionedTextDocumentIdentifier(version, uri),
            [lsp.TextDocumentContentChangePartial(
                lsp.Range(lsp.Position(line, 0), lsp.Position(end_line, 0)), new + "\n")]))
        return await waiting

    def expected() -> list[tuple[str, lsp.Position]]:
        return [(d.code, lsp.Position(d.span.line - 1, d.span.column - 1))
                for d in compile(text).diagnostics]

    def got(found: list[lsp.Diagnostic]) -> list[tuple[str, lsp.Position]]:
        return [(d.code, d.range.start) for d in found]

    assert got(found) == expected() and expected()
    assert got(await edit(0, 0, "# two lines\n# added above")) == expected()
    lines = text.split("\n")
    middle = next(i for i in range(len(lines) // 2, len(lines)) if lines[i][:1].isalpha())
    assert got(await edit(middle, middle, 'let broken = session "open')) == expected()
    assert any(code == "E001" for code, _ in expected())
    assert got(await edit(middle, middle + 1, 'let fixed = session "closed"')) == expected()
    assert got(await edit(0, 2, "")) == expected()
    editor.close(uri)
