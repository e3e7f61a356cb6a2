"""host_restart_service: strict unit names, and a clear error (never a
pretend success) where systemd is not running."""

from __future__ import annotations

import os

import pytest
from ongrid_host.services import check_unit

from ongridd.errors import ToolError


@pytest.mark.parametrize(("given", "unit"), [
    ("nginx", "nginx.service"), ("nginx.service", "nginx.service"), ("getty@tty1", "getty@tty1.service"),
    ("php8.2-fpm", "php8.2-fpm.service"), ("systemd-journald.service", "systemd-journald.service"),
])
def test_valid_units(given, unit):
    assert check_unit(given) == unit


@pytest.mark.parametrize(("given", "why"), [
    ("", "give a unit name"), ("-nginx", "starts with '-'"), ("nginx; reboot", "not a valid unit name"),
    ("../../etc/passwd", "not a valid unit name"), ("a b", "not a valid unit name"),
    ("nginx.socket", "is a .socket unit"), ("multi-user.target", "is a .target unit"),
    ("getty@.service", "is a template"), ("x" * 300, "at most 255"),
    ("nginx\n", "not a valid unit name"), ("nginx.service\n", "not a valid unit name"),  # '$' would match
])
def test_invalid_units(given, why):
    with pytest.raises(ToolError, match=why.replace(".", r"\.").replace("(", r"\(")):
        check_unit(given)


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="systemd is running on this machine")
async def test_no_systemd_gives_a_clear_error(call):
    with pytest.raises(ToolError) as info:
        await call("host_restart_service", {"service": "nginx", "reason": "502s from the load balancer"})
    message = str(info.value)
    assert "systemd is not running on host 'local'" in message
    assert "/run/systemd/system does not exist" in message and "nothing was done" in message


async def test_bad_unit_is_refused_before_anything_runs(call):
    with pytest.raises(ToolError, match=r"not a valid unit name"):
        await call("host_restart_service", {"service": "nginx;reboot", "reason": "x"})


def test_no_validation_pattern_lets_a_trailing_newline_through():
    """A pattern ending in ``$`` also matches before a final newline; the name and id checks end in ``\\Z``."""
    from ongrid_host.bash_policy import _CMD_NAME
    from ongrid_host.probes import _HOST_RE
    from ongrid_host.proc_rules import _LIST, _NAMES

    from ongridd.marketplace.index import NAME_RE, SHA256_RE
    from ongridd.personas.prompt import _LOCALE_RE
    from ongridd.tools.spec import TOOL_NAME_RE

    for pattern, good in ((_CMD_NAME, "systemctl"), (_HOST_RE, "example.com"), (_LIST, "1,2"), (_NAMES, "root"),
                          (NAME_RE, "pkg"), (SHA256_RE, "a" * 64), (_LOCALE_RE, "fr"), (TOOL_NAME_RE, "host_bash")):
        assert pattern.match(good), pattern.pattern
        assert not pattern.match(good + "\n"), pattern.pattern
