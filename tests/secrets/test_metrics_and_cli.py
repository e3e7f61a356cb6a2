"""``/metrics`` behind the token, and how the CLI picks its token."""

from __future__ import annotations

import argparse
import io
import subprocess

import pytest

from ongridd.cli.common import ClientError, TOKEN_WARNING, token
from ongridd.config import Config, ServerConfig
from ongridd.server.app import AppServices, create_app
from ongridd.server.auth import Authenticator
from tests.e2e.e2e_helpers import env, ongrid

TOK = "metrics-token-0123456789"


async def _get_metrics(auth: Authenticator, *, public: bool = False, bearer: str | None = None) -> int:
    app = create_app(AppServices(config=Config(server=ServerConfig(metrics_public=public)), auth=auth))
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    resp = await app.test_client().get("/metrics", headers=headers)
    body = await resp.get_data()
    if resp.status_code == 200:
        assert b"# HELP" in body
    return resp.status_code


async def test_metrics_need_a_token_when_tokens_are_configured():
    auth = Authenticator({TOK: "alice"})
    assert await _get_metrics(auth) == 401
    assert await _get_metrics(auth, bearer="wrong-token-0123456789") == 401
    assert await _get_metrics(auth, bearer=TOK) == 200


async def test_metrics_public_opens_them_and_loopback_mode_is_unchanged():
    assert await _get_metrics(Authenticator({TOK: "alice"}), public=True) == 200
    assert await _get_metrics(Authenticator({})) == 200  # no tokens: as open as the rest (loopback)


# ---- the CLI token ----------------------------------------------------------------


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"token": None, "token_file": None, **kw})


def test_token_precedence_flag_then_file_then_environment(tmp_path):
    path = tmp_path / "tok"
    path.write_text("from-file-0123456789\nsecond line ignored\n")
    environ = {"ONGRID_TOKEN": "from-env-0123456789"}
    err = io.StringIO()
    assert token(_args(token="from-flag", token_file=str(path)), stderr=err, environ=environ) == "from-flag"
    assert err.getvalue().strip() == TOKEN_WARNING
    err = io.StringIO()
    assert token(_args(token_file=str(path)), stderr=err, environ=environ) == "from-file-0123456789"
    assert token(_args(), stderr=err, environ=environ) == "from-env-0123456789"
    assert token(_args(), stderr=err, environ={}) is None
    assert err.getvalue() == ""  # only --token warns


def test_token_is_resolved_once_and_warns_once():
    args = _args(token="abc")
    err = io.StringIO()
    token(args, stderr=err)
    token(args, stderr=err)
    assert err.getvalue().count("ps") == 1


def test_unreadable_or_empty_token_file_is_a_usage_error(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ClientError, match="is empty"):
        token(_args(token_file=str(empty)), environ={})
    with pytest.raises(ClientError, match="cannot read the token file"):
        token(_args(token_file=str(tmp_path / "missing")), environ={})


def _run(*argv: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(ongrid(*argv), env=env(**extra), capture_output=True, text=True, timeout=60)


def test_help_says_why_to_prefer_the_environment_or_a_file():
    out = _run("ask", "--help").stdout
    assert "--token-file FILE" in out and "$ONGRID_TOKEN" in out and "`ps`" in out


@pytest.mark.parametrize("before", [True, False])
def test_global_options_go_before_or_after_the_sub_command(tmp_path, before):
    """A bad token file is reported (exit 2) whichever side of ``ask`` the
    options are on, and ``--url`` is honoured on either side too."""
    opts = ["--url", "http://127.0.0.1:9", "--token-file", str(tmp_path / "none")]
    argv = [*opts, "ask", "hi"] if before else ["ask", *opts, "hi"]
    res = _run(*argv)
    assert res.returncode == 2 and "cannot read the token file" in res.stderr
    tok = tmp_path / "tok"
    tok.write_text("t-0123456789abcdef\n")
    opts = ["--url", "http://127.0.0.1:9", "--token-file", str(tok)]
    res = _run(*([*opts, "ask", "hi"] if before else ["ask", *opts, "hi"]))
    assert res.returncode == 2 and "127.0.0.1:9" in res.stderr and "warning" not in res.stderr


def test_token_flag_warns_on_stderr():
    res = _run("--url", "http://127.0.0.1:9", "ask", "--token", "visible-in-ps", "hi")
    assert res.returncode == 2
    assert TOKEN_WARNING in res.stderr and "visible-in-ps" not in res.stderr
