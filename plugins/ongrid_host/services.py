"""``host_restart_service``: systemctl restart, then report the unit's state."""

from __future__ import annotations

import re
from typing import Any

import trio

from ongrid_host.target import Target
from ongridd.plugins.api import ToolError

#: systemd unit name characters (systemd.unit(5)); templates ``foo@bar``
UNIT_RE = re.compile(r"^[A-Za-z0-9_.:\\-]+(@[A-Za-z0-9_.:\\-]*)?(\.service)?\Z")
_OTHER_UNIT_TYPES = frozenset({"socket", "target", "timer", "mount", "automount", "swap", "path", "slice",
                               "scope", "device"})
SYSTEMD_MARKER = "/run/systemd/system"
RESTART_TIMEOUT_S = 60.0
_QUERY_TIMEOUT_S = 15.0


def check_unit(service: str) -> str:
    """The unit name to restart (``nginx`` → ``nginx.service``).

    Only service units are accepted.  Raises ToolError naming the rule for
    an empty name, a leading '-', a slash, whitespace, another unit type or
    any character systemd does not allow in unit names.
    """
    if not isinstance(service, str) or not service:
        raise ToolError("service: give a unit name such as 'nginx' or 'nginx.service'")
    if len(service) > 255:
        raise ToolError("service: unit names are at most 255 characters")
    if service.startswith("-"):
        raise ToolError(f"service: {service!r} starts with '-' (it would be read as an option)")
    suffix = service.rsplit(".", 1)[-1] if "." in service else ""
    if suffix in _OTHER_UNIT_TYPES:
        raise ToolError(f"service: {service!r} is a .{suffix} unit; only .service units can be restarted here")
    if not UNIT_RE.match(service):
        raise ToolError(f"service: {service!r} is not a valid unit name (letters, digits, ':', '_', '.', "
                        f"'\\', '-', one '@' for templates)")
    if service.endswith(("@", "@.service")):
        raise ToolError(f"service: {service!r} is a template; name an instance such as 'getty@tty1'")
    return service if service.endswith(".service") else service + ".service"


async def _systemd_running(target: Target) -> bool:
    if target.is_local:
        return await trio.Path(SYSTEMD_MARKER).is_dir()
    result = await target.run(["test", "-d", SYSTEMD_MARKER], timeout_s=_QUERY_TIMEOUT_S)
    return result.exit_code == 0


async def restart_service(target: Target, service: str) -> dict[str, Any]:
    """Restart ``service`` on ``target`` and report its state afterwards.

    Result: ``{host, unit, restarted, active_state, active_enter_timestamp,
    duration_ms}``.  Raises ToolError when systemd is not running on the host
    (no /run/systemd/system), when ``systemctl restart`` fails or times out
    (with its message) — never a pretend success.  Cancellation kills
    systemctl (the restart job may still complete in systemd).
    """
    unit = check_unit(service)
    if not await _systemd_running(target):
        raise ToolError(f"systemd is not running on host {target.name!r} ({SYSTEMD_MARKER} does not exist), "
                        f"so {unit} cannot be restarted with systemctl; nothing was done")
    result = await target.run(["systemctl", "restart", "--", unit], timeout_s=RESTART_TIMEOUT_S)
    if result.timed_out:
        raise ToolError(f"systemctl restart {unit} on host {target.name!r} did not finish within "
                        f"{RESTART_TIMEOUT_S:g} s; check 'systemctl status {unit}'")
    if result.exit_code != 0:
        err = result.text("stderr").strip()[-800:] or "no message"
        raise ToolError(f"systemctl restart {unit} on host {target.name!r} failed (exit {result.exit_code}): {err}")
    active = await target.run(["systemctl", "is-active", "--", unit], timeout_s=_QUERY_TIMEOUT_S)
    since = await target.run(["systemctl", "show", "-p", "ActiveEnterTimestamp", "--value", "--", unit],
                             timeout_s=_QUERY_TIMEOUT_S)
    return {
        "host": target.name,
        "unit": unit,
        "restarted": True,
        "active_state": active.text().strip() or None,
        "active_enter_timestamp": since.text().strip() or None,
        "duration_ms": result.duration_ms,
    }
