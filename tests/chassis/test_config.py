"""Configuration: strict types, unknown keys refused, field paths, overrides, no secrets."""

from __future__ import annotations

import pytest

from ongridd.config import load_config, parse_listen, parse_tokens, read_secret, structure
from ongridd.errors import ConfigError


def write(tmp_path, text):
    p = tmp_path / "ongrid.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_defaults_match_design():
    cfg = structure({})
    assert cfg.server.listen == "127.0.0.1:8650"
    assert cfg.state_dir == "./var"
    assert cfg.llm.timeout_s == 120 and cfg.llm.max_retries == 3 and cfg.llm.call_timeout_s == 600
    assert cfg.limits.tool_result_max_chars == 16000 and cfg.limits.worker_timeout_s == 600
    assert cfg.database_url.endswith("/var/ongrid.db") and cfg.database_url.startswith("sqlite:///")


def test_sample_config_loads(tmp_path):
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "etc" / "ongrid.yaml"
    cfg = load_config(sample, environ={})
    assert cfg.source == str(sample)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("llm:\n  timeout_s: slow\n", "invalid value for type, expected number @ config.llm.timeout_s"),
        ("llm:\n  max_retries: 2.5\n", "expected integer @ config.llm.max_retries"),
        ("llm:\n  max_retries: '3'\n", "expected integer @ config.llm.max_retries"),
        ("llm:\n  max_retries: true\n", "expected integer @ config.llm.max_retries"),
        ("limits:\n  tool_result_max_chars: 10\n", "must be >= 200 @ config.limits.tool_result_max_chars"),
        ("llm:\n  model_name: x\n", "extra fields found (model_name) @ config.llm"),
        ("llm:\n  modle: x\n  zzz: 1\n", "extra fields found (modle, did you mean 'model'?; zzz) @ config.llm"),
        ("bogus: 1\n", "extra fields found (bogus) @ config"),
        ("server:\n  listen: nowhere\n", "@ config.server.listen"),
        ("hosts:\n  - {name: web-1}\n", "@ config.hosts[0].address"),
        ("hosts:\n  - {name: web-1, address: 10.0.0.1, labels: {role: [a]}}\n", "config.hosts[0].labels"),
        ("agents:\n  user_dirs: /etc/ongrid/agents\n", "@ config.agents.user_dirs"),
    ],
)
def test_bad_values_name_the_field_path(tmp_path, text, expected):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ={})
    assert expected in str(info.value)
    assert str(tmp_path) in str(info.value)  # the file is named


def test_invalid_yaml_names_file_and_line(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "server:\n  listen: [unclosed\n"), environ={})
    assert "ongrid.yaml:" in str(info.value) and "invalid YAML" in str(info.value)


def test_top_level_must_be_mapping(tmp_path):
    with pytest.raises(ConfigError, match="top level must be an object"):
        load_config(write(tmp_path, "- a\n- b\n"), environ={})


def test_precedence_flag_over_env_over_file(tmp_path):
    path = write(tmp_path, "server:\n  listen: 127.0.0.1:1111\nstate_dir: /from/file\n")
    assert load_config(path, environ={}).server.listen == "127.0.0.1:1111"
    env = {"ONGRID_LISTEN": "127.0.0.1:2222", "ONGRID_STATE_DIR": "/from/env",
           "ONGRID_LLM_MODEL": "m", "ONGRID_PROMETHEUS_URL": "http://127.0.0.1:9090"}
    cfg = load_config(path, environ=env)
    assert (cfg.server.listen, cfg.state_dir, cfg.llm.model) == ("127.0.0.1:2222", "/from/env", "m")
    assert cfg.prometheus.url == "http://127.0.0.1:9090"
    cfg = load_config(path, environ=env, overrides={("server", "listen"): "127.0.0.1:3333", ("state_dir",): None})
    assert cfg.server.listen == "127.0.0.1:3333" and cfg.state_dir == "/from/env"


def test_secrets_never_in_repr_or_errors(tmp_path):
    secret = "s3cr3t-value-XYZ"
    cfg = structure({"database": {"url": f"postgresql://u:{secret}@db/x"}})
    assert secret not in repr(cfg)
    assert read_secret("MY_KEY", {"MY_KEY": secret}) == secret
    with pytest.raises(ConfigError) as info:
        parse_tokens(f"alice:{secret},broken-entry")
    assert secret not in str(info.value) and "#2" in str(info.value)
    assert str(info.value).startswith("ONGRID_TOKENS: token entry #2 is not of the form user:token")
    with pytest.raises(ConfigError, match=r"^TEAM_TOKENS: token entry #1 is not of the form"):
        parse_tokens("no-colon-here", "TEAM_TOKENS")  # named as server.tokens_env names the variable
    assert parse_tokens("alice:tok1-of-alice, bob:tok2-of-bob") == {"tok1-of-alice": "alice", "tok2-of-bob": "bob"}
    # a short token is refused, naming the entry and its user, never the token
    with pytest.raises(ConfigError, match=r"token entry #2 \(user 'bob'\) is 4 characters long; a token needs at "
                                          r"least 8") as info:
        parse_tokens("alice:tok1-of-alice,bob:disk")
    assert "disk" not in str(info.value)
    for raw, why in (("alice:a      b-padded", r"#1 \(user 'alice'\) holds a character a bearer token cannot"),
                     ("alice:" + "\u200b" * 8, "holds a character a bearer token cannot"),
                     ("alice:tok-shared-0123,bob:tok-shared-0123", r"#2 \(user 'bob'\) repeats the token of user "
                                                                  r"'alice'")):
        with pytest.raises(ConfigError, match=why):
            parse_tokens(raw)
    assert parse_tokens("a:abc_DEF-1.2~3+4/5==") == {"abc_DEF-1.2~3+4/5==": "a"}


def test_parse_listen():
    assert parse_listen("127.0.0.1:8650") == ("127.0.0.1", 8650)
    assert parse_listen("[::1]:9") == ("::1", 9)
    for bad in ("8650", ":80", "host:port", "h:70000"):
        with pytest.raises(ConfigError):
            parse_listen(bad)


def test_alias_bomb_fifo_and_nan_are_refused(tmp_path):
    import os

    levels = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdef", "bcdefg"):
        levels.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    levels.append("plugins: {settings: {p: *g}}")
    # refused while loading, naming the file and the line of the first anchor too large (f)
    with pytest.raises(ConfigError, match=r"ongrid\.yaml:6: invalid YAML: YAML aliases expand to more than 100,000 nodes$"):
        load_config(write(tmp_path, "\n".join(levels) + "\n"), environ={})
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(fifo, environ={})
    with pytest.raises(ConfigError, match="config.llm.timeout_s"):
        load_config(write(tmp_path, "llm: {timeout_s: .nan}\n"), environ={})
    for bad in ("0", "-1", ".nan"):
        with pytest.raises(ConfigError, match="config.llm.call_timeout_s"):
            load_config(write(tmp_path, f"llm: {{call_timeout_s: {bad}}}\n"), environ={})
    with pytest.raises(ConfigError, match="config.state_dir"):
        load_config(write(tmp_path, "state_dir: ''\n"), environ={})
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(write(tmp_path, "n: " + "9" * 5000 + "\n"), environ={})
