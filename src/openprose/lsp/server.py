"""The pygls server behind ``prose lsp``: documents compiled as they change (debounced),
requests answered from :mod:`openprose.lsp.features`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from openprose import __version__
from openprose.language.parser import Parses
from openprose.lsp import features
from openprose.lsp.document import Document, settle

#: seconds of quiet after a change before the text is compiled again
DEBOUNCE = 0.2
R = TypeVar("R")
log = logging.getLogger(__name__)


class ProseLanguageServer(LanguageServer):
    """Keeps each open document's latest compile, the parses its next version reuses (edits
    arrive as ranges, the default incremental sync), and the last version that could be
    parsed (completion goes on from it while a line is half typed)."""

    def __init__(self) -> None:
        super().__init__("openprose", __version__)
        self.documents: dict[str, Document] = {}
        self.parsed: dict[str, Document] = {}
        self.parses: dict[str, Parses] = {}
        self.pending: dict[str, asyncio.Task[None]] = {}
        #: the semantic tokens last sent for each document, with their result id (the
        #: document's version): what a delta request's edit is from
        self.tokens: dict[str, tuple[str, list[int]]] = {}

    def refresh(self, uri: str) -> Document:
        text = self.workspace.get_text_document(uri)
        parses = self.parses.setdefault(uri, Parses())
        doc = Document(uri, to_fs_path(uri), text.source, text.version, parses)
        self.documents[uri] = doc
        if doc.result.program is not None:
            self.parsed[uri] = doc
        return doc

    def publish(self, uri: str, opened: bool = False) -> None:
        doc = self.document(uri)
        self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
            uri, doc.diagnostics(), version=doc.version))
        settle(opened)

    def last_parsed(self, doc: Document) -> Document | None:
        """``doc``, else the last version of it that could be parsed."""
        return doc if doc.result.program is not None else self.parsed.get(doc.uri)

    def later(self, uri: str) -> None:
        """Compile and publish once the text has been still for :data:`DEBOUNCE`: of a
        burst of changes only the last is compiled."""
        task = self.pending.pop(uri, None)
        if task is not None:
            task.cancel()

        async def run() -> None:
            await asyncio.sleep(DEBOUNCE)
            self.pending.pop(uri, None)
            guarded(lambda: self.publish(uri), None)

        self.pending[uri] = asyncio.get_running_loop().create_task(run())

    def document(self, uri: str) -> Document:
        doc = self.documents.get(uri)
        text = self.workspace.get_text_document(uri)
        if doc is None or doc.version != text.version or doc.source != text.source:
            doc = self.refresh(uri)
        return doc


def guarded(answer: Callable[[], R], fallback: R) -> R:
    """An answer, or ``fallback`` when computing it failed: a bad text must never stop the
    server. A refusal goes back to the editor as the request's error."""
    try:
        return answer()
    except features.Refused as refusal:
        raise JsonRpcException(str(refusal), lsp.LSPErrorCodes.RequestFailed) from None
    except Exception:  # a defect: logged to stderr (the editor's log), the server goes on
        log.exception("openprose language server: request failed")
        return fallback


server = ProseLanguageServer()


@server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: ProseLanguageServer, params: lsp.DidOpenTextDocumentParams) -> None:
    guarded(lambda: ls.publish(params.text_document.uri, opened=True), None)


@server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: ProseLanguageServer, params: lsp.DidChangeTextDocumentParams) -> None:
    ls.later(params.text_document.uri)


@server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: ProseLanguageServer, params: lsp.DidSaveTextDocumentParams) -> None:
    ls.later(params.text_document.uri)


@server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: ProseLanguageServer, params: lsp.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    task = ls.pending.pop(uri, None)
    if task is not None:
        task.cancel()
    for kept in (ls.documents, ls.parsed, ls.parses, ls.tokens):
        kept.pop(uri, None)
    ls.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri, []))


def _on(params: Any, answer: Callable[[Document], R], fallback: R) -> R:
    return guarded(lambda: answer(server.document(params.text_document.uri)), fallback)


@server.feature(lsp.TEXT_DOCUMENT_HOVER)
def hover(ls: ProseLanguageServer, params: lsp.HoverParams) -> lsp.Hover | None:
    return _on(params, lambda doc: features.hover(doc, params.position), None)


@server.feature(lsp.TEXT_DOCUMENT_DEFINITION)
def definition(ls: ProseLanguageServer, params: lsp.DefinitionParams) -> list[lsp.Location]:
    return _on(params, lambda doc: features.definition(doc, params.position), [])


@server.feature(lsp.TEXT_DOCUMENT_REFERENCES)
def references(ls: ProseLanguageServer, params: lsp.ReferenceParams) -> list[lsp.Location]:
    return _on(params, lambda doc: features.references(
        doc, params.position, params.context.include_declaration), [])


@server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_HIGHLIGHT)
def document_highlight(ls: ProseLanguageServer, params: lsp.DocumentHighlightParams
                       ) -> list[lsp.DocumentHighlight]:
    return _on(params, lambda doc: features.highlights(doc, params.position), [])


@server.feature(lsp.TEXT_DOCUMENT_COMPLETION,
                lsp.CompletionOptions(trigger_characters=[":", " ", "{", ","]))
def completion(ls: ProseLanguageServer, params: lsp.CompletionParams) -> lsp.CompletionList:
    def answer(doc: Document) -> lsp.CompletionList:
        return lsp.CompletionList(False, features.completion(
            doc, ls.last_parsed(doc), params.position))
    return _on(params, answer, lsp.CompletionList(False, []))


@server.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
def document_symbol(ls: ProseLanguageServer, params: lsp.DocumentSymbolParams
                    ) -> list[lsp.DocumentSymbol]:
    return _on(params, features.document_symbols, [])


@server.feature(lsp.TEXT_DOCUMENT_FOLDING_RANGE)
def folding_range(ls: ProseLanguageServer, params: lsp.FoldingRangeParams
                  ) -> list[lsp.FoldingRange]:
    return _on(params, features.folding_ranges, [])


@server.feature(lsp.TEXT_DOCUMENT_FORMATTING)
def formatting(ls: ProseLanguageServer, params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit]:
    return _on(params, features.formatting, [])


def _tokens(ls: ProseLanguageServer, doc: Document) -> lsp.SemanticTokens:
    """``doc``'s semantic tokens, kept as the last sent (their result id: its version)."""
    tokens = features.semantic_tokens(doc)
    tokens.result_id = str(doc.version)
    ls.tokens[doc.uri] = (tokens.result_id, tokens.data)
    return tokens


@server.feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, features.LEGEND)
def semantic_tokens(ls: ProseLanguageServer, params: lsp.SemanticTokensParams) -> lsp.SemanticTokens:
    return _on(params, lambda doc: _tokens(ls, doc), lsp.SemanticTokens(data=[]))


@server.feature(lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL_DELTA)
def semantic_tokens_delta(ls: ProseLanguageServer, params: lsp.SemanticTokensDeltaParams
                          ) -> lsp.SemanticTokens | lsp.SemanticTokensDelta:
    """The edit from the tokens last sent, when the client has those; else all of them."""
    def answer(doc: Document) -> lsp.SemanticTokens | lsp.SemanticTokensDelta:
        result_id, before = ls.tokens.get(doc.uri, ("", []))
        tokens = _tokens(ls, doc)
        if result_id != params.previous_result_id:
            return tokens
        return lsp.SemanticTokensDelta([features.tokens_edit(before, tokens.data)],
                                       tokens.result_id)
    return _on(params, answer, lsp.SemanticTokens(data=[]))


def main() -> None:
    """Serve over stdin/stdout until the client says exit."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    server.start_io()
