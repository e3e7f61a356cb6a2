"""Where the network probes may reach: an allowlist of names and networks.

``host_probe_http``, ``host_probe_tcp`` and ``host_probe_dns`` run without
review (they change nothing), so whatever a model puts in a URL, a host name
or a DNS name leaves this host: a model steered by text it read (a log line,
a file, a web page) could otherwise carry data out in a name it looks up
(``<data>.attacker.example``) or a URL it requests.  The name is checked
*before* it is resolved (resolving it is what sends it out), an address
literal before it is connected to.

``plugins.settings.ongrid_host.probe_targets`` lists what may be reached:

- a host name (``api.example.com``, matched whole, any case, a trailing dot
  ignored) or every name under a domain (``*.example.com``: not the domain
  itself);
- an address or a network (``203.0.113.7``, ``198.51.100.0/24``, ``2001:db8::/32``).

Always allowed: ``localhost``, the inventory's host names and the names in
their ``address`` fields, and addresses in loopback and private networks
(``127.0.0.0/8``, ``::1``, ``10.0.0.0/8``, ``172.16.0.0/12``,
``192.168.0.0/16``, ``fc00::/7``).  A name that resolves to a link-local
address (``169.254.0.0/16`` — cloud metadata services — or ``fe80::/10``)
is refused unless that network is listed.  A reverse (PTR) lookup of an
address needs the address to be allowed.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ongridd.plugins.api import ConfigError, ToolError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: reachable without being listed: this host and the private networks an ops team's services live in
DEFAULT_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"))
#: refused after resolution unless listed: cloud metadata services and other link-local services
LINK_LOCAL = tuple(ipaddress.ip_network(n) for n in ("169.254.0.0/16", "fe80::/10"))
MAX_TARGETS = 1000
_SETTING = "plugins.settings.ongrid_host.probe_targets"


def _name(value: str) -> str:
    return value.strip().rstrip(".").lower()


#: a host name as it may be looked up: dot-separated labels of letters, digits, ``-`` and ``_``
_HOST_NAME = re.compile(r"[A-Za-z0-9_-]{1,63}(?:\.[A-Za-z0-9_-]{1,63})*\.?\Z")


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``value`` as an address, the whole of it (an IPv6 zone ``%eth0`` included), else None."""
    try:
        return ipaddress.ip_address(value.strip().removeprefix("[").removesuffix("]"))
    except ValueError:
        return None


@attrs.frozen
class ProbeTargets:
    """The names (``names``: whole, lower case; ``domains``: ``.example.com``
    for ``*.example.com``) and networks probes may reach; ``listed``: the
    networks the operator named (a link-local one there is allowed)."""

    names: frozenset[str]
    domains: tuple[str, ...]
    networks: tuple[Network, ...]
    listed: tuple[Network, ...]

    @classmethod
    def build(cls, targets: Sequence[Any] | None, inventory_names: Iterable[str] = ()) -> ProbeTargets:
        """From the setting's list (None: unset) and the inventory's host names
        and addresses.  Raises ConfigError naming a bad entry."""
        names = {"localhost"}
        inventory: list[Network] = []  # the inventory's address literals, reachable as listed
        for entry in inventory_names:
            address = _address(entry) if entry else None
            if address is not None:  # an IPv4-mapped one as the IPv4 address it is (allows_address maps too)
                inventory.append(ipaddress.ip_network(getattr(address, "ipv4_mapped", None) or address))
            elif entry:
                names.add(_name(entry))
        domains: list[str] = []
        listed: list[Network] = []
        if targets is not None and (not isinstance(targets, list) or len(targets) > MAX_TARGETS):
            raise ConfigError(f"expected a list of at most {MAX_TARGETS} names or networks @ {_SETTING}")
        for i, entry in enumerate(targets or ()):
            where = f"{_SETTING}[{i}]"
            if not isinstance(entry, str) or not entry.strip() or len(entry) > 253:
                raise ConfigError(f"expected a host name, '*.domain' or a network, got {entry!r} @ {where}")
            text = entry.strip()
            if "/" in text or _address(text) is not None:
                try:
                    listed.append(ipaddress.ip_network(text, strict=False))
                except ValueError:
                    raise ConfigError(f"{entry!r} is not an address or a network @ {where}") from None
                continue
            wildcard = text.startswith("*.")
            label = _name(text[2:] if wildcard else text)
            if not label or any(not part or len(part) > 63 or not all(c.isalnum() or c in "-_" for c in part)
                                for part in label.split(".")):
                raise ConfigError(f"{entry!r} is not a host name or '*.domain' @ {where}")
            if wildcard:
                domains.append("." + label)
            else:
                names.add(label)
        return cls(names=frozenset(names), domains=tuple(domains),
                   networks=DEFAULT_NETWORKS + tuple(inventory) + tuple(listed), listed=tuple(listed))

    def _refuse(self, what: str, field: str) -> ToolError:
        return ToolError(f"{field}: {what} is not a probe target, so nothing was sent to it. Probes reach "
                         "localhost, the inventory's hosts, loopback and private addresses, and what an "
                         f"operator lists in {_SETTING} (e.g. 'api.example.com', '*.example.com', "
                         "'203.0.113.0/24')")

    def allows_name(self, name: str) -> bool:
        n = _name(name)
        return n in self.names or any(n.endswith(d) for d in self.domains)

    def allows_address(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:169.254.169.254 is that IPv4 address
        address = mapped or address
        return any(address in net for net in self.networks if net.version == address.version)

    def check_host(self, host: str, field: str) -> None:
        """Before anything is sent: a name must be listed, an address allowed.  Raises ToolError."""
        address = _address(host)
        if "%" in host:  # a zone is text that a lookup of the whole would carry out (::1%<data>.example)
            raise self._refuse(f"{host!r} (an address with a zone)", field)
        if address is not None:
            if not self.allows_address(address):
                raise self._refuse(f"address {host!r}", field)
        elif not (len(host) <= 253 and _HOST_NAME.match(host) and self.allows_name(host)):
            raise self._refuse(f"host {host!r}", field)

    def check_resolved(self, host: str, address: str, field: str) -> None:
        """After an allowed name resolved: a link-local address (a metadata
        service) only when its network is listed.  Raises ToolError."""
        ip = _address(address)
        if ip is None or _address(host) is not None:
            return
        ip = getattr(ip, "ipv4_mapped", None) or ip
        if any(ip in net for net in LINK_LOCAL if net.version == ip.version) and not any(
                ip in net for net in self.listed if net.version == ip.version):
            raise self._refuse(f"host {host!r} (it resolves to the link-local address {address})", field)
