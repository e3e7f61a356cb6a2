"""The index file, the hash rules, and the repository's own index and wheels."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from mp_helpers import MARKETPLACE, python_env

from ongridd.config import structure
from ongridd.errors import MarketplaceError
from ongridd.marketplace.index import (
    file_sha256,
    folder_files,
    folder_sha256,
    index_path_for,
    load_index,
    normalize_dist_name,
)

UPDATE = [sys.executable, str(MARKETPLACE / "update_index.py")]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_the_repository_index_lists_the_two_examples():
    index = load_index(MARKETPLACE / "index.yaml")
    assert index.names() == ["ongrid-example-diskreport", "ongrid-example-postmortem"]
    for entry in index.entries:
        assert entry.source_path.is_file() and entry.source_path.suffix == ".whl"
        assert entry.source_path.is_relative_to(MARKETPLACE / "dist")


def test_the_repository_index_hashes_are_current():
    for entry in load_index(MARKETPLACE / "index.yaml").entries:
        assert file_sha256(entry.source_path) == entry.sha256, entry.name
    run = subprocess.run([*UPDATE, "--check"], capture_output=True, text=True, env=python_env(), check=False)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("project", ["ongrid-example-diskreport", "ongrid-example-postmortem"])
def test_shipped_wheels_are_built_from_the_sources_beside_them(project):
    folder = MARKETPLACE / project
    entry = load_index(MARKETPLACE / "index.yaml").get(project)
    with zipfile.ZipFile(entry.source_path) as zf:
        packaged = {n: zf.read(n) for n in zf.namelist() if ".dist-info/" not in n}
        meta = next(zf.read(n).decode() for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        eps = next(zf.read(n).decode() for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt"))
    sources = {rel for rel in folder_files(folder) if rel.split("/")[0].startswith("ongrid_example_")}
    assert set(packaged) == sources  # every module and data file, and nothing else
    for rel, data in packaged.items():
        assert (folder / rel).read_bytes() == data, f"{rel} in the wheel is stale: run update_index.py --build"
    assert f"Version: {entry.version}" in meta and "[ongrid]" in eps


def test_an_index_path_relative_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    default = structure({})
    assert index_path_for(default) == MARKETPLACE / "index.yaml"  # the checkout's, when cwd has none
    _write(tmp_path / "marketplace" / "index.yaml", "plugins: []\n")
    assert index_path_for(default) == tmp_path / "marketplace" / "index.yaml"
    other = structure({"marketplace": {"index": "elsewhere/index.yaml"}})
    assert index_path_for(other) == tmp_path / "elsewhere" / "index.yaml"


GOOD = """plugins:
  - name: demo
    version: "1.0"
    description: d
    source: dist/demo-1.0-py3-none-any.whl
    sha256: {sha}
"""


@pytest.mark.parametrize("text,message", [
    ("plugins: [", r"index.yaml:1: invalid YAML"),
    ("- a\n- b\n", r"must be a mapping with the single key 'plugins'"),
    ("plugins: {}\n", r"index.yaml:1: 'plugins' must be an array, got object"),
    ("plugins:\n  - name: demo\n", r"index.yaml:2: plugins\[0\]: missing required key 'version'"),
    (GOOD.format(sha="a" * 64) + "    homepage: x\n", r"index.yaml:7: plugins\[0\]: unknown key 'homepage'"),
    (GOOD.format(sha="a" * 64).replace('"1.0"', "1.0"),
     r"index.yaml:3: plugins\[0\].version must be a string, got the number 1.0 \(quote it\)"),
    (GOOD.format(sha="xyz"), r"index.yaml:6: plugins\[0\].sha256 must be 64 hex digits"),
    (GOOD.format(sha="a" * 64).replace("dist/", "/abs/"), r"index.yaml:5: plugins\[0\].source must be relative"),
    (GOOD.format(sha="a" * 64).replace("name: demo", "name: ../demo"),
     r"index.yaml:2: plugins\[0\].name '../demo' is not a valid package name"),
    (GOOD.format(sha="a" * 64) + GOOD.format(sha="b" * 64).replace("plugins:\n", "").replace("demo", "Demo"),
     r"index.yaml:7: plugins\[1\]: duplicate package name 'Demo' \(also at .*index.yaml:2\)"),
])
def test_index_errors_name_file_line_and_key(tmp_path, text, message):
    path = _write(tmp_path / "index.yaml", text)
    with pytest.raises(MarketplaceError, match=message):
        load_index(path)


def test_index_missing_file_and_empty_file(tmp_path):
    with pytest.raises(MarketplaceError, match="marketplace index not found: .*nope.yaml"):
        load_index(tmp_path / "nope.yaml")
    assert load_index(_write(tmp_path / "empty.yaml", "")).entries == ()


def test_index_lookup_normalises_names(tmp_path):
    index = load_index(_write(tmp_path / "index.yaml", GOOD.format(sha="A" * 64)))
    (entry,) = index.entries
    assert entry.sha256 == "a" * 64 and entry.line == 2
    assert entry.source_path == tmp_path / "dist" / "demo-1.0-py3-none-any.whl"
    assert index.get("DEMO") is entry and index.get("nope") is None
    assert normalize_dist_name("Ongrid_Example..Disk") == "ongrid-example-disk"


def _by_hand(root: Path, rels: list[str]) -> str:
    lines = "".join(f"{rel}\0{hashlib.sha256((root / rel).read_bytes()).hexdigest()}\n" for rel in sorted(rels))
    return hashlib.sha256(lines.encode()).hexdigest()


def test_folder_hash_follows_the_rule(tmp_path):
    root = tmp_path / "pkg"
    _write(root / "pyproject.toml", "[project]\n")
    _write(root / "b_pkg" / "__init__.py", "X = 1\n")
    _write(root / "b_pkg" / "build" / "real.py", "# a subpackage called build is content\n")
    _write(root / "a.md", "é\n")
    rels = ["a.md", "b_pkg/__init__.py", "b_pkg/build/real.py", "pyproject.toml"]
    assert folder_files(root) == rels
    digest = folder_sha256(root)
    assert digest == _by_hand(root, rels)
    # by-products are left out
    _write(root / "b_pkg" / "__pycache__" / "x.cpython-311.pyc", "junk")
    _write(root / "b_pkg" / "y.pyc", "junk")
    _write(root / "build" / "lib" / "b_pkg" / "__init__.py", "X = 2\n")
    _write(root / "dist" / "old.whl", "junk")
    _write(root / "b_pkg.egg-info" / "PKG-INFO", "junk")
    assert folder_sha256(root) == digest
    # any real change is seen: content, a new file, a rename
    _write(root / "b_pkg" / "__init__.py", "X = 3\n")
    assert folder_sha256(root) != digest
    _write(root / "b_pkg" / "__init__.py", "X = 1\n")
    assert folder_sha256(root) == digest
    _write(root / "notes.txt", "")
    assert folder_sha256(root) != digest
    (root / "notes.txt").unlink()
    (root / "a.md").rename(root / "c.md")
    assert folder_sha256(root) != digest


def test_folder_hash_refuses_links(tmp_path):
    root = tmp_path / "pkg"
    _write(root / "a.py", "")
    os.symlink(root / "a.py", root / "b.py")
    with pytest.raises(MarketplaceError, match="b.py: symbolic links are not allowed"):
        folder_sha256(root)


def test_update_index_rehashes_and_keeps_comments(tmp_path):
    market = tmp_path / "market"
    shutil.copytree(MARKETPLACE, market, ignore=shutil.ignore_patterns("__pycache__"))
    index = market / "index.yaml"
    original = index.read_text(encoding="utf-8")
    entry = load_index(index).entries[0]
    index.write_text(original.replace(entry.sha256, "f" * 64), encoding="utf-8")
    check = subprocess.run([*UPDATE, "--check", "--index", str(index)], capture_output=True, text=True,
                           env=python_env(), check=False)
    assert check.returncode == 1 and f"{entry.name}: index says {'f' * 64}" in check.stderr
    fix = subprocess.run([*UPDATE, "--index", str(index)], capture_output=True, text=True, env=python_env(),
                         check=False)
    assert fix.returncode == 0 and f"updated {entry.name}" in fix.stdout
    assert index.read_text(encoding="utf-8") == original  # comments, order and layout kept
    again = subprocess.run([*UPDATE, "--check", "--index", str(index)], capture_output=True, text=True,
                           env=python_env(), check=False)
    assert again.returncode == 0 and "every sha256 is current" in again.stdout


def test_update_index_build_takes_a_bumped_version(tmp_path):
    # the maintainer bumps a package's version: --build replaces its wheel, and the index entry takes
    # the new wheel's path and version (it failed on the old wheel it had just removed)
    market = tmp_path / "market"
    shutil.copytree(MARKETPLACE, market, ignore=shutil.ignore_patterns("__pycache__"))
    project = market / "ongrid-example-diskreport" / "pyproject.toml"
    project.write_text(project.read_text(encoding="utf-8").replace('version = "0.1.0"', 'version = "0.2.0"'),
                       encoding="utf-8")
    done = subprocess.run([*UPDATE, "--build", "--index", str(market / "index.yaml")], capture_output=True,
                          text=True, env=python_env(), check=False)
    assert done.returncode == 0, done.stderr
    entry = next(e for e in load_index(market / "index.yaml").entries if e.name == "ongrid-example-diskreport")
    assert entry.version == "0.2.0" and entry.source_path.name == "ongrid_example_diskreport-0.2.0-py3-none-any.whl"
    assert entry.source_path.is_file() and not (market / "dist" / "ongrid_example_diskreport-0.1.0-py3-none-any.whl").exists()
    check = subprocess.run([*UPDATE, "--check", "--index", str(market / "index.yaml")], capture_output=True,
                           text=True, env=python_env(), check=False)
    assert check.returncode == 0, check.stderr


def test_a_folder_source_naming_a_large_tree_is_refused_before_it_is_hashed(tmp_path, monkeypatch):
    """An index may name a source next to it (``../dist/x.whl``); one that names a large tree by
    mistake (``../../..``) is refused once it passes a package folder's bounds, not hashed whole."""
    from ongridd.marketplace import index

    tree = tmp_path / "tree"
    for i in range(5):
        (tree / f"d{i}").mkdir(parents=True)
        (tree / f"d{i}" / "f.txt").write_text("x" * 100)
    monkeypatch.setattr(index, "FOLDER_MAX_ENTRIES", 6)
    with pytest.raises(MarketplaceError, match="more than 6 files and folders: not a package folder"):
        index.source_sha256(tree)
    monkeypatch.setattr(index, "FOLDER_MAX_ENTRIES", 20_000)
    monkeypatch.setattr(index, "FOLDER_MAX_BYTES", 250)
    with pytest.raises(MarketplaceError, match="more than 0 MiB of files"):
        index.source_sha256(tree)
    monkeypatch.setattr(index, "FOLDER_MAX_BYTES", 500)
    assert len(index.source_sha256(tree)) == 64
