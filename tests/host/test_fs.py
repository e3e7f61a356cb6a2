"""host_du_summary, host_find_large_files, host_stat_file on real folders."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from functools import partial

import pytest
import trio
from ongrid_host.fs import MAX_DU_NODES, DuTree
from ongrid_host.walk import WalkState, run_walk, walk

from ongridd.errors import ToolError
from tests.host.conftest import write_random

MB = 1024 * 1024
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2


def _child(node: dict, name: str) -> dict:
    for c in node.get("children", []):
        if c["path"].rsplit("/", 1)[-1] == name:
            return c
    raise AssertionError(f"{name} not among {[c['path'] for c in node.get('children', [])]}")


async def test_du_totals_and_levels(call, tree):
    root = tree["root"]
    result = await call("host_du_summary", {"paths": [str(root)], "depth": 2})
    assert result["partial"] is False and result["permission_errors"] == 0
    (top,) = result["paths"]
    file_bytes = sum(tree["sizes"].values())  # the hard link is counted once
    assert top["path"] == str(root)
    # apparent size = the files plus the directories' own sizes (like du --apparent-size)
    dir_bytes = sum(os.lstat(p).st_size for p in [root, *[d for d in root.rglob("*") if d.is_dir()
                                                            and not d.is_symlink()]])
    link_bytes = os.lstat(root / "loop").st_size
    assert top["apparent_bytes"] == file_bytes + dir_bytes + link_bytes
    assert top["allocated_bytes"] >= file_bytes  # real, non-sparse data
    assert top["files"] == 6  # 5 files + the symlink; the hard link once
    assert top.get("hardlinks_counted_once") == 1
    names = [c["path"].rsplit("/", 1)[-1] for c in top["children"]]
    assert names == ["big", "logs", "small"]  # largest first; the symlink 'loop' is not a folder
    big = _child(top, "big")
    assert big["apparent_bytes"] >= 8 * MB and big["subdirs"] == 2
    nested = _child(big, "nested")  # level 2 shown, level 3 ('deep') folded into it
    assert nested["apparent_bytes"] >= 3 * MB and "children" not in nested
    logs = _child(top, "logs")
    assert 3 * MB < logs["allocated_bytes"] < big["allocated_bytes"]


async def test_du_top_n_per_level_says_what_was_left_out(call, tree):
    result = await call("host_du_summary", {"paths": [str(tree["root"])], "top_n": 1})
    (top,) = result["paths"]
    assert [c["path"].rsplit("/", 1)[-1] for c in top["children"]] == ["big"]
    assert top["children_omitted"] == 2


@pytest.mark.parametrize("path", ["/proc", "/proc/self", "/sys/kernel", "/dev", "/dev/../proc"])
async def test_pseudo_filesystems_are_refused(call, path):
    with pytest.raises(ToolError, match=r"never walked"):
        await call("host_du_summary", {"paths": [path]})
    with pytest.raises(ToolError, match=r"never walked"):
        await call("host_find_large_files", {"paths": [path]})


async def test_symlink_into_proc_is_refused(call, tmp_path):
    link = tmp_path / "sneaky"
    os.symlink("/proc", link)
    with pytest.raises(ToolError, match=r"never walked"):
        await call("host_du_summary", {"paths": [str(link)]})


async def test_relative_and_missing_paths(call, tmp_path):
    with pytest.raises(ToolError, match=r"not absolute"):
        await call("host_du_summary", {"paths": ["var/log"]})
    with pytest.raises(ToolError, match=r"does not exist"):
        await call("host_du_summary", {"paths": [str(tmp_path / "nope")]})


async def test_walking_root_skips_pseudo_filesystems(call):
    result = await call("host_du_summary", {"paths": ["/"], "time_limit_s": 1})
    (top,) = result["paths"]
    children = {c["path"] for c in top.get("children", [])}
    assert not children & {"/proc", "/sys", "/dev"}
    skipped = {s["path"]: s["reason"] for s in result["skipped"]}
    assert "pseudo" in skipped["/proc"] and "pseudo" in skipped["/sys"]


def test_deadline_gives_partial_result(tree):
    state = WalkState(deadline=time.monotonic() - 1)
    du = DuTree(str(tree["root"]), 1)
    for e in walk(str(tree["root"]), state):
        du.add(e)
    assert state.partial_reason == "time limit reached"
    assert state.summary()["partial"] is True and state.unfinished_dirs == 1
    assert du.report(10)["files"] == 0  # only the root itself was covered


async def test_cancelled_call_stops_the_walk_thread():
    started = trio.Event()
    saw_stop = threading.Event()
    token = trio.lowlevel.current_trio_token()

    def work(state: WalkState) -> None:
        trio.from_thread.run_sync(started.set, trio_token=token)
        if state.stop.wait(10):
            saw_stop.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(run_walk, work, time_limit_s=60))
            await started.wait()
            nursery.cancel_scope.cancel()
        assert await trio.to_thread.run_sync(saw_stop.wait, 5)


def _drop_dac_capabilities() -> None:  # runs in the child before exec
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


async def test_unreadable_directory_is_counted_not_fatal(tree):
    """Root reads every directory, so as root the walk runs in a child
    process whose capability bounding set lacks CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH: a root without them obeys file modes."""
    root = tree["root"]
    secret = root / "secret"
    (secret / "inner").mkdir(parents=True)
    (secret / "inner" / "x.bin").write_bytes(os.urandom(1000))
    secret.chmod(0o000)
    code = ("import json, sys, time\n"
            "from ongrid_host.fs import DuTree\n"
            "from ongrid_host.walk import WalkState, walk\n"
            "state = WalkState(deadline=time.monotonic() + 30)\n"
            "du = DuTree(sys.argv[1], 1)\n"
            "[du.add(e) for e in walk(sys.argv[1], state)]\n"
            "print(json.dumps({'tree': du.report(10), 'state': state.summary()}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    preexec = _drop_dac_capabilities if os.geteuid() == 0 else None
    try:
        proc = await trio.run_process([sys.executable, "-c", code, str(root)], capture_stdout=True,
                                      capture_stderr=True, check=False, env=env, preexec_fn=preexec)
    finally:
        secret.chmod(0o755)
    if proc.returncode != 0 and b"PR_CAPBSET_DROP" in proc.stderr:
        pytest.skip("cannot drop capabilities here (no CAP_SETPCAP), so root reads every directory")
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    assert out["state"]["permission_errors"] == 1
    assert out["state"]["error_samples"][0] == {"path": str(secret), "error": "Permission denied"}
    assert out["state"]["partial"] is True  # honest: the secret folder's content is not counted
    assert "could not be read" in out["state"]["partial_reason"]
    assert out["state"]["unreadable_count"] == 1 and out["state"]["unreadable_paths"] == [str(secret)]
    assert out["tree"]["apparent_bytes"] > sum(tree["sizes"].values())  # everything else was counted
    secret_node = _child(out["tree"], "secret")
    assert secret_node["files"] == 0  # its content could not be read


async def test_find_large_files_ranks_and_filters(call, tree):
    root = tree["root"]
    result = await call("host_find_large_files", {"paths": [str(root)]})
    paths = [f["path"][len(str(root)) + 1:] for f in result["files"]]
    # default min_size 1M: tiny.txt is out; the hard link shows once (either name)
    assert paths[0] in ("big/a.bin", "big/hard.bin")
    assert paths[1:] == ["big/nested/deep/b.bin", "logs/app.log", "logs/old.log"]
    assert result["files"][0]["size_bytes"] == 5 * MB and result["files"][0]["links"] == 2
    assert result["files"][0]["allocated_bytes"] >= 5 * MB and result["files"][0]["sparse"] is False
    assert result["partial"] is False

    result = await call("host_find_large_files", {"paths": [str(root)], "min_size": "2M", "top_n": 2})
    assert [f["size_bytes"] for f in result["files"]] == [5 * MB, 3 * MB]
    assert result["matched"] == 3
    result = await call("host_find_large_files", {"paths": [str(root)], "min_size": 1024 * 1024 + 1})
    assert [f["size_bytes"] for f in result["files"]][-1] == 1024 * 1024 + 1


async def test_find_large_files_bad_min_size(call, tree):
    with pytest.raises(ToolError, match=r"min_size: expected bytes .* got '10 parsecs'"):
        await call("host_find_large_files", {"paths": [str(tree["root"])], "min_size": "10 parsecs"})


async def test_stat_file(call, tree):
    root = tree["root"]
    f = root / "logs" / "app.log"
    result = await call("host_stat_file", {"path": str(f)})
    st = os.lstat(f)
    assert result["type"] == "regular file"
    assert result["size_bytes"] == 2 * MB and result["allocated_bytes"] == st.st_blocks * 512
    assert result["inode"] == st.st_ino and result["links"] == 1
    assert result["mode"] == f"{st.st_mode & 0o7777:04o}"
    assert result["owner"] == ("root" if st.st_uid == 0 else result["owner"]) and result["uid"] == st.st_uid
    vfs = os.statvfs(f)
    assert result["filesystem"]["inodes_total"] == vfs.f_files
    assert result["filesystem"]["size_bytes"] == vfs.f_blocks * vfs.f_frsize
    assert result["mtime"].endswith("+00:00")

    link = await call("host_stat_file", {"path": str(root / "loop")})
    assert link["type"] == "symbolic link" and link["link_target"] == "."
    d = await call("host_stat_file", {"path": str(root / "big")})
    assert d["type"] == "directory"
    with pytest.raises(ToolError, match=r"cannot stat .*No such file"):
        await call("host_stat_file", {"path": str(root / "missing")})
    with pytest.raises(ToolError, match=r"not an absolute path"):
        await call("host_stat_file", {"path": "relative"})


async def test_du_output_is_bounded_level_by_level(call, tmp_path):
    root = tmp_path / "wide"
    for i in range(12):
        for j in range(8):
            (root / f"d{i:02}" / f"s{j}").mkdir(parents=True)
        write_random(root / f"d{i:02}" / "f.bin", 1000 * (i + 1))
    result = await call("host_du_summary", {"paths": [str(root)], "depth": 2, "top_n": 50})
    (top,) = result["paths"]

    def count(node):
        return sum(1 + count(c) for c in node.get("children", []))

    assert count(top) == MAX_DU_NODES
    assert len(top["children"]) == 12  # the first level is shown whole before going deeper
    assert top["children"][0]["path"].endswith("d11")  # largest first
    shown_deeper = sum(len(c.get("children", [])) for c in top["children"])
    omitted_deeper = sum(c.get("children_omitted", 0) for c in top["children"])
    assert shown_deeper == MAX_DU_NODES - 12 and shown_deeper + omitted_deeper == 12 * 8
