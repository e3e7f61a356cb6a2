"""The example plugin's scanner finds real deleted-but-open files.

The module is loaded from its source file under a private name, so the
installable package ``ongrid_example_diskreport`` itself is never imported
here from the source tree (it must come from a plugin folder).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from mp_helpers import MARKETPLACE

SOURCE = MARKETPLACE / "ongrid-example-diskreport" / "ongrid_example_diskreport" / "deleted.py"
pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")


@pytest.fixture(scope="module")
def deleted():
    spec = importlib.util.spec_from_file_location("_diskreport_deleted_under_test", SOURCE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mine(result: dict, path: Path) -> list[dict]:
    return [f for f in result["files"] if f["path"] == str(path)]


def test_a_deleted_file_held_open_is_found_with_its_holder(deleted, tmp_path):
    path = tmp_path / "rotated.log"
    with open(path, "wb") as fh:
        fh.write(os.urandom(3 * 1024 * 1024))
        fh.flush()
        os.fsync(fh.fileno())
        keep = path.with_name("still-here (deleted)")  # a live file whose name merely looks deleted
        keep.write_bytes(b"x" * 2 * 1024 * 1024)
        with open(keep, "rb"):
            path.unlink()
            result = deleted.scan_deleted_open_files(min_bytes=1024 * 1024, top_n=200)
        (found,) = _mine(result, path)
        assert found["size_bytes"] == 3 * 1024 * 1024
        assert found["allocated_bytes"] >= 3 * 1024 * 1024
        assert {"pid": os.getpid(), "fd": fh.fileno()}.items() <= found["holders"][0].items()
        assert found["holders"][0]["process"]
        assert not _mine(result, keep)
        assert result["processes_scanned"] >= 1
        assert result["total_allocated_bytes"] >= found["allocated_bytes"]
        # below the minimum size it is left out
        small = deleted.scan_deleted_open_files(min_bytes=4 * 1024 * 1024, top_n=200)
        assert not _mine(small, path)
    after = deleted.scan_deleted_open_files(min_bytes=0, top_n=200)
    assert not _mine(after, path)  # closed: the space is free again


def test_one_file_held_twice_is_listed_once(deleted, tmp_path):
    path = tmp_path / "twice.log"
    path.write_bytes(b"y" * 1024 * 1024)
    with open(path, "rb") as a, open(path, "rb") as b:
        path.unlink()
        result = deleted.scan_deleted_open_files(min_bytes=0, top_n=200)
        (found,) = _mine(result, path)
        assert sorted(h["fd"] for h in found["holders"]) == sorted([a.fileno(), b.fileno()])


def test_not_linux_is_an_os_error(deleted, tmp_path):
    with pytest.raises(OSError):
        deleted.scan_deleted_open_files(proc=str(tmp_path / "no-proc"))
