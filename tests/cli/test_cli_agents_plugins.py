"""``ongrid agents list|validate`` and ``ongrid plugins list`` as real
subprocesses with ``--config`` / ``--state-dir``: a marketplace plugin
installed in ``<state_dir>/plugins`` shows with its persona and tool;
``validate`` names unknown tools with the closest real name and the tools
``permission_mode`` drops."""

from __future__ import annotations

import itertools
import json
import re
import textwrap
from pathlib import Path

import pytest
from cli_helpers import free_port, ongrid, serve_daemon

pytestmark = pytest.mark.slow

MODULE = "ongrid_cliprobe"
PLUGIN = textwrap.dedent('''
    """A marketplace-style test plugin: one tool, one persona folder."""
    from pathlib import Path
    from ongridd.plugins.api import Tool, hookimpl

    async def _echo(args, ctx):
        return {"echo": args.get("text")}

    @hookimpl
    def ongrid_register_tools(register, context):
        register(Tool(name="cliprobe_echo", description="Echo for the CLI tests.", handler=_echo,
                      parameters={"type": "object", "properties": {"text": {"type": "string"}}}))

    @hookimpl
    def ongrid_register_personas(register):
        register(Path(__file__).resolve().parent / "personas")
''')
PERSONA = """---
name: cliprobe-persona
description: Persona shipped by the CLI test plugin.
when_to_use: CLI tests only.
tools: [cliprobe_echo]
permission_mode: read-only
max_turns: 3
---
You echo.
"""


def install(state: Path) -> None:
    """The folder layout the marketplace installs: module + dist-info with an ``ongrid`` entry point."""
    folder = state / "plugins" / "cliprobe"
    (folder / "personas").mkdir(parents=True)
    (folder / f"{MODULE}.py").write_text(PLUGIN)
    (folder / "personas" / "cliprobe-persona.md").write_text(PERSONA)
    dist = folder / "ongrid_cliprobe-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ongrid-cliprobe\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[ongrid]\ncliprobe = {MODULE}\n")


def test_list_commands_show_installed_marketplace_plugins(tmp_path):
    state = tmp_path / "state"
    install(state)
    code, out, err, _ = ongrid("agents", "list", "--json", "--state-dir", str(state), cwd=tmp_path)
    assert code == 0, err
    by_name = {p["name"]: p for p in json.loads(out)}
    assert by_name["cliprobe-persona"]["origin"] == "plugin:cliprobe"
    assert by_name["cliprobe-persona"]["warnings"] == []  # its tool is known: the plugin's tools were loaded
    assert by_name["specialist-disk"]["origin"] == "builtin"

    code, out, err, _ = ongrid("agents", "list", "--state-dir", str(state), cwd=tmp_path)
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("cliprobe-persona"))
    assert "plugin:cliprobe" in row

    code, out, _err, _ = ongrid("agents", "list", "--json", cwd=tmp_path)  # without the state dir: not there
    assert "cliprobe-persona" not in {p["name"] for p in json.loads(out)}
    # with no flags the daemon's default folders here count, its agents folder as its plugins: ./var/agents
    (tmp_path / "var" / "agents").mkdir(parents=True)
    (tmp_path / "var" / "agents" / "local-helper.md").write_text('---\nname: local-helper\ndescription: "Here"\n---\nHi.\n')
    code, out, err, _ = ongrid("agents", "list", "--json", cwd=tmp_path)
    assert code == 0, err
    assert {p["name"]: p["origin"] for p in json.loads(out)}.get("local-helper") == "user"

    cfg = tmp_path / "ongrid.yaml"
    cfg.write_text(f"state_dir: {state}\n")
    code, out, err, _ = ongrid("plugins", "list", "--json", "--config", str(cfg), cwd=tmp_path)
    assert code == 0, err
    report = {r["name"]: r for r in json.loads(out)}["cliprobe"]
    assert report["ok"] and report["source"] == "path"
    assert report["registered"]["tools"] == ["cliprobe_echo"]
    assert any(p.endswith("personas") for p in report["registered"]["personas"])


def test_validate_names_unknown_and_dropped_tools_with_a_suggestion(tmp_path):
    (tmp_path / "p.md").write_text("""---
name: disk-typo
description: Has a typo and a write tool in read-only mode.
when_to_use: CLI tests only.
tools: [host_du_sumary, host_restart_service, host_stat_file]
permission_mode: read-only
max_turns: 3
---
You look.
""")
    code, out, err, _ = ongrid("agents", "validate", str(tmp_path / "p.md"), "--state-dir", str(tmp_path / "s"),
                               cwd=tmp_path)
    assert code == 0, err  # the persona loads; its problems are listed
    assert "unknown tool 'host_du_sumary' (did you mean 'host_du_summary'?)" in out
    assert "tool 'host_restart_service' is dropped by permission_mode 'read-only'" in out
    assert "host_stat_file" not in out  # a read tool of the list is fine
    assert f"warn  disk-typo  {tmp_path / 'p.md'}" in out
    assert "1 loaded, 0 skipped, 2 tool problems" in out


def test_a_bad_config_is_exit_2_in_one_line(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("llm:\n  timeout_s: soon\n")
    code, _out, err, _ = ongrid("agents", "list", "--config", str(cfg), cwd=tmp_path)
    assert code == 2 and "timeout_s" in err and "Traceback" not in err


def test_plugins_list_says_why_a_bridge_is_off_naming_the_missing_variables(tmp_path):
    # no settings block: off, and the listing says so rather than "registered nothing"
    code, out, err, _ = ongrid("plugins", "list", "--local", cwd=tmp_path)
    assert code == 0, err
    assert ("inactive: not configured: no plugins.settings.ongrid_slack (add it and set SLACK_BOT_TOKEN and "
            "SLACK_SIGNING_SECRET)") in out
    assert "ongrid_slack  [builtin]  inactive\n" in out  # its status says it is off, not ok
    assert "loaded here with this configuration and this shell's environment" in out
    # settings present, secrets missing: the variables it would read are named (a renamed one by its setting)
    cfg = tmp_path / "ongrid.yaml"
    cfg.write_text("plugins:\n  settings:\n    ongrid_slack: {bot_token_env: TEAM_SLACK_TOKEN}\n"
                   "    ongrid_telegram: {mode: polling}\n")
    code, out, err, _ = ongrid("plugins", "list", "--json", "--config", str(cfg), cwd=tmp_path)
    assert code == 0, err
    assert "loaded here with this configuration" in err  # whose view, beside the JSON
    report = {r["name"]: r for r in json.loads(out)}
    assert report["ongrid_slack"]["inactive"] == "TEAM_SLACK_TOKEN and SLACK_SIGNING_SECRET not set"
    assert report["ongrid_telegram"]["inactive"] == "TELEGRAM_BOT_TOKEN not set"
    assert report["ongrid_feishu"]["inactive"].startswith("not configured")
    assert report["ongrid_host"]["inactive"] is None and report["ongrid_host"]["registered"]["tools"]


def test_plugins_list_warns_of_a_feishu_bridge_without_its_encrypt_key(tmp_path):
    cfg = tmp_path / "ongrid.yaml"
    cfg.write_text("plugins:\n  settings:\n    ongrid_feishu: {}\n")
    secrets = {"FEISHU_APP_ID": "cli_listing", "FEISHU_APP_SECRET": "feishu-listing-secret",
               "FEISHU_VERIFICATION_TOKEN": "feishu-listing-vtoken"}
    with serve_daemon(tmp_path, "--config", str(cfg), extra_env=secrets) as (url, _proc):
        code, out, err, _ = ongrid("plugins", "list", "--url", url, cwd=tmp_path)
        assert code == 0, err
        head, *rest = out[out.index("ongrid_feishu"):].splitlines()
        feishu = "\n".join([head, *itertools.takewhile(lambda line: line.startswith("    "), rest)])
        assert head == "ongrid_feishu  [builtin]  ok, with a warning", feishu
        assert "routes: POST /api/channels/feishu/events" in feishu
        assert "warning: FEISHU_ENCRYPT_KEY not set: Feishu signs nothing" in feishu
        assert "feishu-listing" not in out
    with serve_daemon(tmp_path, "--config", str(cfg), extra_env={**secrets, "FEISHU_ENCRYPT_KEY": "k" * 16}) \
            as (url, _proc):
        code, out, err, _ = ongrid("plugins", "list", "--url", url, "--json", cwd=tmp_path)
        assert code == 0, err
        feishu = {r["name"]: r for r in json.loads(out)}["ongrid_feishu"]
        assert feishu["ok"] and feishu["warning"] is None and feishu["inactive"] is None


def test_plugins_list_says_which_query_plugins_have_no_server_configured(tmp_path):
    cfg = tmp_path / "ongrid.yaml"
    cfg.write_text("loki:\n  url: http://127.0.0.1:3100\n")
    code, out, err, _ = ongrid("plugins", "list", "--config", str(cfg), cwd=tmp_path)
    assert code == 0, err
    prometheus = out[out.index("ongrid_prometheus"):]
    assert prometheus.startswith("ongrid_prometheus  [builtin]  ok, not configured\n")
    assert ("not configured: prometheus.url (or ONGRID_PROMETHEUS_URL) is not set: query_promql answers with that "
            "until it is") in prometheus
    code, out, err, _ = ongrid("plugins", "list", "--json", "--config", str(cfg), cwd=tmp_path)
    report = {r["name"]: r for r in json.loads(out)}
    assert report["ongrid_tempo"]["unconfigured"].startswith("tempo.url (or ONGRID_TEMPO_URL) is not set")
    assert report["ongrid_incidents"]["unconfigured"].startswith("prometheus.url")
    assert report["ongrid_loki"]["unconfigured"] is None  # configured: nothing to say
    assert report["ongrid_tempo"]["ok"] and report["ongrid_tempo"]["registered"]["tools"] == ["query_traceql"]
    assert report["ongrid_host"]["unconfigured"] is None


def test_plugins_list_asks_the_running_daemon_whose_environment_holds_the_secrets(tmp_path):
    cfg = tmp_path / "ongrid.yaml"
    cfg.write_text("plugins:\n  settings:\n    ongrid_slack: {}\n")
    secrets = {"SLACK_BOT_TOKEN": "xoxb-listing-test", "SLACK_SIGNING_SECRET": "listing-signing-secret"}
    with serve_daemon(tmp_path, "--config", str(cfg), extra_env=secrets) as (url, _proc):
        code, out, err, _ = ongrid("plugins", "list", "--url", url, cwd=tmp_path)
        assert code == 0, err
        slack = out[out.index("ongrid_slack"):out.index("ongrid_telegram")]
        assert "routes: POST /api/channels/slack/events" in slack and "inactive" not in slack
        assert f"(as loaded by the daemon at {url})" in out
        daemon_counts = next(line for line in out.splitlines() if " plugins, " in line)
        assert re.fullmatch(r"\d+ plugins, 0 failed, [1-9]\d* tools, [1-9]\d* redirect stubs \(.*", daemon_counts)
        assert "xoxb-listing-test" not in out and "listing-signing-secret" not in out
        code, out, err, _ = ongrid("plugins", "list", "--url", url, "--json", cwd=tmp_path)
        assert {r["name"]: r for r in json.loads(out)}["ongrid_slack"]["inactive"] is None
        # loaded here, from a shell without the secrets: the same configuration says what is missing
        code, out, err, _ = ongrid("plugins", "list", "--config", str(cfg), cwd=tmp_path)
        assert "inactive: SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET not set" in out
        assert "(loaded here with this configuration and this shell's environment" in out
    # no daemon at the URL: loaded here, and it says so
    nowhere = f"http://127.0.0.1:{free_port()}"
    code, out, err, _ = ongrid("plugins", "list", "--url", nowhere, cwd=tmp_path)
    assert code == 0, err
    assert f"(no daemon answers at {nowhere}; loaded here" in out


def test_agents_validate_strict_fails_on_a_warning_about_a_file_that_loaded(tmp_path):
    dup = tmp_path / "dup.md"
    dup.write_text("---\nname: dup-agent\ndescription: d\ntools: [host_stat_file, host_stat_file]\n---\nbody\n")
    code, out, err, _ = ongrid("agents", "validate", "--strict", str(dup), cwd=tmp_path)
    assert code == 1, (out, err)
    assert out.splitlines() == [f"warn  dup-agent  {dup}", "1 loaded, 0 skipped, 1 other warning (above, on stderr)"]
    assert "'tools' lists 'host_stat_file' twice; the duplicate is ignored" in err
    code, out, _err, _ = ongrid("agents", "validate", str(dup), cwd=tmp_path)
    assert code == 0 and out.startswith("warn  dup-agent")  # reported; without --strict the persona still loads


def test_agents_validate_json_gives_each_files_status_and_the_verdict(tmp_path):
    (tmp_path / "dup.md").write_text("---\nname: dup-agent\ndescription: d\n"
                                     "tools: [host_stat_file, host_stat_file, host_stat_fiel]\n---\nbody\n")
    (tmp_path / "bad.md").write_text("---\nname: Bad Name\ndescription: d\n---\nbody\n")
    (tmp_path / "fine.md").write_text("---\nname: fine-agent\ndescription: d\ntools: [host_stat_file]\n---\nbody\n")
    nowhere = tmp_path / "missing"
    code, out, _err, _ = ongrid("agents", "validate", "--json", str(tmp_path), str(nowhere), cwd=tmp_path)
    assert code == 1
    report = json.loads(out)  # stdout holds the JSON object only
    assert (report["ok"], report["loaded"], report["skipped"], report["missing"]) == (False, 2, 1, [str(nowhere)])
    files = {Path(f["path"]).name: f for f in report["files"]}
    assert (files["fine.md"]["status"], files["fine.md"]["persona"]) == ("ok", "fine-agent")
    dup = files["dup.md"]
    assert dup["status"] == "warn" and len(dup["tool_problems"]) == 1 and "host_stat_file" in dup["tool_problems"][0]
    assert any("twice" in w for w in dup["warnings"])
    assert files["bad.md"]["status"] == "skip" and any("Bad Name" in w for w in files["bad.md"]["warnings"])
    (tmp_path / "bad.md").unlink()
    code, out, _err, _ = ongrid("agents", "validate", "--json", str(tmp_path), cwd=tmp_path)
    assert code == 0 and json.loads(out)["ok"] is True  # a tool problem alone: reported, the persona loads
    code, out, _err, _ = ongrid("agents", "validate", "--json", "--strict", str(tmp_path), cwd=tmp_path)
    assert code == 1 and json.loads(out)["ok"] is False and json.loads(out)["strict"] is True


def test_agents_list_says_where_your_own_personas_would_come_from_when_it_found_no_folder(tmp_path):
    code, out, err, _ = ongrid("agents", "list", cwd=tmp_path)  # no ./var here, no folder named
    assert code == 0 and out.startswith("NAME") and "specialist-disk" in out
    assert "no agents folder found here" in err and "--state-dir DIR" in err
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "log-reader.md").write_text("---\nname: log-reader\ndescription: d\n---\nbody\n")
    code, out, err, _ = ongrid("agents", "list", "--agents-dir", str(mine), cwd=tmp_path)
    assert code == 0 and "log-reader" in out and "no agents folder found" not in err
