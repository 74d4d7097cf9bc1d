"""Where an agent's callback may go: the one parser of callback URLs, the allow-list, and the
check of the address a callback host resolves to.

A callback is a signed POST from inside the network to a URL an agent chose, so the URL is
held to a narrow grammar and checked on the exact string that is stored and later sent: only
printable ASCII of RFC 3986 (no space, no control character, no backslash, no quote), an
http(s) scheme, a host name or IP literal, an optional port, a path and a query; no
credentials, no fragment, no dot segments and no percent-encoded dot, slash or backslash (the
HTTP library would normalise the first, and a server may decode the others into a way out of
an allowed prefix). What passes is sent as written: the request's Host header is the URL's
authority and its target the URL's path and query, byte for byte.

The allow-list (`LEDGER_CALLBACK_ALLOW`) holds origins, `https://hooks.example.com:8443`
(scheme, host and port must all match; a missing port is the scheme's default), and URL
prefixes, `https://hooks.example.com/agents/` (the origin, and a path that starts with the
prefix's path on a segment boundary). Hosts and schemes compare case-insensitively, paths
exactly.

The allow-list names hosts, and a host's address may change under it (DNS rebinding), so the
sender resolves once per send, refuses link-local, metadata, unspecified and multicast
addresses unless that address is itself the host of an allow-list entry, and connects to the
address it checked.

No Django model is imported here: config/settings.py parses the allow-list at start-up with it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_PORTS = {"http": 80, "https": 443}
# RFC 3986 characters outside the host: unreserved, sub-delims, ":", "@", "/", "?" and "%".
# Everything else (space, controls, DEL, non-ASCII, `"<>\^`{|}` and "#") is refused outright.
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?%\[\]]*")
_PATH = re.compile(r"(?:/[A-Za-z0-9\-._~!$&'()*+,;=:@%]*)*")
_QUERY = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*")
_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
# Percent-encoded ".", "/" and "\": a server may decode them into "..", a new segment or one.
_ENCODED_TRICKS = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_AUTHORITY = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(?P<port>[0-9]{1,5}))?")

# Addresses a callback never reaches unless one is itself the host of an allow-list entry:
# link-local (where the cloud metadata services live), the metadata services elsewhere, the
# unspecified and broadcast addresses, and multicast.
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
        "168.63.129.16",  # Azure wire server
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_BROADCAST = ipaddress.ip_address("255.255.255.255")


class CallbackRefused(ValueError):
    """The URL or the address it resolves to may not receive a callback (a 422 at intent
    time, a failed attempt at send time)."""


@dataclass(frozen=True)
class Target:
    """A parsed callback URL (or allow-list entry): `host` is lower-cased, `port` filled in,
    `authority` and `path_query` are the URL's own text."""

    scheme: str
    host: str
    port: int
    authority: str
    path: str
    query: str | None

    @property
    def path_query(self) -> str:
        path = self.path or "/"
        return path if self.query is None else f"{path}?{self.query}"

    @property
    def literal(self) -> Address | None:
        try:
            return ipaddress.ip_address(self.host.strip("[]"))
        except ValueError:
            return None


def parse(value: str) -> Target:
    """The URL's parts, or CallbackRefused saying what is wrong. Nothing is normalised away."""
    if not isinstance(value, str) or not value:
        raise CallbackRefused("must be a non-empty string")
    bad = next((c for c in value if not _URL_CHARS.fullmatch(c)), None)
    if bad is not None:
        raise CallbackRefused(f"must not contain {bad!r} (only printable ASCII URL characters)")
    scheme, sep, rest = value.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in DEFAULT_PORTS:
        raise CallbackRefused("must be an http:// or https:// URL")
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, remainder = rest[:end], rest[end:]
    if "@" in authority:
        raise CallbackRefused("must not carry credentials")
    host, port = _authority(authority, scheme)
    path, qsep, query = remainder.partition("?")
    _check_path(path)
    if qsep and (not _QUERY.fullmatch(query) or _PERCENT.search(query)):
        raise CallbackRefused("has a malformed query")
    return Target(scheme, host, port, authority, path, query if qsep else None)


def _authority(authority: str, scheme: str) -> tuple[str, int]:
    match = _AUTHORITY.fullmatch(authority)
    if not match:
        raise CallbackRefused("must name a host, and a port only as digits")
    host = match["host"].lower()
    port = int(match["port"]) if match["port"] else DEFAULT_PORTS[scheme]
    if not 0 < port < 65536:
        raise CallbackRefused("must name a port from 1 to 65535")
    if host.startswith("["):
        try:
            address = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise CallbackRefused("has a malformed IPv6 address") from None
        return f"[{address.compressed}]", port
    labels = host.split(".")
    if labels[-1].isdigit() or labels[-1].startswith("0x"):
        # Numeric hosts only as a plain dotted quad: "2130706433" or "0x7f.1" would resolve
        # to an address the allow-list never named.
        try:
            address = ipaddress.IPv4Address(host)
        except ValueError:
            raise CallbackRefused("has a numeric host that is not a dotted-quad IPv4") from None
        return str(address), port
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise CallbackRefused("has a malformed host name")
    return host, port


def _check_path(path: str) -> None:
    if not _PATH.fullmatch(path):
        raise CallbackRefused("has a malformed path")
    if _PERCENT.search(path) or _ENCODED_TRICKS.search(path):
        raise CallbackRefused("must not percent-encode '.', '/' or '\\' in its path")
    if any(segment in (".", "..") for segment in path.split("/")):
        raise CallbackRefused("must not contain '.' or '..' path segments")


# --- The allow-list ----------------------------------------------------------------------------


def parse_entry(entry: str) -> Target:
    """One allow-list entry: an origin (no path) or a URL prefix (a path, no query)."""
    try:
        target = parse(entry)
    except CallbackRefused as exc:
        raise CallbackRefused(f"{entry!r} is not an origin or URL prefix: {exc}") from None
    if target.query is not None:
        raise CallbackRefused(f"{entry!r}: an allow-list entry has no query")
    return target


def allow_list(entries: Iterable[str]) -> tuple[Target, ...]:
    return tuple(parse_entry(entry) for entry in entries)


def legacy_entries(hosts: Iterable[str]) -> list[str]:
    """What a bare host of the old `LEDGER_CALLBACK_HOSTS` now means: that host on the default
    port of each scheme, any path; no longer any port."""
    return [f"{scheme}://{host.strip().lower()}" for host in hosts for scheme in ("https", "http")]


def _path_within(path: str, prefix: str) -> bool:
    path, prefix = path or "/", prefix or "/"
    if path == prefix or prefix.endswith("/"):
        return path.startswith(prefix)
    return path.startswith(prefix + "/")


def permitted(target: Target, allowed: Iterable[Target]) -> bool:
    return any(
        (target.scheme, target.host, target.port) == (entry.scheme, entry.host, entry.port)
        and _path_within(target.path, entry.path)
        for entry in allowed
    )


def check(value: str, allowed: Iterable[Target]) -> Target:
    """The parsed URL if the allow-list lets it receive callbacks; CallbackRefused otherwise."""
    target = parse(value)
    if not permitted(target, allowed):
        raise CallbackRefused(
            f"{target.scheme}://{target.authority}{target.path} is not under an allowed "
            "callback origin or prefix"
        )
    return target


# --- Resolved addresses ------------------------------------------------------------------------


def _embedded_v4(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def forbidden(address: Address) -> str:
    """Why a callback must not be sent to this address ("" when it may)."""
    address = _embedded_v4(address)
    if address in _METADATA:
        return "a cloud metadata address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_unspecified or address == _BROADCAST:
        return "an unspecified or broadcast address"
    if address.is_multicast:
        return "a multicast address"
    return ""


def pick_address(target: Target, resolved: Iterable[Address], allowed: Iterable[Target]) -> Address:
    """The address to connect to, among those `target.host` resolved to: refused when any of
    them is forbidden and not itself listed (a name that may answer with the metadata address
    is not trusted with the others either)."""
    listed = {entry.literal for entry in allowed if entry.literal is not None}
    addresses = list(resolved)
    if not addresses:
        raise CallbackRefused(f"{target.host} resolved to no address")
    for address in addresses:
        why = forbidden(address)
        if why and address not in listed and _embedded_v4(address) not in listed:
            raise CallbackRefused(f"{target.host} resolved to {address}, {why}, not listed")
    return addresses[0]
