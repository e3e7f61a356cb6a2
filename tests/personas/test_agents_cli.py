"""``ongrid agents list|show|validate|catalog`` (docs/architecture.md §15.1)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

import pytest

from ongridd.cli import agents as agents_cli
from ongridd.personas import KNOWN_KEYS

BUILTINS = ["default", "incident-investigator", "reviewer", "specialist-compute", "specialist-disk",
            "specialist-network", "specialist-ops", "specialist-sre"]


@pytest.fixture(autouse=True)
def fixed_tool_names(monkeypatch, known_tools):
    monkeypatch.setattr(agents_cli, "known_tool_names", lambda *_args: known_tools)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="ongrid")
    sub = parser.add_subparsers(dest="command")
    agents_cli.add_parser(sub)
    args = parser.parse_args(["agents", *argv])
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_json_has_the_eight_builtins_with_every_key(capsys):
    code, out, err = run(capsys, "list", "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert [d["name"] for d in data] == BUILTINS
    for item in data:
        assert list(item) == list(KNOWN_KEYS) + ["source", "origin", "warnings"]
        assert os.path.isfile(item["source"])
        assert item["origin"] == "builtin" and item["warnings"] == []
    by_name = {d["name"]: d for d in data}
    assert by_name["incident-investigator"]["tool_budget"] == 18
    assert by_name["default"]["model"] is None  # unset optional keys are null


def test_list_with_agents_dir_overrides_and_adds(capsys, tmp_path, repo):
    (tmp_path / "default.md").write_text("---\nname: default\ndescription: Our coordinator\n---\nOurs.\n")
    shutil.copy(repo / "etc" / "agents" / "specialist-postgres.md", tmp_path)
    code, out, err = run(capsys, "list", "--json", "--agents-dir", str(tmp_path))
    assert code == 0 and err == ""
    data = {d["name"]: d for d in json.loads(out)}
    assert len(data) == 9
    assert data["default"]["description"] == "Our coordinator"
    assert data["default"]["source"] == str(tmp_path / "default.md")


def test_list_warnings_go_to_stderr_and_exit_zero(capsys, corpus):
    code, out, err = run(capsys, "list", "--agents-dir", str(corpus / "c3"))
    assert code == 0
    assert "specialist-sre" in out and "not valid UTF-8" not in out
    assert "not valid UTF-8 (byte 0xE9" in err and "missing frontmatter" in err


def test_list_missing_agents_dir_is_not_fatal(capsys, tmp_path):
    code, out, err = run(capsys, "list", "--agents-dir", str(tmp_path / "nope"))
    assert code == 0 and "no such folder" in err
    assert all(name in out for name in BUILTINS)


def test_show_prints_a_persona_file(capsys):
    code, out, _err = run(capsys, "show", "specialist-disk")
    assert code == 0
    assert out.startswith("# source: ") and "\n---\nname: specialist-disk\n" in out
    assert "You are the disk specialist." in out


def test_show_json_and_unknown_name(capsys):
    code, out, _ = run(capsys, "show", "reviewer", "--json")
    data = json.loads(out)
    assert code == 0 and data["name"] == "reviewer" and "Decision: approve" in data["body"]
    code, out, err = run(capsys, "show", "nobody")
    assert code == 1 and out == "" and "no persona named 'nobody'" in err and "specialist-disk" in err


def test_validate_mixed_folder(capsys, corpus, tmp_path):
    mixed = tmp_path / "mixed"
    shutil.copytree(corpus / "c3", mixed)
    shutil.copy(corpus / "good" / "cjk.md", mixed)
    shutil.copy(corpus / "malformed" / "max-turns-string.md", mixed)
    code, out, err = run(capsys, "validate", str(mixed))
    assert code == 1
    assert "Traceback" not in out + err
    for bad, reason in [("latin1.md", "not valid UTF-8 (byte 0xE9 at offset"),
                        ("nofm.md", "missing frontmatter (file must start with ---)"),
                        ("rollout.md", ":5: invalid YAML"),
                        ("max-turns-string.md", "'max_turns' must be an integer > 0, got string '15'")]:
        assert any(line.startswith(str(mixed)) and bad in line and reason in line for line in err.splitlines()), bad
    assert f"ok  specialist-sre  {mixed / 'good' / 'specialist-sre.md'}" in out
    assert f"ok  磁盘专家  {mixed / 'cjk.md'}" in out
    assert out.strip().endswith("2 loaded, 4 skipped")


def test_validate_good_files_exit_zero_and_notes_overrides(capsys, repo, tmp_path):
    (tmp_path / "default.md").write_text("---\nname: default\ndescription: Ours\n---\nOurs.\n")
    code, out, err = run(capsys, "validate", str(repo / "etc" / "agents"), str(tmp_path / "default.md"))
    assert code == 0 and err == ""
    assert "ok  specialist-postgres" in out
    assert "ok  default" in out and "(overrides the built-in persona)" in out


def test_validate_without_a_path_checks_what_the_daemon_reads(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no ./etc/ongrid.yaml, no configured folders: the built-in personas
    code, out, err = run(capsys, "validate")
    assert code == 0 and "validating " in err
    assert [line.split()[1] for line in out.splitlines() if line.startswith("ok  ")] == BUILTINS
    assert "8 loaded, 0 skipped" in out


def test_validate_missing_path_exits_one(capsys, tmp_path):
    code, out, err = run(capsys, "validate", str(tmp_path / "missing"))
    assert code == 1 and "no such file or folder" in err and "0 loaded, 0 skipped, 1 path not found" in out


def test_validate_unknown_tool_warns_but_loads(capsys, corpus):
    code, out, err = run(capsys, "validate", str(corpus / "c1" / "agents"))
    assert code == 0
    assert "unknown tool 'df_report'" in out and "unknown tool" not in err  # said once, under its persona
    assert "1 loaded, 0 skipped" in out
    # --strict: a CI gate fails on the misspelled tool too
    code, out, _err = run(capsys, "validate", "--strict", str(corpus / "c1" / "agents"))
    assert code == 1 and "tool problem" in out


def test_show_of_an_unknown_persona_says_how_to_find_your_own(capsys):
    code, _out, err = run(capsys, "show", "team-sre")
    assert code == 1 and "no persona named 'team-sre'" in err and "--config FILE" in err


def test_catalog_excludes_default_and_reviewer(capsys):
    code, out, err = run(capsys, "catalog")
    assert code == 0 and err == ""
    lines = out.strip().splitlines()
    assert len(lines) == 6
    assert not any("**default**" in line or "**reviewer**" in line for line in lines)
    assert lines[0].startswith("- **incident-investigator** — ")


def test_unexpected_failure_is_one_line_not_a_traceback(capsys, monkeypatch):
    def boom(*_a, **_k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(agents_cli, "builtin_agents_dir", boom)
    code, _out, err = run(capsys, "list")
    assert code == 2 and err == "error: RuntimeError: disk on fire\n"


def test_known_tool_names_without_a_plugin_manager(monkeypatch, capsys):
    monkeypatch.undo()
    from ongridd.plugins import manager

    def broken(config):
        raise ImportError("plugin manager unavailable")

    monkeypatch.setattr(manager, "collect", broken)
    assert agents_cli.known_tool_names(argparse.Namespace()) is None
    assert "tool names are not checked" in capsys.readouterr().err


def test_real_entry_point_in_a_subprocess(corpus, tmp_path, repo):
    mixed = tmp_path / "mixed"
    shutil.copytree(corpus / "c3", mixed)
    env = dict(os.environ, PYTHONPATH=str(repo) + os.pathsep + str(repo / "plugins"))
    code = "import sys; from ongridd.cli import ongrid_main; ongrid_main(sys.argv[1:])"
    proc = subprocess.run([sys.executable, "-c", code, "agents", "validate", str(mixed)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    for bad in ("latin1.md", "nofm.md", "rollout.md"):
        assert bad in proc.stderr
    assert "1 loaded, 3 skipped" in proc.stdout
    proc = subprocess.run([sys.executable, "-c", code, "agents", "list", "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert [d["name"] for d in json.loads(proc.stdout)] == BUILTINS


def test_validate_a_copy_of_a_built_in_persona_says_so(capsys, repo, tmp_path):
    # what a wheel install sees when it validates a checkout's agents/: the packaged built-ins are
    # other files with the same bytes, and nothing is overridden
    copy = tmp_path / "default.md"
    copy.write_bytes((repo / "agents" / "default.md").read_bytes())
    code, out, _ = run(capsys, "validate", str(copy))
    assert code == 0 and "(identical to the built-in persona)" in out and "overrides" not in out


def test_a_persona_file_cannot_drive_the_terminal(capsys, tmp_path):
    """A persona's description and body are shown as text: its escape sequences (a window title
    through OSC, ESC[2J), 8-bit C1 controls, bidi overrides and backspaces reach no terminal —
    removed from the text views, escaped in the JSON ones (the same JSON value)."""
    hostile = "x \x1b]0;TITLE\x07 \x9b2J \u202eRLO back\x08\x08"
    yaml_escaped = r"x \e]0;TITLE\a \x9b2J \u202eRLO back\b\b"  # the same characters, as YAML writes them
    (tmp_path / "evil.md").write_text(
        f'---\nname: evil-persona\ndescription: "desc {yaml_escaped}"\ntools: [host_df]\n---\nBody {hostile}.\n')
    for argv in (("show", "evil-persona"), ("list",), ("catalog",), ("show", "evil-persona", "--json"),
                 ("list", "--json")):
        code, out, err = run(capsys, *argv, "--agents-dir", str(tmp_path))
        assert code == 0, (argv, err)
        for raw in ("\x1b", "\x07", "\x9b", "\u202e", "\x08"):
            assert raw not in out + err, (argv, raw)
        if "--json" in argv:
            data = json.loads(out)
            shown = data if isinstance(data, dict) else next(d for d in data if d["name"] == "evil-persona")
            assert hostile in shown["description"]  # the value itself, escaped only in the text
