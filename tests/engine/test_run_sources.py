"""Where `prose run` takes a program from: a file, stdin (`-`), a URL, or `handle/slug`
(fetched, then cached by content hash under .prose/cache/imports, as `use` imports are)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.engine.program_server import ProgramServer

PROSE = str(Path(sys.executable).with_name("prose"))
MAIN = ('use "helper.prose" as helper\n'
        'output a = helper(topic: "tides").findings\n')
HELPER = 'input topic: "t"\noutput findings = session "Find {topic}"\n'
SCRIPT = 'sessions:\n  - match: "Find (\\\\w+)"\n    output: "found \\\\1"\n'




@pytest.fixture
def programs():
    server = ProgramServer({"/pkg/main.prose": MAIN, "/pkg/helper.prose": HELPER,
                       "/alice/tides": MAIN, "/alice/helper.prose": HELPER})
    yield server
    server.close()


def _prose(project: Path, *args: str, stdin: str | None = None, **env: str):
    (project / "s.yaml").write_text(SCRIPT)
    return subprocess.run([PROSE, *args, "--provider", "scripted", "--script", "s.yaml",
                           "--json"], cwd=project, input=stdin, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def _result(done) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_program_read_from_stdin(tmp_path):
    data = _result(_prose(tmp_path, "run", "-", stdin='output s = session "Find stdin"\n'))
    assert data["outputs"] == {"s": "found stdin"}
    program = tmp_path / ".prose" / "runs" / data["run_id"] / "program.prose"
    assert program.read_text() == 'output s = session "Find stdin"\n'


def test_a_program_by_url_is_fetched_once_and_cached_by_content_hash(tmp_path, programs):
    url = f"{programs.url}/pkg/main.prose"
    assert _result(_prose(tmp_path, "run", url))["outputs"] == {"a": "found tides"}
    assert programs.hits == {"/pkg/main.prose": 1, "/pkg/helper.prose": 1}
    cache = tmp_path / ".prose" / "cache" / "imports"
    digest = hashlib.sha256(MAIN.encode()).hexdigest()
    assert (cache / f"{digest}.prose").read_text() == MAIN
    assert json.loads((cache / "index.json").read_text())[url] == digest
    programs.close()  # the network is gone: the cached copies serve
    assert _result(_prose(tmp_path, "run", url))["outputs"] == {"a": "found tides"}


def test_registry_shorthand_resolves_through_the_registry(tmp_path, programs):
    done = _prose(tmp_path, "run", "alice/tides", OPENPROSE_REGISTRY=programs.url)
    assert _result(done)["outputs"] == {"a": "found tides"}
    assert programs.hits == {"/alice/tides": 1, "/alice/helper.prose": 1}


def test_a_program_that_cannot_be_fetched_is_one_line(tmp_path, programs):
    done = _prose(tmp_path, "run", f"{programs.url}/nothing.prose")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "cannot fetch" in done.stderr and "/nothing.prose" in done.stderr
