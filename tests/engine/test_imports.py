"""``use`` imports: resolution, local and HTTP programs, the cache, program calls."""

from __future__ import annotations

import asyncio

import pytest
from tests.engine.memjournal import MemJournal
from tests.engine.program_server import ProgramServer

from openprose.engine.errors import ImportFailed
from openprose.engine.imports import ImportLoader, resolve
from openprose.engine.interpreter import Interpreter
from openprose.engine.scripted import ScriptedProvider
from openprose.language import compile_or_raise

CHILD = 'input topic: "t"\noutput findings = session "Find {topic}"\noutput sources = "src"\n'


def test_resolution_rules(tmp_path):
    assert resolve("alice/research", None).where == "https://p.prose.md/alice/research"
    assert resolve("@alice/research", None).state_name == "alice--research"
    assert resolve("https://x.org/a/b.prose", None).state_name == "a--b"
    local = resolve("./lib/helper.prose", str(tmp_path / "main.prose"))
    assert (local.is_url, local.where) == (False, str(tmp_path / "lib" / "helper.prose"))
    nested = resolve("other.prose", "https://x.org/pkg/main.prose")
    assert nested.where == "https://x.org/pkg/other.prose"


def _run(tmp_path, main: str, main_file, loader=None):
    program = compile_or_raise(main, str(main_file))
    loader = loader or ImportLoader(tmp_path / "cache")
    imports = loader.load(program, str(main_file))
    provider = ScriptedProvider({"sessions": [{"match": r"Find (\w+)", "output": r"F:\1"}]})
    interp = Interpreter(program, main, MemJournal(), provider, file=str(main_file),
                         imports=imports)
    return asyncio.run(interp.run())


def test_local_import_call_member_and_destructure(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "research.prose").write_text(CHILD)
    main = ('use "./lib/research.prose" as research\nlet r = research(topic: "AI")\n'
            'let { findings, sources } = research(topic: "ML")\n'
            'output a = r.findings\noutput b = findings\noutput c = sources\n')
    out = _run(tmp_path, main, tmp_path / "main.prose")
    assert out == {"a": "F:AI", "b": "F:ML", "c": "src"}


def test_url_import_is_cached_by_content_hash(tmp_path):
    server = ProgramServer({"/alice/research.prose": CHILD})
    main = f'use "{server.url}/alice/research.prose" as research\noutput a = research(topic: "X").findings\n'
    assert _run(tmp_path, main, tmp_path / "main.prose") == {"a": "F:X"}
    server.close()
    assert _run(tmp_path, main, tmp_path / "main.prose") == {"a": "F:X"}  # from the cache
    assert len(list((tmp_path / "cache").glob("*.prose"))) == 1


def test_broken_import_names_the_program(tmp_path):
    (tmp_path / "bad.prose").write_text('session\n')
    with pytest.raises(ImportFailed, match=r"bad\.prose"):
        _run(tmp_path, 'use "./bad.prose" as bad\n', tmp_path / "main.prose")


def test_a_fetched_import_that_is_no_program_is_never_quoted_nor_kept(tmp_path):
    """`use "http://127.0.0.1:.../creds"` (or a cloud's metadata service) made the server
    fetch it and quote its first line in the refusal, to any client that can start a run:
    a fetched text that does not compile is named by its URL and first error's code and
    line only, and is not cached."""
    server = ProgramServer({"/creds": "AKIA-SECRET-LINE aws key\nmore\n"})
    try:
        main = f'use "{server.url}/creds" as c\noutput o = session "x"\n'
        with pytest.raises(ImportFailed) as failed:
            _run(tmp_path, main, tmp_path / "main.prose")
    finally:
        server.close()
    text = str(failed.value)
    assert f"{server.url}/creds is not a program" in text and "E004 at line 1" in text
    assert "AKIA" not in text and "aws" not in text
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())
