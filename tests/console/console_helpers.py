"""Helpers for the web console tests: a real ``ongridd serve`` with a config file, the
scripted model, and Debian's chromium driven by Playwright (never a downloaded browser)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.e2e.e2e_helpers import ROOT, env, free_port, ongridd, start_fake_llm, stop, wait_healthy

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def have_browser() -> bool:
    """Debian's chromium is installed and the Playwright client is importable."""
    if not (os.path.exists(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        return False
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def daemon(tmp: Path, script: dict[str, Any], *, tokens: str | None = None,
           more_config: dict[str, Any] | None = None, **llm_env: str) -> Iterator[dict[str, Any]]:
    """A scripted model and a daemon (marketplace index of the checkout) for the block:
    ``{"url", "state", "stderr"}``; both processes are stopped on the way out.
    ``more_config``: further top-level config keys (e.g. ``limits``)."""
    llm, llm_url = start_fake_llm(tmp, script, **llm_env)
    cfg = tmp / "ongrid.yaml"
    cfg.write_text(json.dumps({"marketplace": {"index": str(ROOT / "marketplace" / "index.yaml")},
                               "agents": {"user_dirs": [str(tmp / "agents")]}, **(more_config or {})}))
    (tmp / "agents").mkdir(exist_ok=True)
    port = free_port()
    extra = {"ONGRID_LLM_BASE_URL": llm_url, "ONGRID_LLM_MODEL": "scripted"}
    if tokens:
        extra["ONGRID_TOKENS"] = tokens
    err = open(tmp / "daemon.stderr", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(ongridd("serve", "--config", str(cfg), "--state-dir", str(tmp / "state"),
                                    "--listen", f"127.0.0.1:{port}"),
                            cwd=tmp, env=env(**extra), stdout=subprocess.DEVNULL, stderr=err, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url)
        yield {"url": url, "state": tmp / "state", "stderr": tmp / "daemon.stderr"}
    finally:
        stop(proc)
        stop(llm)
        err.close()


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    """A headless Debian chromium (Playwright's sync API)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def open_thread_signed_in(page: Any, url: str, thread: str, token: str) -> None:
    """Open ``thread`` in ``page``, sign in with ``token`` and wait until its chat socket is attached."""
    page.goto(f"{url}/#/t/{thread}")
    page.locator("#token").fill(token)
    page.locator("#signin button[type=submit]").click()
    page.locator("#who").filter(has_text="user").wait_for()  # signed in: the badge now says the socket's state
    page.locator("#conn.online").wait_for()


def signed_in_page(b: Any, url: str, thread: str, token: str) -> tuple[Any, PageWatch]:
    """A new 1280×900 page of browser ``b`` on ``thread``, signed in with ``token`` and attached;
    ``(page, its PageWatch)``."""
    page = b.new_context(viewport={"width": 1280, "height": 900}).new_page()
    watch = PageWatch(page)
    open_thread_signed_in(page, url, thread, token)
    return page, watch


def send_text(page: Any, text: str) -> None:
    """Type ``text`` into the composer and press Enter."""
    page.locator("#text").fill(text)
    page.locator("#text").press("Enter")


class PageWatch:
    """Console messages and page errors of a page (CSP violations show up here)."""

    def __init__(self, page: Any):
        self.console: list[str] = []
        self.errors: list[str] = []
        page.on("console", lambda msg: self.console.append(f"{msg.type}: {msg.text}"))
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def csp_violations(self) -> list[str]:
        return [m for m in self.console if "Content Security Policy" in m or "Content-Security-Policy" in m]


def save_artifacts(tmp: Path, name: str, page: Any) -> Path:
    """A full-page screenshot under ``tmp`` (kept as a CI artifact); its path."""
    path = tmp / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def copy_out(path: Path) -> None:
    """Copy a screenshot to $ONGRID_ARTIFACTS_DIR when set (CI collects that folder)."""
    target = os.environ.get("ONGRID_ARTIFACTS_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)
