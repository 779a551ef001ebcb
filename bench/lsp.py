"""``prose lsp`` per change on a large file: ``python bench/lsp.py``.

Builds a program of about ``--mb`` megabytes (default 1) of distinct agents, blocks, bindings,
context and interpolations, then:

1. in process: the work of one change as the server does it (compile, reusing the parses of
   the unchanged statements, and diagnostics), best and median of ``--runs`` changes;
2. over stdio: a real client (pygls) edits the open file ``--runs`` times and times each
   change until its diagnostics arrive, less the server's debounce.

Target: <= 200 ms per change. Prints the numbers; makes no assertions about them.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

from openprose.language.parser import Parses
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


def program(megabytes: float) -> str:
    parts, size, i = [], 0, 0
    while size < megabytes * 1024 * 1024:
        parts.append(UNIT.format(i=i))
        size += len(parts[-1])
        i += 1
    return "\n".join(parts)


def in_process(text: str, runs: int, middle: bool) -> list[float]:
    """Each change adds a line at the end, or (``middle``) in the middle, which moves every
    statement below it."""
    parses = Parses()
    Document("file:///bench.prose", None, text, 0, parses).diagnostics()  # the file opened
    settle()
    half = text.index("\nagent", len(text) // 2) + 1
    times = []
    for k in range(runs):
        line = f'session "edit {k}"\n'
        edited = text[:half] + line + text[half:] if middle else text + "\n" + line
        start = time.perf_counter()
        Document("file:///bench.prose", None, edited, k + 1, parses).diagnostics()
        times.append(time.perf_counter() - start)
        settle()  # as the server does once it has answered
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


def report(what: str, times: list[float]) -> None:
    ms = [t * 1000 for t in times]
    print(f"{what}: best {min(ms):.0f} ms, median {statistics.median(ms):.0f} ms "
          f"over {len(ms)} changes (target <= 200 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    text = program(args.mb)
    print(f"program: {len(text) / 1024 / 1024:.2f} MB, {text.count(chr(10))} lines")
    report("in process, a line added at the end (compile + diagnostics)",
           in_process(text, args.runs, False))
    report("in process, a line added in the middle", in_process(text, args.runs, True))
    report("over stdio (change to diagnostics, debounce excluded)",
           asyncio.run(over_stdio(text, args.runs)))


if __name__ == "__main__":
    main()
