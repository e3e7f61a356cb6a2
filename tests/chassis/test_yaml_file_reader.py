"""The one bounded YAML file reader is used for the configuration, fake-model
scripts and the marketplace index: a FIFO or an oversized file is refused
with a message naming the file, never read."""

from __future__ import annotations

import os
import re

import pytest

from ongridd.config import load_config
from ongridd.errors import ConfigError, MarketplaceError
from ongridd.fakellm.script import ScriptError, load_script
from ongridd.marketplace.index import load_index
from ongridd.yamlbounds import MAX_YAML_FILE_BYTES, read_yaml_file

READERS = [
    pytest.param(lambda p: load_config(p, environ={}), ConfigError, "config file", id="config"),
    pytest.param(load_script, ScriptError, "script file", id="fake-llm script"),
    pytest.param(load_index, MarketplaceError, "marketplace index", id="marketplace index"),
]


@pytest.mark.parametrize(("read", "error", "what"), READERS)
def test_a_fifo_is_refused_without_blocking(tmp_path, read, error, what):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # nobody writes: a blocking open or read would hang the test
    with pytest.raises(error, match=f"^{what} .*pipe.yaml is not a regular file$"):
        read(fifo)


@pytest.mark.parametrize(("read", "error", "what"), READERS)
def test_an_oversized_file_is_refused(tmp_path, read, error, what):
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * MAX_YAML_FILE_BYTES + "\n")
    with pytest.raises(error, match=rf"^{what} .*big.yaml is too large \([\d,]+ bytes; limit 1,048,576\)$"):
        read(big)


@pytest.mark.parametrize(("read", "error", "what"), READERS)
def test_a_missing_file_names_what_was_missing(tmp_path, read, error, what):
    with pytest.raises(error, match=f"^{what} not found: .*nope.yaml") as info:
        read(tmp_path / "nope.yaml")
    assert "looked for" not in str(info.value)  # an absolute path says where it is itself


def test_a_missing_file_given_relative_says_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^config file not found: etc/ongrid.yaml \(looked for "
                                          + re.escape(str(tmp_path / "etc" / "ongrid.yaml")) + r"\)$"):
        read_yaml_file("etc/ongrid.yaml")


def test_invalid_yaml_and_bad_utf8_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,\n")
    with pytest.raises(ScriptError, match=r"bad.yaml:\d+: invalid YAML"):
        read_yaml_file(bad, what="script file", error=ScriptError)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"a: \xff\n")
    with pytest.raises(ConfigError, match="^cannot read config file .*latin.yaml: 'utf-8' codec"):
        read_yaml_file(latin)
    ok = tmp_path / "ok.yaml"
    ok.write_bytes("\ufeffa: [1, 2]\n".encode())
    assert read_yaml_file(ok) == {"a": [1, 2]}
