#!/usr/bin/env python3
"""Keep ``marketplace/index.yaml`` true: rebuild the example wheels and
recompute every entry's ``sha256``.

    python marketplace/update_index.py            # rehash every source, rewrite index.yaml
    python marketplace/update_index.py --build    # first rebuild dist/*.whl from the package folders
    python marketplace/update_index.py --check    # change nothing; exit 1 if a hash is stale

Hashes follow docs/architecture.md §14 and :mod:`ongridd.marketplace.index`: a file's
sha256, or for a folder the sha256 of the lines ``<relative path>\\0<sha256
of file>\\n`` sorted by path, leaving out build by-products only
(``__pycache__/``, ``*.egg-info/``, ``*.pyc``/``*.pyo`` at any depth; top-level
``build/``, ``dist/``, ``.git/``).

``--build`` builds each folder below ``marketplace/`` that has a
``pyproject.toml`` into ``marketplace/dist/`` with ``pip wheel --no-deps
--no-build-isolation`` (setuptools >= 70.1 in this interpreter; no network)
from a clean copy of the hashed files, so the package folders stay clean,
with ``SOURCE_DATE_EPOCH`` fixed so the same sources give the same wheel
bytes.  Exit codes: 0 done (or, with --check, all hashes current), 1 stale
hashes (--check) or a build failure, 2 an unreadable index.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from ruamel.yaml import YAML

from ongridd.errors import MarketplaceError
from ongridd.marketplace.index import folder_files, load_index, source_sha256

INDEX = HERE / "index.yaml"
DIST = HERE / "dist"
#: 1980-01-02: the earliest time a zip entry can carry, plus a day for time zones
SOURCE_DATE_EPOCH = "315619200"


def projects(root: Path = HERE) -> list[Path]:
    """Package folders: direct children of ``root`` holding a pyproject.toml."""
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "pyproject.toml").is_file())


def build_wheel(project: Path, dist: Path = DIST) -> Path:
    """Build ``project`` into ``dist`` (replacing its older wheels); returns the wheel."""
    with tempfile.TemporaryDirectory(prefix="ongrid-build-") as tmp:
        copy = Path(tmp) / project.name
        for rel in folder_files(project):
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(project / rel, copy / rel)
        out = Path(tmp) / "out"
        env = dict(os.environ, SOURCE_DATE_EPOCH=SOURCE_DATE_EPOCH, PYTHONHASHSEED="0")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir",
             "--disable-pip-version-check", "-q", "-w", str(out), str(copy)],
            capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"building {project.name} failed:\n{proc.stderr or proc.stdout}")
        (wheel,) = out.glob("*.whl")
        dist.mkdir(parents=True, exist_ok=True)
        prefix = wheel.name.split("-", 1)[0] + "-"
        for old in dist.glob(prefix + "*.whl"):
            old.unlink()
        target = dist / wheel.name
        shutil.copyfile(wheel, target)
        return target


def stale_entries(index_path: Path = INDEX) -> list[tuple[str, str, str]]:
    """``(name, index sha256, actual sha256)`` for every entry whose hash is stale."""
    index = load_index(index_path)
    out = []
    for entry in index.entries:
        try:
            actual = source_sha256(entry.source_path)
        except MarketplaceError as exc:
            actual = f"<{exc}>"
        if actual != entry.sha256:
            out.append((entry.name, entry.sha256, actual))
    return out


def rehash(index_path: Path = INDEX, built: dict[str, Path] | None = None) -> list[str]:
    """Rewrite the ``sha256`` of every entry (comments and order kept); an entry whose source is a
    wheel of a distribution in ``built`` (distribution name as in the wheel's file name → the wheel
    just built) takes that wheel's path and version too (a version bump replaced the old wheel).
    The rewritten index is validated before it replaces the old one.  Returns the names changed.
    Raises MarketplaceError for an invalid index."""
    yaml = YAML(typ="rt")
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096
    data = yaml.load(index_path.read_text(encoding="utf-8"))
    changed = []
    for item in data["plugins"]:
        wheel = built.get(Path(str(item["source"])).name.split("-", 1)[0]) if built else None
        if wheel is not None:
            source_text = os.path.relpath(wheel, index_path.parent)
            if str(item["source"]) != source_text:
                item["source"], item["version"] = source_text, wheel.name.split("-")[1]
                changed.append(str(item["name"]))
        digest = source_sha256((index_path.parent / str(item["source"])).resolve())
        if item["sha256"] != digest:
            item["sha256"] = digest
            changed.append(str(item["name"]))
    if changed:
        staged = index_path.with_name(f".{index_path.name}.new")
        with staged.open("w", encoding="utf-8") as fh:
            yaml.dump(data, fh)
        try:
            load_index(staged)  # validate what is written before it replaces the index
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
        staged.replace(index_path)
    return list(dict.fromkeys(changed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true", help="rebuild marketplace/dist/*.whl first")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a hash is stale")
    parser.add_argument("--index", type=Path, default=INDEX, help="the index file (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = stale_entries(args.index)
            for name, want, got in stale:
                print(f"{name}: index says {want}, source has {got}", file=sys.stderr)
            if not stale:
                print(f"{args.index}: every sha256 is current")
            return 1 if stale else 0
        built: dict[str, Path] = {}
        if args.build:
            for project in projects(args.index.parent):
                wheel = build_wheel(project, args.index.parent / "dist")
                built[wheel.name.split("-", 1)[0]] = wheel
                print(f"built {wheel.name}")
        for name in rehash(args.index, built):
            print(f"updated {name}")
    except MarketplaceError as exc:
        print(f"update_index: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
