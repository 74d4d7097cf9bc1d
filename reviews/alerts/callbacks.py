"""Posting an agent's callback: to the stored URL exactly as it was checked, at the address
that was checked.

The URL is checked again at send time against the allow-list as it is now
(`ledger.api.callbacktargets`): a row stored by an older version, or before the allow-list was
narrowed, is refused here rather than sent. The host is then resolved once, every address it
gave is checked, and the connection goes to the first of them, never to a second resolution a
rebinding name server could answer differently. The request keeps the URL's host: the Host
header is the URL's authority and, over TLS, the server name sent and verified is the host name,
so the receiver's certificate is checked as if the URL had been fetched normally.

No proxy from the environment is used: a proxy would resolve the host itself, and the address
checked would not be the one reached. Each send has a client of its own, so no pooled
connection made for one host name serves another that resolved to the same address.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import time
from functools import lru_cache

import httpx
from django.conf import settings

from ledger.api import callbacktargets
from ledger.api.notifications import allowed_targets
from ledger.api.webhooks import sign
from ledger.jsonenc import ExactJSONEncoder
from ledger.rules.outbox import Leased

# Shorter than the operators' webhook: an agent's endpoint that hangs must not hold up the
# operators' alerts behind it.
CALLBACK_TIMEOUT = 5.0


class CallbackFailed(Exception):
    """The callback was not delivered (refused here, unreachable, or not a 2xx)."""


def callback_body(alert: Leased) -> bytes:
    """What an agent's callback receives: which effect moved, from what to what; the effect
    itself is one GET away (with the agent's key), so no payload data travels here."""
    document = {k: v for k, v in alert.payload.items() if k not in ("callback_url", "summary")}
    document["id"] = str(alert.id)
    return json.dumps(document, cls=ExactJSONEncoder, sort_keys=True).encode()


def resolve(host: str, port: int) -> list[callbacktargets.Address]:
    """Every address `host` resolves to for a TCP connection, in the resolver's order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise CallbackFailed(f"callback: cannot resolve {host}: {exc}") from exc
    seen: list[callbacktargets.Address] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        # An IPv6 scope ("fe80::1%eth0") is not part of the address that is checked.
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if address not in seen:
            seen.append(address)
    return seen


def pinned(url: object) -> tuple[callbacktargets.Target, callbacktargets.Address]:
    """The checked URL and the checked address to connect to; CallbackFailed otherwise."""
    allowed = allowed_targets()
    try:
        target = callbacktargets.check(url if isinstance(url, str) else "", allowed)
        literal = target.literal
        resolved = [literal] if literal is not None else resolve(target.host, target.port)
        return target, callbacktargets.pick_address(target, resolved, allowed)
    except callbacktargets.CallbackRefused as exc:
        raise CallbackFailed(f"callback refused: {exc}") from None


@lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    # Built once: a context costs tens of milliseconds, a client per send costs nothing more.
    return httpx.create_ssl_context()


def pinned_request(
    client: httpx.Client,
    target: callbacktargets.Target,
    address: callbacktargets.Address,
    body: bytes,
    headers: dict[str, str],
) -> httpx.Request:
    """The POST to `address`, carrying the URL's own Host header, path and query, and (over
    TLS) its host name as the server name to send and verify."""
    url = httpx.URL(
        scheme=target.scheme,
        host=str(address),
        port=target.port,
        raw_path=target.path_query.encode("ascii"),
    )
    extensions = {}
    if target.scheme == "https" and target.literal is None:
        extensions["sni_hostname"] = target.host
    return client.build_request(
        "POST",
        url,
        content=body,
        headers={**headers, "Host": target.authority},
        extensions=extensions,
    )


def send_callback(alert: Leased) -> None:
    """POST a status change to the effect's callback_url (ledger.api.notifications), signed with
    LEDGER_CALLBACK_SECRET as the alert webhook is; the alert id is the Idempotency-Key."""
    target, address = pinned(alert.payload.get("callback_url"))
    body = callback_body(alert)
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": str(alert.id),
        "X-Ledger-Signature": sign(settings.LEDGER_CALLBACK_SECRET, int(time.time()), body),
    }
    try:
        # Redirects are not followed: only the allow-listed target, never where it points us.
        with httpx.Client(
            verify=_tls(), trust_env=False, follow_redirects=False, timeout=CALLBACK_TIMEOUT
        ) as client:
            response = client.send(pinned_request(client, target, address, body, headers))
    except httpx.HTTPError as exc:
        raise CallbackFailed(f"callback: {type(exc).__name__}: {exc}") from exc
    if not response.is_success:
        raise CallbackFailed(f"callback: HTTP {response.status_code}")
