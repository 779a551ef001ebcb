"""Where `prose run` takes a program from: a file, stdin (`-`), a URL, or `handle/slug`
(fetched, then cached by content hash under .prose/cache/imports, as `use` imports are)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

PROSE = str(Path(sys.executable).with_name("prose"))
MAIN = ('use "helper.prose" as helper\n'
        'output a = helper(topic: "tides").findings\n')
HELPER = 'input topic: "t"\noutput findings = session "Find {topic}"\n'
SCRIPT = 'sessions:\n  - match: "Find (\\\\w+)"\n    output: "found \\\\1"\n'


class Programs:
    """A local HTTP server holding programs by path; counts the requests for each."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files, self.hits = files, {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.hits[self.path] = outer.hits.get(self.path, 0) + 1
                body = outer.files.get(self.path)
                data = (body or "not found").encode()
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def programs():
    server = Programs({"/pkg/main.prose": MAIN, "/pkg/helper.prose": HELPER,
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
