"""``prose ui`` over plain HTTP on every backend: the token gate, the headers, the pages of a
failed run with hostile values (escaped), a binding's whole value, and the events stream."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from tests.cli.conftest import run_id_of
from tests.cli.ui_runs import FAILING, HOSTILE

from openprose.state import open_store
from openprose.state.view import BLOCK, load_view, run_summary
from openprose.ui import create_app

TOKEN = "t0ken-for-tests"
BASE = "http://127.0.0.1:8765"


@pytest.fixture
def served(project) -> Iterator[tuple[TestClient, str]]:
    result = project.run(FAILING, HOSTILE)  # in this process: quicker than run_failing's
    assert result.exit_code == 1, result.output
    run_id = run_id_of(result)
    store = open_store(project.root, project.backend)
    try:
        yield TestClient(create_app([store], TOKEN, 8765), base_url=BASE), run_id
    finally:
        store.close()


def test_the_token_is_required(tmp_path: Path) -> None:
    """The gate is the same whatever the backend: checked once, on an empty project."""
    with open_store(tmp_path, "filesystem") as store:
        client = TestClient(create_app([store], TOKEN, 8765), base_url=BASE)
        assert client.get("/").status_code == 401
        assert client.get("/runs/20260101-000000-abcdef").status_code == 401
        assert client.get("/?token=wrong").status_code == 401
        assert client.get("/static/ui.js").status_code == 401
        entered = client.get("/?token=" + TOKEN, follow_redirects=False)
        assert entered.status_code == 303 and entered.headers["location"] == "/"
        cookie = entered.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        page = client.get("/")
        assert page.status_code == 200 and "No runs yet" in page.text
        for name, value in {"content-security-policy": "script-src 'self'",
                            "x-content-type-options": "nosniff",
                            "x-frame-options": "DENY"}.items():
            assert value in page.headers[name]
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        # another host name (DNS rebinding) and writing requests are refused, token or not
        assert client.get("/", headers={"host": "attacker.example:8765"}).status_code == 400
        assert client.post("/").status_code == 405
        away = client.get(BASE + "//elsewhere.example/?token=" + TOKEN, follow_redirects=False)
        assert away.headers["location"] == "/elsewhere.example/"
        script = client.get("/static/ui.js")
        assert script.headers["content-type"].startswith("text/javascript")
        # a page is never kept; the static files, named by their content, are
        assert page.headers["cache-control"] == "no-store"
        assert "immutable" in script.headers["cache-control"]
        assert re.search(r'<script src="/static/ui\.js\?v=[0-9a-f]{12}" defer>', page.text)
    assert not (tmp_path / ".prose" / "runs").exists()  # the view wrote nothing


def test_a_failed_runs_pages(served) -> None:
    client, run_id = served
    client.get("/?token=" + TOKEN)
    listing = client.get("/?status=failed").text
    assert f'href="/runs/{run_id}"' in listing and "p.prose" in listing
    assert run_id not in client.get("/?status=completed").text
    page = client.get(f"/runs/{run_id}").text
    assert 'id="L3" class="line st-failed"' in page
    assert 'id="L1" class="line st-done"' in page
    assert "failed at <a href=\"#L3\">line 3</a>" in page
    # a line with nothing to mark is no element of its own: unmarked lines make one block
    assert ('<div class="plain"><span class="ln">4</span><code>  context: { notes, link }'
            '</code></div>') in page
    assert "boom &lt;b&gt;bold&lt;/b&gt;" in page
    assert "<script>window" not in page and "&lt;script&gt;window.pwned = 1" in page
    assert '<svg class="timeline"' in page
    # one count of sessions: the header's and the table's (two completed, one failed)
    assert 'id="session-counts">2 sessions completed · 1 failed ·' in page
    assert 'id="session-table-counts">(2 completed, 1 failed)' in page
    assert (page.count('<tr class="st-complete">'), page.count('<tr class="st-failed">')) \
        == (2, 1)
    assert "1 tool call(s) refused" in page
    assert ('<strong>REFUSED</strong> bash <code>curl https://example.com/&lt;img src=x '
            'onerror=alert(1)&gt;</code>') in page
    value = client.get(f"/runs/{run_id}/bindings/link").text
    assert "&lt;a href=&#34;javascript:window.pwned = 3&#34;&gt;click&lt;/a&gt;" in value
    assert client.get(f"/runs/{run_id}/bindings/nothing").status_code == 404
    assert client.get("/runs/no-such-run").status_code == 404
    events = client.get(f"/runs/{run_id}/events")
    assert events.headers["content-type"].startswith("text/event-stream")
    assert "event: change\ndata: failed" in events.text and "event: end" in events.text


def test_a_run_stopped_by_its_budget(project) -> None:
    result = project.run('let a = session "one"\nlet b = session "two"\n'
                         'let c = session "three"\n', "default_output: some words of output\n",
                         "--max-tokens", "8")
    assert result.exit_code == 4, result.output
    run_id = run_id_of(result)
    with open_store(project.root, project.backend) as store:
        client = TestClient(create_app([store], TOKEN, 8765), base_url=BASE)
        page = client.get(f"/runs/{run_id}?token={TOKEN}").text
    assert "of 8 tokens" in page.split('id="budget">')[1].split("<")[0]
    assert 'id="over-budget">Stopped over budget: budget reached' in page
    assert 'id="L3" class="line st-pending"' in page  # a higher budget may still get there


def test_a_busy_line_is_a_density_strip(project) -> None:
    """A statement run more than BARS_PER_ROW times is drawn as a few paths (one a state),
    not an element a session or a column; a line with few sessions keeps a bar each."""
    result = project.run('repeat 70:\n  session "Step"\noutput done = session "Wrap up"\n',
                         "default_output: ok\n")
    assert result.exit_code == 0, result.output
    with open_store(project.root, project.backend) as store:
        client = TestClient(create_app([store], TOKEN, 8765), base_url=BASE)
        page = client.get(f"/runs/{run_id_of(result)}?token={TOKEN}").text
    timeline = page.split('<svg class="timeline"')[1].split("</svg>")[0]
    assert "×70" in timeline and timeline.count('<path d="M') == 1
    assert "each column the sessions started then" in timeline
    assert timeline.count("<rect ") == 1  # line 3's one session


def test_an_ended_runs_digest_reads_as_its_journal(served, project) -> None:
    """The digest a run writes as it ends gives the view its journal gives (steps, usage,
    bindings, tool calls); without it (a run older than digests, or one damaged) the page
    reads the journal and shows the same."""
    client, run_id = served
    digest = project.root / ".prose" / "runs" / run_id / "digest.json"
    assert digest.is_file() and "window.pwned" not in digest.read_text()  # no values
    with open_store(project.root, project.backend) as store:
        quick, full = load_view(store, run_id, values=False), load_view(store, run_id)
    for view in (quick, full):
        for step in view.steps:
            step.enclosing = ()
    assert [s.to_dict() for s in quick.steps] == [s.to_dict() for s in full.steps]
    assert quick.usage == full.usage and quick.usage.sessions == 2
    # the lines of the program's sessions come with the digest: the page compiles nothing
    assert (quick.session_lines, full.session_lines) == ([1, 2, 3], None)
    assert [(b.ref, b.kind, b.location) for b in quick.bindings] == \
        [(b.ref, b.kind, b.location) for b in full.bindings]
    assert [(e.key, e.status, e.meta) for e in quick.tools] == \
        [(e.key, e.status, e.meta) for e in full.tools]
    # what the page shows of the steps, summed up as the run ended, is what its journal gives
    assert quick.summary == run_summary(full)
    client.get("/?token=" + TOKEN)
    page = client.get(f"/runs/{run_id}").text
    # a run an older version ended has a digest of the older layout (one object of every
    # step, binding and tool call): read whole, summed up as the page is made, the same page
    head, *lines = digest.read_text().splitlines()
    found, rows = json.loads(head), [json.loads(line) for line in lines]
    steps, bindings = rows[:found["rows"]["steps"]], rows[found["rows"]["steps"]:][
        :found["rows"]["bindings"]]
    digest.write_text(json.dumps({
        **{key: found[key] for key in ("backend", "status", "error", "usage", "agents",
                                       "frames", "notes", "session_lines")},
        "version": 1, "steps": [row[:15] for row in steps], "bindings": bindings,
        "tools": [[row[0], status, meta] for row in steps for status, meta in row[15]]}))
    with open_store(project.root, project.backend) as store:
        older = load_view(store, run_id, values=False)
    assert older.session_lines == [1, 2, 3] and older.summary is None  # the digest's
    assert run_summary(older) == quick.summary

    def seen_afresh() -> str:
        with open_store(project.root, project.backend) as store:  # a new view: nothing kept
            again = TestClient(create_app([store], TOKEN, 8765), base_url=BASE)
            return _body(again.get(f"/runs/{run_id}?token={TOKEN}").text)

    assert seen_afresh() == _body(page)
    digest.write_text("{")  # damaged: the journal is read, and shows the same
    assert seen_afresh() == _body(page)
    digest.unlink()  # none (a run older than digests): the same
    assert seen_afresh() == _body(page)


def test_a_first_look_reads_the_digests_head_and_one_block(project, monkeypatch) -> None:
    """A big ended run's page reads its digest's head and the block of rows of the sessions
    page shown (and of the bindings page), never the whole digest; a later page reads its
    own block only."""
    result = project.run(f'repeat {3 * BLOCK}:\n  session "Step"\n', "default_output: ok\n")
    assert result.exit_code == 0, result.output
    run_id = run_id_of(result)
    with open_store(project.root, project.backend) as store:
        reads: list[tuple[int, int | None]] = []
        read = store.backend.read_digest

        def counted(run: str, start: int = 0, end: int | None = None) -> bytes | None:
            reads.append((start, end))
            return read(run, start, end)

        monkeypatch.setattr(store.backend, "read_digest", counted)
        client = TestClient(create_app([store], TOKEN, 8765), base_url=BASE)
        page = client.get(f"/runs/{run_id}?token={TOKEN}").text
        assert "sessions page 1 of 3" in page and page.count('<tr class="st-complete">') == BLOCK
        head, *rows = reads
        assert head[0] == 0 and len(rows) == 2  # a block of sessions, one of bindings
        assert all(end is not None and end - start < 40_000 for start, end in rows)
        reads.clear()
        later = client.get(f"/runs/{run_id}?spage=3").text  # the head is kept: one block
        assert "sessions page 3 of 3" in later and len(reads) == 2


def _body(page: str) -> str:
    """A run page without what changes between two readings (the run's age)."""
    return re.sub(r"ran [^·<]+", "ran", page)
