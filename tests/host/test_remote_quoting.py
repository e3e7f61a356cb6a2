"""The command string ssh hands a remote host's login shell runs the argv that was checked,
word for word, whichever shell that is: each shell here runs the string as ``sshd`` would
(``SHELL -c STRING``), and a Python child prints the words it received."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from ongrid_host.ssh import quote_argv, remote_bounded
from tests.conftest import need

#: login shells a host may give its ssh user; CI installs them all
SHELLS = ("sh", "bash", "dash", "zsh", "fish", "tcsh")

#: words a shell could read otherwise: fish ends no single quote at \\', csh expands ! inside
#: one, zsh expands =cmd, old fish %self, brace lists, globs, variables, substitutions, quotes,
#: a line break, non-ASCII
WORDS = ["a\\\\", "; id #", "x\\\\' '; echo owned #", "it's", "!!", "!-1", "=ls", "%self", "{a,b}", "*", "~",
         "$HOME", "$(id)", "`id`", '"q"', "tab\there", "line\nbreak", "é", "", " ", "--", "-e"]

PRINT_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


def run_in(shell: str, command: str) -> str:
    """What ``SHELL -c command`` prints."""
    path = shutil.which(shell)
    need(path is not None, f"the {shell} shell is not installed (Debian package {shell})")
    assert path is not None
    return subprocess.run([path, "-c", command], capture_output=True, text=True, timeout=30, check=True).stdout


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("word", WORDS, ids=repr)
def test_each_word_reaches_the_command_as_it_is(shell: str, word: str) -> None:
    assert json.loads(run_in(shell, quote_argv([sys.executable, "-c", PRINT_ARGV, "x", word, "y"]))) == ["x", word, "y"]


@pytest.mark.parametrize("shell", SHELLS)
def test_all_at_once_and_under_the_remote_time_bound(shell: str) -> None:
    assert json.loads(run_in(shell, remote_bounded([sys.executable, "-c", PRINT_ARGV, *WORDS], 5))) == WORDS


@pytest.mark.parametrize("shell", SHELLS)
def test_a_script_for_sh_runs_as_written(shell: str) -> None:
    # the tools' own scripts (printf formats with \\t and \\n) go through sh -c
    script = "printf '%s\\t%s\\n' a b; printf '!\\n'"
    assert run_in(shell, remote_bounded(script, 5)) == "a\tb\n!\n"


def test_a_plain_command_stays_readable() -> None:
    assert quote_argv(["df", "-P", "/var/log"]) == "'df' '-P' '/var/log'"
    assert quote_argv(["grep", "a\\.b"]).startswith("sh -c 'eval \"$(echo ")
