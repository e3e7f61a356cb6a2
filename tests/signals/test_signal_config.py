"""The signal config keys: defaults, the shipped sample, environment
overrides and strict refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from ongridd.config import Config, load_config
from ongridd.errors import ConfigError

SAMPLE = Path(__file__).resolve().parents[2] / "etc" / "ongrid.yaml"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "ongrid.yaml"
    p.write_text(text)
    return p


def test_defaults_and_sample():
    cfg = Config()
    assert cfg.logs.dirs == ("/var/log",) and cfg.logs.journal_dirs == ()
    assert cfg.loki.url is None and cfg.tempo.url is None and cfg.topology.files == ()
    sample = load_config(SAMPLE, environ={})
    assert (sample.logs, sample.loki, sample.tempo, sample.topology) == (cfg.logs, cfg.loki, cfg.tempo, cfg.topology)


def test_environment_overrides(tmp_path):
    cfg = load_config(_write(tmp_path, "loki: {url: http://a:3100}\n"),
                      environ={"ONGRID_LOKI_URL": "http://loki:3100", "ONGRID_TEMPO_URL": "http://tempo:3200"})
    assert cfg.loki.url == "http://loki:3100" and cfg.tempo.url == "http://tempo:3200"


@pytest.mark.parametrize("text, where", [
    ("logs: {dirs: [var/log]}\n", "config.logs.dirs[0]"),
    ("logs: {journal_dirs: [rel]}\n", "config.logs.journal_dirs[0]"),
    ("logs: {dir: [/var/log]}\n", "config.logs"),
    ("loki: {url: ftp://x}\n", "config.loki.url"),
    ("tempo: {url: 3200}\n", "config.tempo.url"),
    ("topology: {files: /etc/t.yaml}\n", "config.topology.files"),
])
def test_strict_refusals(tmp_path, text, where):
    with pytest.raises(ConfigError, match=where.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        load_config(_write(tmp_path, text), environ={})
