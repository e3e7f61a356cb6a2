"""The plugin's own settings (``plugins.settings.ongrid_host`` in the config).

Keys (all optional)::

    ssh_binary: ssh                     # the OpenSSH client to run
    ssh_config_file: null               # ssh -F FILE ("none": read no ssh config at all)
    known_hosts_file: null              # UserKnownHostsFile for every remote host
    strict_host_key_checking: "yes"     # yes | accept-new | no
    connect_timeout_s: 5                # ssh ConnectTimeout, 1..60
    ca_file: null                       # extra CA bundle (PEM) trusted by host_probe_http
    probe_targets: []                   # names, *.domains and networks the probes may reach besides
                                        # localhost, the inventory and private addresses (egress.py)

Unknown keys and wrong types are refused with the key named, so a typo is
not silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ongridd.plugins.api import ConfigError

_CHECKING = ("yes", "accept-new", "no")


@attrs.frozen(kw_only=True)
class HostSettings:
    """Validated settings; see the module docstring for the keys."""

    ssh_binary: str = "ssh"
    ssh_config_file: str | None = None
    known_hosts_file: str | None = None
    strict_host_key_checking: str = "yes"
    connect_timeout_s: int = 5
    ca_file: str | None = None
    probe_targets: tuple[str, ...] = ()


def parse_settings(raw: Mapping[str, Any] | None, *, where: str = "plugins.settings.ongrid_host") -> HostSettings:
    """Validate the plugin settings mapping.  Raises ConfigError naming the key."""
    raw = dict(raw or {})
    fields = {f.name: f for f in attrs.fields(HostSettings)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)} @ {where}; known: {', '.join(fields)}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None and key in ("known_hosts_file", "ca_file", "ssh_config_file", "probe_targets"):
            continue
        if key == "probe_targets":
            from ongrid_host.egress import ProbeTargets

            ProbeTargets.build(value)  # ConfigError naming a bad entry
            out[key] = tuple(value)
            continue
        if key == "connect_timeout_s":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 60:
                raise ConfigError(f"expected an int 1..60, got {value!r} @ {where}.{key}")
        elif not isinstance(value, str) or not value:
            raise ConfigError(f"expected a non-empty string, got {value!r} @ {where}.{key}")
        if key == "strict_host_key_checking" and value not in _CHECKING:
            raise ConfigError(f"expected one of {', '.join(_CHECKING)}, got {value!r} @ {where}.{key}")
        out[key] = value
    return HostSettings(**out)
