"""What a browser must not do to the daemon (the HTTP app and the chat socket share the check):
the Host and Origin headers are read strictly, as browsers send them."""

from __future__ import annotations

import pytest

from ongridd.server.auth import origin_problem

HOST = "127.0.0.1:8650"


@pytest.mark.parametrize(("hosts", "origins", "open_mode"), [
    ([HOST], [], True),                                    # a CLI: no Origin
    ([HOST], [f"http://{HOST}"], True),                    # the daemon's own page
    ([HOST], [f"https://{HOST}"], True),                   # the same page through a TLS proxy that keeps Host
    (["LOCALHOST:8650"], ["http://localhost:8650"], True),
    (["[::1]:8650"], ["http://[::1]:8650"], True),
    (["ops.example"], ["https://ops.example"], False),     # with tokens any name may be used
    ([], [], False),
])
def test_what_a_browser_or_a_cli_sends_passes(hosts, origins, open_mode):
    assert origin_problem(hosts, origins, open_mode=open_mode) is None


@pytest.mark.parametrize(("hosts", "origins", "open_mode", "words"), [
    ([HOST], ["http://evil.example"], True, "cross-origin"),
    ([HOST], ["null"], True, "cross-origin"),
    ([HOST], [f"ftp://{HOST}"], True, "cross-origin"),                 # not a web origin
    ([HOST], [f"http://user@{HOST}"], True, "cross-origin"),
    ([HOST], [f"http://{HOST}/path"], True, "cross-origin"),
    ([HOST], [f"http://{HOST}", "http://evil.example"], True, "more than one"),
    ([HOST, "evil.example"], [], True, "more than one"),
    (["evil.example"], [], True, "not a loopback name"),               # DNS rebinding
    ([], [], True, "not a loopback name"),                              # no Host at all
    ([""], [], True, "not a loopback name"),
    (["[::1]evil.example"], [], True, "not a host name"),
    (["[::1]evil.example"], [], False, "not a host name"),
    (["127.0.0.1:8650 evil"], [], False, "not a host name"),
    (["127.0.0.1:86500000"], [], False, "not a host name"),
    (["ops.example"], ["https://evil.example"], False, "cross-origin"),
])
def test_malformed_or_cross_site_headers_are_refused(hosts, origins, open_mode, words):
    problem = origin_problem(hosts, origins, open_mode=open_mode)
    assert problem is not None and words in problem, problem
