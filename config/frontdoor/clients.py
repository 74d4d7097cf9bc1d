"""Whose request it is: the address the application counts sign-in failures by.

By default the client is the peer of the TCP connection, and whatever the client sent as
X-Forwarded-For is dropped: nobody can choose the address they are counted under. Behind a
load balancer every request's peer is the balancer, so all clients would share one address
(five failed sign-ins by anyone would lock everyone out of the pages). LEDGER_TRUSTED_PROXIES
names the balancers (addresses or networks, comma-separated); for a request whose peer is one
of them, the client is the right-most address of X-Forwarded-For that is not itself trusted,
which is the last one a trusted hop saw. A malformed entry stops the walk at the proxy: the
request is counted under the proxy's address, never under a name the client could choose.
"""

from __future__ import annotations

import ipaddress
import os

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_proxies(raw: str | None = None) -> tuple[Network, ...]:
    """LEDGER_TRUSTED_PROXIES parsed, or ValueError naming the entry that is not a network."""
    text = os.environ.get("LEDGER_TRUSTED_PROXIES", "") if raw is None else raw
    networks = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(
                f"LEDGER_TRUSTED_PROXIES: {entry!r} is not an address or network"
            ) from None
    return tuple(networks)


def _trusted(address: str, trusted: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    ip = getattr(ip, "ipv4_mapped", None) or ip
    return any(ip in network for network in trusted)


def client_address(peer: str, forwarded: list[bytes], trusted: tuple[Network, ...]) -> str:
    """The client's address for a request from `peer` carrying these X-Forwarded-For values."""
    if not _trusted(peer, trusted):
        return peer
    chain = [
        hop.strip() for value in forwarded for hop in value.decode("latin-1").split(",")
    ]
    for hop in reversed(chain):
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            return peer
        if not _trusted(hop, trusted):
            return hop
    return peer
