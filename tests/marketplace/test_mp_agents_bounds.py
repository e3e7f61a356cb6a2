"""Against a real ``ongridd serve``: hostile persona bodies never stall the daemon.

Alias bombs of every typed key and other unusable bodies are PUT to
``/api/agents/bomb`` while another thread polls ``/healthz`` every 100 ms:
``/healthz`` answers within a second throughout, every PUT answers 400 with
warnings (413 past the size limit), and the registry is unchanged.  Bombs in
the user agents folder are skipped at start-up and by the folder watcher,
with a warning naming the file and the line.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ongridd.personas.frontmatter import MAX_FILE_BYTES
from ongridd.personas.parse import parse_persona_text
from tests.bombs import REASONS, all_bombs, bomb, fuzz_cases
from tests.e2e.e2e_helpers import env, free_port, ongridd, stop, wait_healthy

httpx2 = pytest.importorskip("httpx2")

#: Seconds /healthz may take to answer while bombs are parsed.
HEALTHZ_BOUND_S = 1.0
GOOD = "---\nname: {name}\ndescription: A persona that loads.\n---\nYou are {name}.\n"


def _bodies() -> list[tuple[str, bytes, int]]:
    """(label, body, expected status): every alias bomb, unusable fuzz files, oversized bodies — 200 in all."""
    out = [(stem, text.encode(), 400) for stem, _variant, text in all_bombs()]
    for case in fuzz_cases(3000, 7):
        if len(out) >= 197:
            break
        if case.kind in ("bomb", "structured", "mutated", "fences", "keys"):
            continue  # every bomb is in already; the others may well be usable
        if len(case.data) <= MAX_FILE_BYTES and parse_persona_text(case.data, "x.md")[0] is None:
            out.append((case.name, case.data, 400))
    big = GOOD.format(name="bomb").encode()
    out += [("oversized-1", big + b"x" * MAX_FILE_BYTES, 413),
            ("oversized-2", bomb("laughs", "name").encode() + b"#" * MAX_FILE_BYTES, 413),
            ("oversized-3", b"---\n" + b"[" * (MAX_FILE_BYTES + 1), 413)]
    return out


class HealthPoller(threading.Thread):
    """GET /healthz every 100 ms until stopped; keeps (latency s, status or error)."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = url
        self.results: list[tuple[float, int | str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx2.Client(timeout=5.0) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    status: int | str = client.get(self.url + "/healthz").status_code
                except httpx2.HTTPError as exc:
                    status = type(exc).__name__
                self.results.append((time.monotonic() - started, status))
                self.stop.wait(0.1)


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.exclusive  # heavy: a timing bound that another worker beside it would break
def test_bombs_never_stall_the_daemon_nor_reach_the_registry(tmp_path: Path):
    agents = tmp_path / "agents"
    agents.mkdir()
    startup_bombs = {}
    for stem, variant, text in all_bombs():
        if stem.endswith(("--name", "--metadata")):  # start-up: two typed keys of every variant
            (agents / f"{stem}.md").write_text(text, encoding="utf-8")
            startup_bombs[str(agents / f"{stem}.md")] = REASONS[variant]
    (agents / "keeper.md").write_text(GOOD.format(name="keeper"), encoding="utf-8")
    config = tmp_path / "ongrid.yaml"
    config.write_text(json.dumps({"agents": {"user_dirs": [str(agents)]}}), encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "daemon.log"
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            ongridd("serve", "--config", str(config), "--state-dir", str(tmp_path / "state"),
                    "--listen", f"127.0.0.1:{port}"),
            cwd=tmp_path, env=env(), stdout=log, stderr=log, text=True)
    try:
        started = time.monotonic()
        wait_healthy(proc, url, timeout_s=60)
        assert time.monotonic() - started < 30
        before = httpx2.get(url + "/api/agents", timeout=10).json()
        names = {a["name"] for a in before}
        assert "keeper" in names and "bomb" not in names
        startup_log = log_path.read_text(encoding="utf-8")
        for path, reason in startup_bombs.items():
            assert any(path + ":" in line and reason in line for line in startup_log.splitlines()), path

        bodies = _bodies()
        assert len(bodies) == 200
        poller = HealthPoller(url)
        poller.start()
        answers: dict[str, tuple[int, dict]] = {}

        def put(item: tuple[str, bytes, int]) -> None:
            label, body, _expected = item
            resp = httpx2.put(url + "/api/agents/bomb", content=body, timeout=30)
            answers[label] = (resp.status_code, resp.json())

        put_started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(put, bodies))
        put_elapsed = time.monotonic() - put_started
        time.sleep(0.3)
        poller.stop.set()
        poller.join(timeout=10)

        for label, _body, expected in bodies:
            status, answer = answers[label]
            assert status == expected, (label, status, answer)
            assert set(answer) == {"error", "warnings"}, (label, answer)
            if expected == 400:
                assert answer["warnings"] and all(isinstance(w, str) for w in answer["warnings"]), (label, answer)
                assert any("the text sent" in w for w in answer["warnings"]), (label, answer)
            else:
                assert answer["error"]["code"] == "too_large"
        assert poller.results, "the poller never ran"
        bad = [r for r in poller.results if r[1] != 200 or r[0] > HEALTHZ_BOUND_S]
        assert not bad, bad[:10]
        assert len(poller.results) >= put_elapsed / 0.1 * 0.5  # it really polled throughout
        assert httpx2.get(url + "/api/agents", timeout=10).json() == before
        assert not (agents / "bomb.md").exists()

        # the folder watcher: a new bomb is skipped with file and line, a new good file loads
        late = agents / "late-bomb.md"
        late.write_text(bomb("merge-laughs", "tools"), encoding="utf-8")
        (agents / "late-good.md").write_text(GOOD.format(name="late-good"), encoding="utf-8")
        _wait_for(lambda: "late-good" in {a["name"] for a in httpx2.get(url + "/api/agents", timeout=10).json()},
                  20, "the watcher to load late-good.md")
        assert httpx2.get(url + "/healthz", timeout=HEALTHZ_BOUND_S).status_code == 200
        assert "bomb" not in {a["name"] for a in httpx2.get(url + "/api/agents", timeout=10).json()}
        _wait_for(lambda: any(f"{late}:" in line and "YAML aliases expand to more than" in line
                              for line in log_path.read_text(encoding="utf-8").splitlines()),
                  10, "the watcher's warning about late-bomb.md")
        assert stop(proc, 20) == 0  # SIGTERM: a clean exit
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
