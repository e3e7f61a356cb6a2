"""``ongrid`` never hangs and says what is wrong, against a real daemon
subprocess: an empty question, a TLS URL on a plain-HTTP daemon, a server
that is not a daemon, nothing listening, global options on either side."""

from __future__ import annotations

import pytest
from cli_helpers import free_port, not_a_daemon, ongrid, serve_daemon

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    with serve_daemon(tmp_path_factory.mktemp("daemon")) as (url, _proc):
        yield url


@pytest.mark.parametrize("text", ["", "   ", "\t \n"])
def test_empty_question_exits_1_at_once(daemon, text):
    code, out, err, took = ongrid("ask", "--url", daemon, text, timeout=20)
    assert code == 1, err
    assert "bad_frame" in err and "non-empty" in err
    assert took < 10
    assert out == ""


@pytest.mark.parametrize("where", ["before", "after"])
def test_https_against_plain_http_says_so(daemon, where):
    tls_url = daemon.replace("http://", "https://")
    argv = ["--url", tls_url, "ask", "hello"] if where == "before" else ["ask", "--url", tls_url, "hello"]
    code, _out, err, took = ongrid(*argv, timeout=30)
    assert code == 2
    assert "answered plain HTTP" in err and f"--url {daemon}" in err
    assert took < 15
    code, _out, err, _took = ongrid("sessions", "list", "--url", tls_url, timeout=30)
    assert code == 2 and "answered plain HTTP" in err


@pytest.mark.parametrize("argv", [("ask", "hello"), ("sessions", "list")])
def test_a_server_that_is_not_a_daemon_is_one_sentence(argv):
    with not_a_daemon() as url:
        code, _out, err, took = ongrid("--url", url, *argv, timeout=30)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "is not an Ongrid daemon" in lines[0] and "HTTP 404" in lines[0] and "text/html" in lines[0]
    assert "(b'" not in err and "<html" not in err.lower() and "Traceback" not in err
    assert took < 15


def test_nothing_listening_says_connection_refused():
    code, _out, err, took = ongrid("ask", "--url", f"http://127.0.0.1:{free_port()}", "hello", timeout=30)
    assert code == 2
    assert "cannot reach the daemon" in err and "nothing is listening" in err and "Traceback" not in err
    assert took < 15


def test_global_options_before_and_after_the_sub_command(daemon):
    code_a, out_a, err_a, _ = ongrid("--url", daemon, "sessions", "list", "--json")
    code_b, out_b, err_b, _ = ongrid("sessions", "list", "--json", "--url", daemon)
    assert code_a == 0 and code_b == 0, (err_a, err_b)
    assert out_a == out_b


def test_a_refused_hello_says_how_to_give_a_token(monkeypatch):
    # as the HTTP commands say it: no token → how to pass one; a token refused → which ones to check
    import argparse

    from ongridd.cli.client import _error_line

    monkeypatch.delenv("ONGRID_TOKEN", raising=False)
    refused = {"type": "error", "code": "unauthorized", "message": "a token is required"}
    line = _error_line(refused, argparse.Namespace(token=None, token_file=None))
    assert line == "ongrid: unauthorized: a token is required (pass --token-file FILE or set $ONGRID_TOKEN)"
    monkeypatch.setenv("ONGRID_TOKEN", "tok-0123456789abcdef")
    assert "check the token" in _error_line(refused, argparse.Namespace(token=None, token_file=None))
    assert _error_line({"code": "busy", "message": "busy: try later"}) == "ongrid: busy: try later"
