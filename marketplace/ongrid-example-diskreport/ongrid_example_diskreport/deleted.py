"""Find files that were deleted but are still held open by a process.

Such a file keeps its disk space until the last process closes it: ``df``
shows the filesystem full while ``du`` of its folders adds up to much less
(the classic "I deleted the log and got no space back").  The scan reads
``/proc/<pid>/fd``: a link whose target ends in `` (deleted)`` and whose
inode has no name left (``st_nlink == 0``) is such a file.  Memory-backed
files (``memfd:``, System V shared memory) are not disk space and are left
out.  Processes whose descriptors this user may not read are counted, not
guessed at (``processes_unreadable``, ``descriptors_unreadable``).  Linux only.
"""

from __future__ import annotations

import os
import pwd
import stat
from typing import Any

PROC = "/proc"
DELETED_SUFFIX = " (deleted)"
MEMORY_PREFIXES = ("/memfd:", "/SYSV", "/dev/shm/", "/[aio]", "/anon_hugepage", "/dev/zero")


def _human(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return None


def _owner(pid_dir: str) -> str | None:
    try:
        uid = os.stat(pid_dir).st_uid
    except OSError:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def scan_deleted_open_files(*, min_bytes: int = 0, top_n: int = 20, proc: str = PROC) -> dict[str, Any]:
    """Scan every process for deleted-but-open regular files.

    Returns ``{files: [{path, size_bytes, allocated_bytes, size_human,
    holders: [{pid, process, user, fd}]}], files_found, total_allocated_bytes,
    total_allocated_human, processes_scanned, processes_unreadable,
    descriptors_unreadable, min_bytes}``
    where ``files`` holds the ``top_n`` largest (by allocated bytes, i.e.
    the space they really keep) of at least ``min_bytes``, one entry per
    file even when several descriptors or processes hold it.  Raises
    OSError when ``proc`` cannot be listed (not Linux).
    """
    found: dict[tuple[int, int], dict[str, Any]] = {}
    scanned = unreadable = fd_unreadable = 0
    with os.scandir(proc) as it:
        pids = [e.name for e in it if e.name.isdigit()]
    for pid in pids:
        pid_dir = os.path.join(proc, pid)
        fd_dir = os.path.join(pid_dir, "fd")
        try:
            fds = os.listdir(fd_dir)
        except FileNotFoundError:  # the process ended meanwhile
            continue
        except OSError:
            unreadable += 1
            continue
        scanned += 1
        comm = None
        for fd in fds:
            link = os.path.join(fd_dir, fd)
            try:
                target = os.readlink(link)
            except FileNotFoundError:  # closed meanwhile
                continue
            except OSError:
                fd_unreadable += 1
                continue
            if not target.endswith(DELETED_SUFFIX) or not target.startswith("/"):
                continue
            if target.startswith(MEMORY_PREFIXES):
                continue
            try:
                st = os.stat(link)  # follows the link to the open (unlinked) inode
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 0:
                continue
            if comm is None:
                comm = (_read(os.path.join(pid_dir, "comm")) or "?").strip()
            key = (st.st_dev, st.st_ino)
            entry = found.get(key)
            if entry is None:
                entry = found[key] = {
                    "path": target[: -len(DELETED_SUFFIX)],
                    "size_bytes": st.st_size,
                    "allocated_bytes": st.st_blocks * 512,
                    "holders": [],
                }
            entry["holders"].append({"pid": int(pid), "process": comm, "user": _owner(pid_dir), "fd": int(fd)})
    files = [f for f in found.values() if max(f["allocated_bytes"], f["size_bytes"]) >= min_bytes]
    files.sort(key=lambda f: (-f["allocated_bytes"], -f["size_bytes"], f["path"]))
    total = sum(f["allocated_bytes"] for f in files)
    for f in files:
        f["size_human"] = _human(f["size_bytes"])
    return {
        "files": files[:top_n],
        "files_found": len(files),
        "total_allocated_bytes": total,
        "total_allocated_human": _human(total),
        "processes_scanned": scanned,
        "processes_unreadable": unreadable,
        "descriptors_unreadable": fd_unreadable,
        "min_bytes": min_bytes,
    }
