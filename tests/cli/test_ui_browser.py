"""``prose ui`` in a real browser (Debian's chromium driven by Playwright, never a downloaded
one): what a person sees of a failed run, a run going on in another process, the token, and
hostile values that must stay text. Screenshots go to $OPENPROSE_TEST_ARTIFACTS (default
tests/artifacts)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli.ui_runs import run_failing

playwright = pytest.importorskip("playwright.sync_api")
# what the page waits for comes from other processes (a resumed run starting on a busy
# machine): waits end on the element, the limit is only for a test that would hang
playwright.expect.set_options(timeout=120_000)
CHROMIUM = "/usr/bin/chromium"
PROSE = str(Path(sys.executable).with_name("prose"))
ARTIFACTS = Path(os.environ.get("OPENPROSE_TEST_ARTIFACTS")
                 or Path(__file__).resolve().parents[1] / "artifacts")
LIVE = """\
let research = session "Collect facts"
parallel:
  a = session "Analyze A"
  b = session "Analyze B"
output summary = session "Summarize"
  context: research
"""

pytestmark = [pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("CI"),
                                 reason="needs Debian's chromium (apt-get install chromium)"),
              pytest.mark.xdist_group("ui_browser")]  # one server and browser, one worker


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-project")


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[str]:
    """``prose ui`` on the project (its filesystem and SQLite runs); its address."""
    proc = subprocess.Popen([PROSE, "ui", "--project", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and "?token=" in url, proc.stderr.read()
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, server: str) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(server)  # sets the cookie
    yield page
    context.close()


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def test_the_token_is_required(browser, server: str) -> None:
    context = browser.new_context()
    try:
        response = context.new_page().goto(server.split("?")[0])
        assert response.status == 401
        assert "token" in response.text()
    finally:
        context.close()


def test_a_failed_run_shows_its_statement_line_and_error_and_runs_nothing(
        page, server: str, root: Path) -> None:
    expect = playwright.expect
    run_id = run_failing(root, "filesystem")
    messages: list[str] = []
    page.on("console", lambda message: messages.append(message.text))
    page.on("dialog", lambda dialog: messages.append("dialog " + dialog.message))
    page.goto(server.split("?")[0])
    expect(page.get_by_role("link", name=run_id)).to_be_visible()
    _shot(page, "ui-runs.png")
    page.get_by_role("link", name=run_id).click()
    expect(page.locator("#failed-statement")).to_have_text(
        'output report = session "Breaks here"')
    expect(page.locator("#run-error")).to_contain_text("line 3")
    expect(page.locator("#run-error")).to_contain_text("boom <b>bold</b>")
    expect(page.locator("#L3")).to_have_class(re.compile(r"\bst-failed\b"))
    expect(page.locator("#L3 .mark")).to_have_text("failed")
    expect(page.locator("tr.tool.refused")).to_contain_text("REFUSED bash curl")
    # the hostile values are shown as text: no element, no handler, no script ran
    expect(page.locator("table.bindings")).to_contain_text("<script>window.pwned = 1</script>")
    _shot(page, "ui-failed-run.png")
    page.get_by_role("link", name="link", exact=True).first.click()
    expect(page.locator("pre.value")).to_contain_text('<a href="javascript:window.pwned = 3">')
    _shot(page, "ui-binding.png")
    page.go_back()
    page.get_by_role("link", name="notes", exact=True).first.click()
    expect(page.locator("pre.value")).to_contain_text("onerror=")
    assert page.locator("img, a[href^='javascript:'], [onerror]").count() == 0
    assert page.evaluate("window.pwned") is None
    assert messages == []


def _drive(root: Path, backend: str, held: str | None, run_id: str | None
           ) -> subprocess.Popen:
    """``prose run`` (or resume) whose session matching ``held`` never answers."""
    name = f"{held or 'quick'}.yaml"
    rule = f"sessions:\n  - match: {held}\n    output: ok\n    latency: 3600\n" if held else ""
    (root / name).write_text(f"default_output: ok\n{rule}")
    head = ["run", "live.prose"] if run_id is None else ["resume", run_id]
    return subprocess.Popen([PROSE, *head, "--provider", "scripted", "--script", name,
                             "--state", backend], cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()


@pytest.mark.parametrize("backend", ["filesystem", "sqlite"])  # file events; polling
def test_a_running_runs_page_follows_it_without_a_reload(page, server: str, root: Path,
                                                         backend: str) -> None:
    expect = playwright.expect
    (root / "live.prose").write_text(LIVE)
    driver = _drive(root, backend, "Collect", None)
    try:
        run_id = driver.stderr.readline().split()[1]
        page.goto(f"{server.split('?')[0]}runs/{run_id}")
        expect(page.locator("#L1")).to_have_class(re.compile(r"\bst-running\b"))
        page.evaluate("window.sameDocument = true")  # a reload would lose it
        _kill(driver)
        driver = _drive(root, backend, "Summarize", run_id)  # runs lines 1-4, holds line 5
        expect(page.locator("#L5")).to_have_class(re.compile(r"\bst-running\b"))
        expect(page.locator("#L3")).to_have_class(re.compile(r"\bst-done\b"))
        _shot(page, f"ui-live-run-{backend}.png")
        _kill(driver)
        driver = _drive(root, backend, None, run_id)
        expect(page.locator("#run-status")).to_have_text("completed")
        expect(page.locator("#L5")).to_have_class(re.compile(r"\bst-done\b"))
        assert page.evaluate("window.sameDocument") is True
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.communicate()
