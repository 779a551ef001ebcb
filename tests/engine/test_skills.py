"""Skills: a local folder or a github: source with a SKILL.md is offered to the sessions of
the agents that list it (name and description up front, its files readable on demand); one
that cannot be resolved is a warning at the start of the run, naming it."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.engine.test_anthropic import MessagesServer, _message

from openprose.engine import runner
from openprose.engine.anthropic_provider import AnthropicProvider
from openprose.engine.interpreter import Options
from openprose.engine.permissions import Policy
from openprose.engine.skills import GITHUB_ARCHIVE, resolve_skills
from openprose.engine.work_tools import WorkSetup
from openprose.language import compile_or_raise
from openprose.state import open_store

PROSE = str(Path(sys.executable).with_name("prose"))
SKILL = "---\nname: tidy\ndescription: Tidy a text file; keep its meaning.\n---\n# Tidy\nSteps.\n"


def _program(source: str) -> str:
    return (f'import "tidy" from "{source}"\n'
            'agent editor:\n  prompt: "You edit."\n  skills: ["tidy"]\n'
            'output r = session: editor\n  prompt: "Tidy notes.md"\n')


def test_a_local_skill_is_offered_and_its_files_are_readable(tmp_path):
    (tmp_path / "skills" / "tidy").mkdir(parents=True)
    (tmp_path / "skills" / "tidy" / "SKILL.md").write_text(SKILL)
    (tmp_path / "p.prose").write_text(_program("./skills"))
    source = (tmp_path / "p.prose").read_text()
    program = compile_or_raise(source, str(tmp_path / "p.prose"))
    skills, warnings = resolve_skills(program, str(tmp_path / "p.prose"), tmp_path, {})
    assert warnings == [] and skills["tidy"].description == \
        "Tidy a text file; keep its meaning."
    srv = MessagesServer([
        (200, {}, _message([{"type": "tool_use", "id": "t1", "name": "read",
                             "input": {"file_path": "skills/tidy/SKILL.md"}}], "tool_use")),
        (200, {}, _message([{"type": "text", "text": "tidied"}], "end_turn"))])
    try:
        setup = WorkSetup(Policy(tmp_path), skills=skills)
        job = runner.Job(source=source, file=str(tmp_path / "p.prose"), program=program,
                         project_root=tmp_path, options=Options(work=setup))
        outcome = asyncio.run(runner.execute(job, AnthropicProvider(api_key="k",
                                                                    base_url=srv.url)))
    finally:
        srv.close()
    assert outcome.status == "completed"
    system = srv.requests[0]["body"]["system"][0]["text"]
    assert "- tidy: Tidy a text file; keep its meaning. (skills/tidy/SKILL.md)" in system
    result = srv.requests[1]["body"]["messages"][-1]["content"][0]
    assert result["content"] == SKILL and not result["is_error"]
    with open_store(tmp_path, "filesystem") as store:
        web, call = store.open_run(outcome.run_id).tool_calls()
    assert (web.meta["tool"], web.status, web.meta["rule"]) == ("web", "refused",
                                                                "network: prompt")
    assert call.meta["allowed"] and call.meta["rule"] == "skill 'tidy'"


class Archives:
    """A local stand-in for GitHub's archive downloads; counts the requests."""

    def __init__(self, files: dict[str, str], links: dict[str, str] | None = None) -> None:
        """``files`` under the archive's top folder; ``links``: member name -> symlink target
        (names as given, so a test can put ``..`` or absolute names in)."""
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w:gz") as archive:
            for name, text in files.items():
                raw = text.encode()
                info = tarfile.TarInfo(name if name.startswith(("/", "..")) else
                                       f"repo-abc123/{name}")
                info.size = len(raw)
                archive.addfile(info, io.BytesIO(raw))
            for name, target in (links or {}).items():
                info = tarfile.TarInfo(name)
                info.type, info.linkname = tarfile.SYMTYPE, target
                archive.addfile(info)
        self.body, self.paths = data.getvalue(), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


def test_a_github_skill_is_fetched_once_and_cached_and_readable(tmp_path):
    archives = Archives({"skills/tidy/SKILL.md": SKILL, "skills/tidy/rules.md": "rules"})
    try:
        program = compile_or_raise(_program("github:acme/toolbox"), "p.prose")
        env = {GITHUB_ARCHIVE: archives.url}
        skills, warnings = resolve_skills(program, None, tmp_path, env)
        again, _ = resolve_skills(program, None, tmp_path, env)
    finally:
        archives.httpd.shutdown()
    assert warnings == [] and archives.paths == ["/acme/toolbox/tar.gz/HEAD"]
    assert again["tidy"].folder == skills["tidy"].folder
    folder = skills["tidy"].folder
    assert folder.is_relative_to(tmp_path / ".prose" / "cache" / "skills")
    gate = Policy(tmp_path).gate("editor", None, skills={"tidy": folder})
    assert gate.path(str(folder / "rules.md"), write=False)[0].rule == "skill 'tidy'"
    assert not gate.path(str(folder / "rules.md"), write=True)[0].allowed


def test_a_hostile_skill_archive_unpacks_nothing_outside_its_folder(tmp_path):
    """Absolute names, ``..`` and links in a fetched archive are left out, on every Python
    3.11 release (tarfile's "data" filter came in 3.11.4)."""
    project = tmp_path / "project"
    project.mkdir()
    archives = Archives({"skills/tidy/SKILL.md": SKILL, "../escaped.txt": "x",
                         str(tmp_path / "absolute.txt"): "x"},
                        links={"repo-abc123/skills/tidy/home": str(tmp_path)})
    try:
        program = compile_or_raise(_program("github:acme/toolbox"), "p.prose")
        skills, warnings = resolve_skills(program, None, project, {GITHUB_ARCHIVE: archives.url})
    finally:
        archives.httpd.shutdown()
    assert warnings == []
    folder = skills["tidy"].folder
    assert (folder / "SKILL.md").read_text() == SKILL
    assert not (folder / "home").exists() and not (folder / "home").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project"]
    assert not any(p.name == "escaped.txt" for p in project.rglob("*"))


def test_an_unresolvable_skill_is_a_warning_at_the_start(tmp_path):
    (tmp_path / "p.prose").write_text(_program("./nowhere") + "")
    (tmp_path / "s.yaml").write_text("default_output: done\n")
    done = subprocess.run([PROSE, "run", "p.prose", "--provider", "scripted", "--script",
                           "s.yaml"], cwd=tmp_path, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("warning: skill 'tidy' from \"./nowhere\" is unavailable (no "
                            "SKILL.md in ")
    assert first.endswith("its sessions run without it")


def test_a_project_that_is_a_skill_keeps_its_state_closed(tmp_path):
    """A repository with SKILL.md at its top is a skill whose folder holds .prose/: the skill
    rule let its sessions read .prose/.env (the API key) and every run's records."""
    (tmp_path / "SKILL.md").write_text(SKILL)
    (tmp_path / ".prose").mkdir()
    (tmp_path / ".prose" / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-secret-1\n")
    program = compile_or_raise(_program("./"), str(tmp_path / "p.prose"))
    (tmp_path / "p.prose").write_text(_program("./"))
    skills, warnings = resolve_skills(program, str(tmp_path / "p.prose"), tmp_path, {})
    assert warnings == [] and skills["tidy"].folder == tmp_path.resolve()
    gate = Policy(tmp_path).gate("editor", None, skills={"tidy": skills["tidy"].folder})
    decision = gate.path(".prose/.env", write=False)[0]
    assert not decision.allowed and ".prose/ is never readable" in decision.rule
    assert gate.path("SKILL.md", write=False)[0].rule == "skill 'tidy'"


def test_two_runs_fetching_one_skill_at_once_both_get_it(tmp_path):
    """Two runs of one project fetch the same github: skill for the first time together:
    the one that unpacks second found the cache folder already there, and os.replace onto
    it raised OSError out of resolve_skills (a traceback, the run never started). The second
    download is answered only after the first run has cached the skill, so the race is
    the same on any machine."""
    program = compile_or_raise(_program("github:acme/toolbox"), "p.prose")
    archives = Archives({"skills/tidy/SKILL.md": SKILL})
    env = {GITHUB_ARCHIVE: archives.url}
    other: list[object] = []
    serve = archives.httpd.RequestHandlerClass.do_GET

    def first_waits_for_the_other_run(handler: BaseHTTPRequestHandler) -> None:
        if len(archives.paths) == 0:  # the first download: the other run fetches meanwhile
            archives.paths.append("(held)")
            other.append(resolve_skills(program, None, tmp_path, env))
        serve(handler)

    archives.httpd.RequestHandlerClass.do_GET = first_waits_for_the_other_run
    try:
        skills, warnings = resolve_skills(program, None, tmp_path, env)
    finally:
        archives.httpd.shutdown()
    assert warnings == [] and other[0][1] == []
    assert skills["tidy"].folder == other[0][0]["tidy"].folder
    assert (skills["tidy"].folder / "SKILL.md").read_text() == SKILL
    assert [p.name for p in (tmp_path / ".prose" / "cache" / "skills").iterdir()
            if p.name.endswith(".part")] == []
