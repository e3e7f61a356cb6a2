"""Disk usage, large files and stat: aggregation shared by local and remote
hosts, and the local implementations.

Results are JSON-ready dicts with units in key names (``*_bytes``) and human
sizes beside them (``*_human``).
"""

from __future__ import annotations

import grp
import heapq
import os
import pwd
import stat as statmod
from typing import Any

import trio

from ongrid_host.units import human_bytes, iso_utc
from ongrid_host.walk import Entry, WalkState, display, run_walk, walk
from ongridd.plugins.api import ToolError

# ---- du --------------------------------------------------------------------


#: at most this many folder entries in one host_du_summary result (shared by its paths)
MAX_DU_NODES = 60


class _DuNode:
    __slots__ = ("allocated", "apparent", "children", "dirs", "files", "path")

    def __init__(self, path: str):
        self.path = path
        self.children: dict[str, _DuNode] = {}
        self.apparent = 0
        self.allocated = 0
        self.files = 0
        self.dirs = 0

    def finish(self) -> None:
        for child in self.children.values():
            child.finish()
            self.apparent += child.apparent
            self.allocated += child.allocated
            self.files += child.files
            self.dirs += child.dirs

    def ranked(self) -> list[_DuNode]:
        return sorted(self.children.values(), key=lambda n: (n.allocated, n.apparent), reverse=True)

    def to_dict(self, top_n: int, include: set[int]) -> dict[str, Any]:
        kids = self.ranked()
        shown = [k for k in kids[:top_n] if id(k) in include]
        out: dict[str, Any] = {
            "path": display(self.path),
            "allocated_bytes": self.allocated,
            "allocated_human": human_bytes(self.allocated),
            "apparent_bytes": self.apparent,
            "apparent_human": human_bytes(self.apparent),
            "files": self.files,
            "subdirs": max(self.dirs - 1, 0),
        }
        if shown:
            out["children"] = [k.to_dict(top_n, include) for k in shown]
        if len(kids) > len(shown):
            out["children_omitted"] = len(kids) - len(shown)
        return out


class DuTree:
    """Sizes of one walk root and its subdirectories down to ``depth``.

    Feed it :class:`Entry` values with :meth:`add`; entries deeper than
    ``depth`` count toward their ancestor at ``depth``.  A hard-linked inode
    is counted once (like ``du``).
    """

    def __init__(self, root: str, depth: int):
        self.root_path = root
        self.depth = depth
        self.root = _DuNode(root)
        self._seen: set[tuple[Any, int]] = set()
        self.hardlinks_skipped = 0

    def add(self, e: Entry) -> None:
        if e.kind != "d" and e.nlink > 1 and e.inode is not None:
            if e.inode in self._seen:
                self.hardlinks_skipped += 1
                return
            self._seen.add(e.inode)
        node = self.root
        levels = len(e.rel) if e.kind == "d" else len(e.rel) - 1
        for i in range(min(levels, self.depth)):
            name = e.rel[i]
            nxt = node.children.get(name)
            if nxt is None:
                nxt = node.children[name] = _DuNode(os.path.join(node.path, name))
            node = nxt
        node.apparent += e.size
        node.allocated += e.allocated
        if e.kind == "d":
            node.dirs += 1
        else:
            node.files += 1

    def report(self, top_n: int, max_nodes: int = MAX_DU_NODES) -> dict[str, Any]:
        """The finished tree as a dict (call once, after the last add).

        Level by level, the ``top_n`` largest children of each shown folder
        are shown until ``max_nodes`` entries are used; every folder says how
        many of its children were left out (``children_omitted``).
        """
        self.root.finish()
        include: set[int] = set()
        frontier, budget = [self.root], max_nodes
        while frontier and budget > 0:
            nxt = []
            for node in frontier:
                for child in node.ranked()[:top_n]:
                    if budget <= 0:
                        break
                    include.add(id(child))
                    nxt.append(child)
                    budget -= 1
            frontier = nxt
        out = self.root.to_dict(top_n, include)
        if self.hardlinks_skipped:
            out["hardlinks_counted_once"] = self.hardlinks_skipped
        return out


def du_result(host: str, trees: list[DuTree], state: WalkState, *, depth: int, top_n: int) -> dict[str, Any]:
    """The ``host_du_summary`` result for finished trees."""
    per_path = max(10, MAX_DU_NODES // max(len(trees), 1))
    return {"host": host, "depth": depth, "top_n_per_level": top_n,
            "paths": [t.report(top_n, per_path) for t in trees], **state.summary()}


def _check_exist(paths: list[str]) -> None:
    for p in paths:
        if not os.path.lexists(p):
            raise ToolError(f"paths: {p!r} does not exist on host 'local'")


async def du_local(paths: list[str], *, depth: int, top_n: int, time_limit_s: float) -> dict[str, Any]:
    """``host_du_summary`` on this host: walks in a worker thread.

    ``paths`` are already checked (absolute, not pseudo).  Raises ToolError
    when a path does not exist or cannot be read at all.
    """
    def work(state: WalkState) -> list[DuTree]:
        _check_exist(paths)
        trees = []
        for p in paths:
            tree = DuTree(p, depth)
            trees.append(tree)
            try:
                for e in walk(p, state):
                    tree.add(e)
            except OSError as exc:
                state.error(p, exc)
            if state.partial_reason is not None:
                break
        return trees

    trees, state = await run_walk(work, time_limit_s=time_limit_s)
    return du_result("local", trees, state, depth=depth, top_n=top_n)


# ---- large files ------------------------------------------------------------


class LargeFiles:
    """Keeps the ``top_n`` regular files using the most disk space
    (allocated bytes) among those whose size is at least ``min_bytes``
    (like ``find -size``); a hard-linked inode once."""

    def __init__(self, top_n: int, min_bytes: int):
        self.top_n = top_n
        self.min_bytes = min_bytes
        self._heap: list[tuple[int, int, str, Entry]] = []
        self._seen: set[tuple[Any, int]] = set()
        self._n = 0
        self.matched = 0

    def add(self, root: str, e: Entry) -> None:
        if e.kind != "f" or e.size < self.min_bytes:
            return
        if e.inode is not None and e.nlink > 1:
            if e.inode in self._seen:
                return
            self._seen.add(e.inode)
        self.matched += 1
        self._n += 1
        item = (e.allocated, -self._n, os.path.join(root, *e.rel) if e.rel else root, e)
        if len(self._heap) < self.top_n:
            heapq.heappush(self._heap, item)
        elif item[:2] > self._heap[0][:2]:
            heapq.heapreplace(self._heap, item)

    def files(self) -> list[dict[str, Any]]:
        out = []
        for allocated, _, path, e in sorted(self._heap, key=lambda t: t[:2], reverse=True):
            out.append({
                "path": display(path),
                "allocated_bytes": allocated,
                "allocated_human": human_bytes(allocated),
                "size_bytes": e.size,
                "size_human": human_bytes(e.size),
                "sparse": allocated < e.size,
                "links": e.nlink,
                "mtime": iso_utc(e.mtime),
                "owner": user_name(e.uid) if isinstance(e.uid, int) else e.uid,
            })
        return out


def large_files_result(host: str, lf: LargeFiles, state: WalkState) -> dict[str, Any]:
    return {"host": host, "min_size_bytes": lf.min_bytes, "min_size_human": human_bytes(lf.min_bytes),
            "ranked_by": "allocated_bytes (disk space used)", "matched": lf.matched,
            "files": lf.files(), **state.summary()}


async def large_files_local(paths: list[str], *, top_n: int, min_bytes: int,
                            time_limit_s: float) -> dict[str, Any]:
    """``host_find_large_files`` on this host (walk in a worker thread)."""
    def work(state: WalkState) -> LargeFiles:
        _check_exist(paths)
        lf = LargeFiles(top_n, min_bytes)
        for p in paths:
            try:
                for e in walk(p, state):
                    lf.add(p, e)
            except OSError as exc:
                state.error(p, exc)
            if state.partial_reason is not None:
                break
        return lf

    lf, state = await run_walk(work, time_limit_s=time_limit_s)
    return large_files_result("local", lf, state)


# ---- stat -------------------------------------------------------------------


def user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


def group_name(gid: int) -> str | None:
    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return None


_TYPES = {
    statmod.S_IFREG: "regular file", statmod.S_IFDIR: "directory", statmod.S_IFLNK: "symbolic link",
    statmod.S_IFCHR: "character device", statmod.S_IFBLK: "block device", statmod.S_IFIFO: "fifo",
    statmod.S_IFSOCK: "socket",
}


def filesystem_info(total_blocks: int, free_blocks: int, avail_blocks: int, block_size: int,
                    inodes_total: int, inodes_free: int, **extra: Any) -> dict[str, Any]:
    """Free space and inodes of a filesystem, as reported by ``host_stat_file``."""
    total = total_blocks * block_size
    avail = avail_blocks * block_size
    used = (total_blocks - free_blocks) * block_size
    out = {
        "size_bytes": total, "size_human": human_bytes(total),
        "used_bytes": used, "available_bytes": avail, "available_human": human_bytes(avail),
        "used_pct": round(100.0 * used / (used + avail), 1) if used + avail else None,
        "inodes_total": inodes_total, "inodes_free": inodes_free,
        "inodes_used_pct": (round(100.0 * (inodes_total - inodes_free) / inodes_total, 1)
                            if inodes_total else None),
    }
    out.update(extra)
    return out


def _mount_point(path: str) -> str:
    path = os.path.abspath(path)
    try:
        dev = os.lstat(path).st_dev
    except OSError:
        return path
    while path != "/":
        parent = os.path.dirname(path)
        try:
            if os.lstat(parent).st_dev != dev:
                return path
        except OSError:
            return path
        path = parent
    return "/"


async def stat_local(path: str) -> dict[str, Any]:
    """``host_stat_file`` on this host, in a worker thread (a hung network
    mount must not block the event loop; cancellation abandons the thread)."""
    return await trio.to_thread.run_sync(_stat_local_sync, path, abandon_on_cancel=True)


def _stat_local_sync(path: str) -> dict[str, Any]:
    """``host_stat_file`` on this host (symlinks are not followed; the
    target is shown).  Raises ToolError when the path cannot be stat'ed."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise ToolError(f"path: cannot stat {path!r} on host 'local': {exc.strerror}") from None
    ftype = _TYPES.get(statmod.S_IFMT(st.st_mode), "unknown")
    out: dict[str, Any] = {
        "host": "local",
        "path": display(path),
        "type": ftype,
        "size_bytes": st.st_size,
        "size_human": human_bytes(st.st_size),
        "allocated_bytes": st.st_blocks * 512,
        "mode": f"{statmod.S_IMODE(st.st_mode):04o}",
        "mode_text": statmod.filemode(st.st_mode),
        "uid": st.st_uid, "owner": user_name(st.st_uid),
        "gid": st.st_gid, "group": group_name(st.st_gid),
        "mtime": iso_utc(st.st_mtime), "atime": iso_utc(st.st_atime), "ctime": iso_utc(st.st_ctime),
        "inode": st.st_ino, "links": st.st_nlink,
    }
    fs_path = path
    if statmod.S_ISLNK(st.st_mode):
        try:
            out["link_target"] = display(os.readlink(path))
        except OSError as exc:
            out["link_target_error"] = exc.strerror
        fs_path = os.path.dirname(path) or "/"
    try:
        vfs = os.statvfs(fs_path)
        out["filesystem"] = filesystem_info(vfs.f_blocks, vfs.f_bfree, vfs.f_bavail, vfs.f_frsize,
                                            vfs.f_files, vfs.f_ffree, mount_point=display(_mount_point(fs_path)))
    except OSError as exc:
        out["filesystem_error"] = exc.strerror
    return out

