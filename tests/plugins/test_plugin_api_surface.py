"""The public plugin API is the only door: its surface is pinned here, and no
module under ``plugins/`` may import anything from ``ongridd`` but
``ongridd.plugins.api``."""

from __future__ import annotations

import ast
from pathlib import Path

import ongridd.plugins.api as api

ROOT = Path(__file__).resolve().parents[2]

# Changing this set changes what plugin authors may rely on: update
# docs/plugins.md with it.
EXPORTS = {
    # hooks and tools
    "hookimpl", "Tool", "ToolCallContext", "Proposal", "Outcome", "Classification", "Approval",
    "call_key", "classify_off_thread",
    # errors a plugin may raise or catch
    "OngridError", "ToolError", "ToolTimeout", "StoreError", "ConfigError",
    # context, routes, store
    "PluginContext", "PluginRequest", "PluginResponse", "PluginStore", "HostConfig",
    # secrets, logging, files
    "scrubbed_env", "redact", "redact_credentials", "file_holds_secret", "holds_any_secret", "bytes_hold_secret",
    "FILE_SCAN_BYTES",
    "MIN_PIECE_CHARS", "REDACTED_NOTE", "ascii_digits",
    "audit_records", "AuditCommand", "get_logger", "StructuredLogger", "Throttle",
    "read_yaml_file", "load_front_matter",
    # channel bridges
    "ChatAPI", "ChatTurn", "Origin", "PlatformError", "PlatformHTTP", "Progress", "heading_text",
    "inline_spans", "markdown_blocks", "relay_turn", "split_rendered", "split_text", "REFUSAL",
    "BridgeSettings", "BotIdentity", "is_stop", "say_once", "say_active", "MessageOutlet", "MarkupStyle",
    "run_bridge_turn", "say_safely", "stop_thread",
    # helpers
    "parse_time", "parse_duration", "HttpAnswer", "get_json", "numeric_settings", "iso_utc",
    "format_duration", "database_file",
}


def test_exports_are_pinned() -> None:
    assert set(api.__all__) == EXPORTS
    assert len(api.__all__) == len(set(api.__all__)), "a name is listed twice in __all__"
    for name in api.__all__:
        assert getattr(api, name, None) is not None, name


def test_exported_errors_are_the_hierarchy() -> None:
    for name in ("ToolError", "ToolTimeout", "StoreError", "ConfigError"):
        assert issubclass(getattr(api, name), api.OngridError)
    assert issubclass(api.ToolTimeout, api.ToolError)


def ongridd_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) for every import of ``ongridd`` other than the plugin API."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "ongridd" or node.module == "ongridd.plugins":
                names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if (name == "ongridd" or name.startswith("ongridd.")) and name != "ongridd.plugins.api":
                found.append((node.lineno, name))
    return found


def test_the_rule_catches_every_import_form() -> None:
    src = ("import ongridd.errors\nfrom ongridd.config import HostConfig\nfrom ongridd import logs\n"
           "def f():\n    from ongridd.tools.spec import Outcome\n"
           "from ongridd.plugins import manager\nfrom ongridd.plugins.api import Tool\nimport ongridd.plugins.api\n")
    assert [m for _, m in ongridd_imports(ast.parse(src))] == [
        "ongridd.errors", "ongridd.config", "ongridd.logs", "ongridd.plugins.manager", "ongridd.tools.spec"]


def test_first_party_plugins_import_only_the_plugin_api() -> None:
    files = sorted((ROOT / "plugins").rglob("*.py"))
    assert len(files) > 20
    offenders = [f"{path.relative_to(ROOT)}:{line}: {module}"
                 for path in files
                 for line, module in ongridd_imports(ast.parse(path.read_text(), str(path)))]
    assert offenders == [], "plugins must import only ongridd.plugins.api:\n" + "\n".join(offenders)


def test_a_request_body_is_parsed_once_when_first_read(monkeypatch) -> None:
    # an open route verifies its sender from the raw bytes first: a forged body costs no parse
    calls = []
    real = api.jsontext.loads
    monkeypatch.setattr(api.jsontext, "loads", lambda raw: calls.append(raw) or real(raw))
    req = api.PluginRequest(method="POST", path="/x", headers={}, query={}, user="", body=b'{"a": [1.5, 2]}')
    assert calls == []
    assert req.json == {"a": [1.5, 2]} and req.json is req.json and calls == [b'{"a": [1.5, 2]}']
    for raw in (b"", b"{", b'{"a": NaN}', b"[1e999]", b"\xff", b"[" * 100_000):
        assert api.PluginRequest(method="POST", path="/x", headers={}, query={}, user="", body=raw).json is None
    given = api.PluginRequest(method="POST", path="/x", headers={}, query={}, user="u", body=b"[1]", json={"k": 1})
    assert given.json == {"k": 1}  # given at construction: never parsed
    assert len(calls) == 1 + 5  # the five non-empty bodies above, each once
