"""Start-up laziness: a database already at the head revision opens without
importing Alembic; the markdown renderer is imported on first use; the cheap
head revision read from the revision files agrees with Alembic's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import sqlalchemy as sa

from ongridd.store import open_store
from ongridd.store.engine import create_engine, normalize_url
from ongridd.store.migrate import MIGRATIONS_DIR, head_from_files, head_revision

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONGRID_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=60)


def test_head_from_files_matches_alembic():
    assert head_from_files() == head_revision()


def _versions(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_head_from_files_gives_up_on_what_it_cannot_read(tmp_path):
    a = 'revision = "a"\ndown_revision = None\n'
    assert head_from_files(_versions(tmp_path / "1", {"a.py": a, "b.py": 'revision = "b"\ndown_revision = "a"\n'})) == "b"
    typed = {"a.py": a, "c.py": 'revision: str = "c"\ndown_revision: str | Sequence[str] | None = \'a\'\n'}
    assert head_from_files(_versions(tmp_path / "2", typed)) == "c"
    merge = {"a.py": a, "b.py": 'revision = "b"\ndown_revision = ("a", "c")\n'}
    assert head_from_files(_versions(tmp_path / "3", merge)) is None
    two_heads = {"a.py": a, "b.py": 'revision = "b"\ndown_revision = "a"\n', "c.py": 'revision = "c"\ndown_revision = "a"\n'}
    assert head_from_files(_versions(tmp_path / "4", two_heads)) is None
    assert head_from_files(_versions(tmp_path / "5", {"a.py": a, "d.py": "down_revision = 'a'\n"})) is None
    assert head_from_files(_versions(tmp_path / "6", {"a.py": a, "e.py": 'revision = "e"\ndown_revision = "zz"\n'})) is None
    assert head_from_files(tmp_path / "missing") is None
    assert (MIGRATIONS_DIR / "versions").is_dir()


def test_a_new_or_current_database_opens_without_alembic(tmp_path):
    db = tmp_path / "ongrid.db"
    code = f"""
        import sys, trio
        from ongridd.store import open_store

        async def main():
            async with open_store({f"sqlite:///{db}"!r}) as store:
                await store.recovery_sweep()
            print("alembic" in sys.modules)

        trio.run(main)
    """
    first = _python(code)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.strip() == "False"  # an empty database: created from schema.py and stamped
    again = _python(code)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout.strip() == "False"  # at the head: one query, no Alembic


async def test_older_or_newer_schema_still_goes_through_alembic(tmp_path):
    url = f"sqlite:///{tmp_path / 'ongrid.db'}"
    async with open_store(url):
        pass
    engine = create_engine(normalize_url(url))
    try:
        with engine.begin() as conn:  # pretend the last revision is not applied yet
            conn.execute(sa.text("DROP TABLE IF EXISTS alembic_version"))
            conn.execute(sa.text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)"))
            conn.execute(sa.text("INSERT INTO alembic_version VALUES ('9999_future')"))
    finally:
        engine.dispose()
    from ongridd.errors import StoreError

    with pytest.raises(StoreError, match="9999_future"):
        async with open_store(url):
            pass
    with pytest.raises(StoreError, match="9999_future"):
        async with open_store(url, migrate=False):
            pass


def test_render_imports_markdown_it_on_first_use():
    done = _python("""
        import sys
        import ongridd.render as render
        before = "markdown_it" in sys.modules
        html = render.markdown_html("**hi** <script>x</script>")
        print(before, "markdown_it" in sys.modules, html)
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after, html = done.stdout.strip().split(" ", 2)
    assert (before, after) == ("False", "True")
    assert "<strong>hi</strong>" in html and "<script>" not in html


def test_what_serves_healthz_imports_no_plugin_machinery_and_no_store():
    # /healthz answers as soon as the daemon listens: the HTTP app must not pull in the plugin manager,
    # the tool registry or the JSON Schema validators (they load after, with the plugins), nor the store
    # and SQLAlchemy (imported in a worker thread once it listens)
    done = _python("""
        import sys
        import ongridd.daemon as daemon
        daemon.import_server()
        print(sorted(m for m in sys.modules if m.startswith(
            ("ongridd.plugins.", "ongridd.tools.registry", "ongridd.tools.args", "jsonschema", "pluggy", "httpx2",
             "ongridd.store", "sqlalchemy", "alembic"))))
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
