"""The README's test command and scripts/pg-up, as a user runs them from a fresh shell."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
HAS_PG = bool(list(Path("/usr/lib/postgresql").glob("*/bin/initdb")))
# one worker starts these clusters one after another: two pg-up never race for a free port
pytestmark = pytest.mark.xdist_group("pg_up")


def _fresh_env(**extra: str) -> dict[str, str]:
    """What a new login shell has: no activated venv, no project variables."""
    return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8", **extra}


def _test_command() -> str:
    section = README.split("Run the tests", 1)[1]
    return re.search(r"```bash\n(.+?)\n```", section, re.S).group(1).strip()


def test_readme_test_command_works_in_a_fresh_shell():
    command = _test_command()
    if not (ROOT / ".venv").is_dir():
        pytest.skip("no .venv beside the checkout (the quickstart was not run here)")
    # The printed command, narrowed to one small file so the suite does not run itself.
    probe = subprocess.run(["bash", "-c", f"{command} -q tests/language/test_parser.py"],
                           cwd=ROOT, env=_fresh_env(), capture_output=True, text=True,
                           timeout=300)
    assert probe.returncode == 0, probe.stdout[-2000:] + probe.stderr[-2000:]
    assert " passed" in probe.stdout


def test_readme_says_the_corpus_tests_use_shared():
    around = README.split("Run the tests", 1)[1][:1500]
    assert "../shared" in around


@pytest.fixture
def pg_dir():
    path = Path(tempfile.mkdtemp(prefix="pg-up-"))
    path.chmod(0o755)  # the server runs as 'postgres' when we are root
    yield path / "cluster"
    subprocess.run([ROOT / "scripts" / "pg-down"], env=_fresh_env(OPENPROSE_PG_DIR=str(
        path / "cluster")), capture_output=True, timeout=60)
    shutil.rmtree(path, ignore_errors=True)


def _pg_up(directory: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ROOT / "scripts" / "pg-up"],
                          env=_fresh_env(OPENPROSE_PG_DIR=str(directory), **extra),
                          capture_output=True, text=True, timeout=120)


def _pg_up_bare(directory: Path) -> subprocess.CompletedProcess[str]:
    """pg-up as `env -i` runs it (a container, CI): a PATH without sbin, and no locale."""
    return subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"OPENPROSE_PG_DIR={directory}",
                           ROOT / "scripts" / "pg-up"], capture_output=True, text=True,
                          timeout=120)


def test_pg_up_never_touches_a_directory_it_did_not_create(pg_dir):
    pg_dir.mkdir()
    (pg_dir / "precious").write_text("keep me")
    refused = _pg_up(pg_dir)
    assert refused.returncode != 0
    assert "not created by scripts/pg-up" in refused.stderr and str(pg_dir) in refused.stderr
    assert (pg_dir / "precious").read_text() == "keep me"
    assert sorted(p.name for p in pg_dir.iterdir()) == ["precious"]


@pytest.mark.skipif(not HAS_PG, reason="PostgreSQL server binaries not installed")
def test_pg_up_makes_a_utf8_cluster_on_a_free_port_of_its_own_and_reuses_it(pg_dir):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    try:
        first = _pg_up_bare(pg_dir)
        assert first.returncode == 0, first.stderr
        port = int(re.search(r"127\.0\.0\.1:(\d+)/", first.stdout).group(1))
        assert port != busy
        # UTF-8 although no locale was set (initdb would have made SQL_ASCII)
        import psycopg

        url = first.stdout.strip().partition("=")[2]
        with psycopg.connect(url) as conn:
            assert conn.info.parameter_status("server_encoding") == "UTF8"
            assert {row[0] for row in conn.execute(
                "SELECT pg_encoding_to_char(encoding) FROM pg_database")} == {"UTF8"}
        (pg_dir / "data" / "marker-of-this-cluster").write_text("x")
        again = _pg_up(pg_dir)  # a second pg-up reuses, never re-creates
        assert again.returncode == 0 and again.stdout == first.stdout
        assert (pg_dir / "data" / "marker-of-this-cluster").exists()
        # a SQL_ASCII test database, as an older pg-up made without a locale, is made anew
        with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
            conn.execute("DROP DATABASE openprose_test")
            conn.execute("CREATE DATABASE openprose_test ENCODING 'SQL_ASCII' LC_COLLATE 'C'"
                         " LC_CTYPE 'C' TEMPLATE template0")
        assert _pg_up_bare(pg_dir).stdout == first.stdout
        with psycopg.connect(url) as conn:
            assert conn.info.parameter_status("server_encoding") == "UTF8"
        # pg-down as .ci/run's exit trap runs it under `env -i`: it stops the cluster
        down = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"OPENPROSE_PG_DIR={pg_dir}",
                               ROOT / "scripts" / "pg-down"], capture_output=True, text=True,
                              timeout=120)
        assert down.returncode == 0, down.stderr
        assert not (pg_dir / "data" / "postmaster.pid").exists()
    finally:
        taken.close()


def test_pg_up_documents_its_overrides():
    text = (ROOT / "scripts" / "pg-up").read_text() + README
    for name in ("OPENPROSE_PG_DIR", "OPENPROSE_PG_PORT"):
        assert name in README and name in text


def _python_of(version: str, path_dir: Path, pyenv_root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ROOT / "scripts" / "python-of", version], capture_output=True,
                          text=True, timeout=60,
                          env={"PATH": f"{path_dir}:/usr/bin:/bin", "HOME": str(pyenv_root.parent),
                               "PYENV_ROOT": str(pyenv_root)})


def test_python_of_skips_a_pyenv_shim_for_a_version_not_selected(tmp_path):
    """CI's machine has pyenv's shims on PATH: `python3.13` is there but exits 127 when 3.13
    is installed and not selected. The installed interpreter is taken instead."""
    import sys
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    shims = tmp_path / "shims"
    shims.mkdir()
    shim = shims / f"python{version}"
    shim.write_text(f"#!/bin/sh\necho 'pyenv: python{version}: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    installed = tmp_path / "pyenv" / "versions" / f"{version}.0" / "bin"
    installed.mkdir(parents=True)
    (installed / "python3").symlink_to(sys.executable)
    found = _python_of(version, shims, tmp_path / "pyenv")
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(installed / "python3")
    # with no working interpreter of that version: nothing printed, a failing status
    (installed / "python3").unlink()
    missing = _python_of(version, shims, tmp_path / "pyenv")
    assert missing.returncode != 0 and missing.stdout == ""


def test_ci_finds_interpreters_only_through_python_of():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/python-of \"$OLDEST\"" in ci and "scripts/python-of \"$NEWEST\"" in ci
    assert "command -v \"python" not in ci
