"""``prose lsp`` per change on a large file: ``python bench/lsp.py``.

Builds a program of about ``--mb`` megabytes (default 1) of distinct agents, blocks, bindings,
context and interpolations, opens it once, then:

0. in process, the open itself (compile and diagnostics, once) and what an editor asks next
   (semantic tokens, then the outline: the first of each, once);
1. in process, the work of one change as the server does it (compile, reusing what it kept of
   the earlier versions, and diagnostics), ``--runs`` changes of each kind in turn, each on
   the text the one before left: a line appended at the end, a line's text changed in the
   middle, a line inserted in the middle (every statement below it moves), a line deleted
   there, an agent renamed in the middle (a definition others read, back and forth);
2. in process, a request after a change (a line inserted or deleted in the middle, not timed):
   hover, document highlight, completion, semantic tokens;
3. over stdio: a real client (pygls) edits the open file ``--runs`` times and times each
   change until its diagnostics arrive, less the server's debounce.

Each kind reports its first change (nothing of that kind kept yet), median and max, and in
process the median CPU time too (the work itself, however busy a shared machine is).
``--kinds`` picks kinds by a word of their names. Target: <= 200 ms per change. Prints the
numbers; makes no assertions about them.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from openprose.language.parser import Parses
from openprose.lsp import features
from openprose.lsp.document import Document, settle
from openprose.lsp.server import DEBOUNCE

UNIT = '''agent a{i}:
  model: sonnet
  prompt: "You review part {i}"

block b{i}(topic, depth):
  let found{i} = session: a{i}
    prompt: "Look into {{topic}} at depth {{depth}}"
  output found{i}

let x{i} = session "Gather the facts for part {i}"
let y{i} = do b{i}(x{i}, 2)
if **part {i} needs more work**:
  session "Rework {{y{i}}}"
    context: [x{i}, y{i}]
'''
URI = "file:///bench.prose"


def program(megabytes: float) -> str:
    parts, size, i = [], 0, 0
    while size < megabytes * 1024 * 1024:
        parts.append(UNIT.format(i=i))
        size += len(parts[-1])
        i += 1
    return "\n".join(parts)


def middle(text: str) -> int:
    """Where the unit nearest the middle of ``text`` starts."""
    return text.index("\nagent", len(text) // 2) + 1


def append(text: str, k: int) -> str:
    return f'{text}session "appended {k}"\n'


def inline(text: str, k: int) -> str:
    at = text.index('prompt: "', middle(text))
    return f'{text[:at]}prompt: "You review this, take {k}"{text[text.index(chr(10), at):]}'


def insert(text: str, k: int) -> str:
    at = middle(text)
    return f'{text[:at]}session "inserted {k}"\n{text[at:]}'


def delete(text: str, k: int) -> str:
    """The line before the middle unit (a line ``insert`` added, else a blank one)."""
    at = middle(text) - 1
    start = text.rindex("\n", 0, at) + 1
    return text[:start] + text[at + 1:]


def rename(text: str, k: int) -> str:
    at = middle(text)
    end = text.index(":", at)
    name = text[at + len("agent "):end]
    other = name[:-len("_renamed")] if name.endswith("_renamed") else name + "_renamed"
    return f"{text[:at]}agent {other}{text[end:]}"


EDITS: dict[str, Callable[[str, int], str]] = {
    "a line appended at the end": append, "a line's text changed in the middle": inline,
    "a line inserted in the middle": insert, "a line deleted in the middle": delete,
    "an agent renamed in the middle (a definition others read)": rename}


def place(doc: Document, pattern: str) -> lsp.Position:
    """Where ``pattern`` first occurs in the middle unit of ``doc``, plus one character."""
    at = doc.source.index(pattern, middle(doc.source))
    line = doc.source.count("\n", 0, at)
    return lsp.Position(line, at - doc.source.rindex("\n", 0, at) - 1 + 1)


REQUESTS: dict[str, Callable[[Document], object]] = {
    "hover on an agent's name": lambda doc: features.hover(doc, place(doc, "session: a")),
    "document highlight of a binding": lambda doc: features.highlights(
        doc, place(doc, "context: [x")),
    "completion in context: [...]": lambda doc: features.completion(
        doc, doc, place(doc, "context: [")),
    "semantic tokens": features.semantic_tokens,
}


#: what an editor asks right after opening a file, in turn
AFTER_OPEN: dict[str, Callable[[Document], object]] = {
    "first semantic tokens after the open": features.semantic_tokens,
    "first outline after them": features.document_symbols,
}


def timed(work: Callable[[], object]) -> tuple[float, float]:
    """Seconds ``work`` took, on the clock and of CPU."""
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


def change(text: str, version: int, parses: Parses) -> None:
    """One change as the server makes it: compiled, its diagnostics converted."""
    Document(URI, None, text, version, parses).diagnostics()


def in_process(text: str, runs: int, kinds: list[str]
               ) -> dict[str, list[tuple[float, float]]]:
    parses = Parses()
    opened: list[Document] = []

    def open_file() -> None:
        opened.append(Document(URI, None, text, 0, parses))
        opened[0].diagnostics()
        settle(opened=True)

    times = {"opening the file (compile and diagnostics)": [timed(open_file)]}
    for what, request in AFTER_OPEN.items():
        if any(kind in what for kind in kinds):
            times[what] = [timed(functools.partial(request, opened[0]))]
            settle()
    version = 0
    for what, edit in EDITS.items():
        if not any(kind in what for kind in kinds):
            continue
        times[what] = []
        for k in range(runs):
            text, version = edit(text, k), version + 1
            times[what].append(timed(functools.partial(change, text, version, parses)))
            settle()  # as the server does once it has answered
    for what, request in REQUESTS.items():
        if not any(kind in what for kind in kinds):
            continue
        times[what] = []
        for k in range(runs):
            text, version = (insert if k % 2 == 0 else delete)(text, k), version + 1
            doc = Document(URI, None, text, version, parses)
            doc.diagnostics()
            settle()
            times[what].append(timed(functools.partial(request, doc)))
    return times


async def over_stdio(text: str, runs: int) -> list[float]:
    client = LanguageClient("bench", "1")
    arrived: dict[int, asyncio.Future[None]] = {}

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def published(ls: LanguageClient, params: lsp.PublishDiagnosticsParams) -> None:
        waiter = arrived.get(params.version or 0)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    await client.start_io(sys.executable, "-c", "from openprose.cli import main; main()", "lsp")
    await client.initialize_async(lsp.InitializeParams(capabilities=lsp.ClientCapabilities()))
    client.initialized(lsp.InitializedParams())
    with tempfile.TemporaryDirectory() as tmp:
        uri = (Path(tmp) / "big.prose").as_uri()
        loop = asyncio.get_running_loop()
        arrived[1] = loop.create_future()
        client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            lsp.TextDocumentItem(uri, "prose", 1, text)))
        await arrived[1]
        times = []
        lines = text.count("\n")
        for version in range(2, runs + 2):
            arrived[version] = loop.create_future()
            start = time.perf_counter()
            client.text_document_did_change(lsp.DidChangeTextDocumentParams(
                lsp.VersionedTextDocumentIdentifier(version, uri),
                [lsp.TextDocumentContentChangePartial(
                    lsp.Range(lsp.Position(lines, 0), lsp.Position(lines, 0)),
                    f'session "edit {version}"\n')]))
            await arrived[version]
            times.append(time.perf_counter() - start - DEBOUNCE)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return times


def report(what: str, times: list[float], cpu: list[float] | None = None) -> None:
    ms = [t * 1000 for t in times]
    if len(ms) == 1:
        print(f"{what}: {ms[0]:.0f} ms" + (f", CPU {cpu[0] * 1000:.0f} ms" if cpu else ""))
        return
    used = f", CPU median {statistics.median(cpu) * 1000:.0f} ms" if cpu else ""
    print(f"{what}: first {ms[0]:.0f} ms, median {statistics.median(ms):.0f} ms, "
          f"max {max(ms):.0f} ms over {len(ms)}{used}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kinds", default="", help="comma-separated words (e.g. "
                        "'inserted,hover,stdio'); default: every kind")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",")] if args.kinds else [""]
    text = program(args.mb)
    print(f"program: {len(text) / 1024 / 1024:.2f} MB, {text.count(chr(10))} lines; "
          "target <= 200 ms per change")
    for what, times in in_process(text, args.runs, kinds).items():
        report(f"in process, {what}", [wall for wall, _ in times], [cpu for _, cpu in times])
    stdio = "over stdio, a line appended (change to diagnostics, debounce excluded)"
    if any(kind in stdio for kind in kinds):
        report(stdio, asyncio.run(over_stdio(text, args.runs)))


if __name__ == "__main__":
    main()
