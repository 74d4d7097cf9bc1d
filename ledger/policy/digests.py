"""Keyed digests: idempotency keys, request hashes, redaction tokens.

All are HMAC-SHA256 under the server's versioned keys (`LEDGER_KEYS`), never plain hashes: a
plain SHA-256 of a request that holds a card number could be brute-forced.

Rotation: adding a version (`1:old,2:new`) makes it current for what is made from then on.
- Idempotency keys use the lowest version, so they never change (version 1 must stay).
- Request hashes and value digests name the version they were made under (`v1:…`) and are
  checked under it, so repeats recorded before the rotation are still recognised.
- Redaction tokens carry no version: new ones differ from old ones for the same value, and an
  old token is checked against a value under every version in the ring (`token_matches`).
A version may be removed only once nothing stored names it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

from django.conf import settings

from ledger import jsonenc


def _ring() -> dict[int, bytes]:
    return settings.LEDGER_KEYS


def current_version() -> int:
    return max(_ring())


def _mac(key: bytes, purpose: str, message: str) -> bytes:
    return hmac.new(key, f"{purpose}\x00{message}".encode(), hashlib.sha256).digest()


def idempotency_key(agent_id: int, effect_key: str) -> str:
    """The same logical operation always gets the same key, also after a restore from backup
    and after key rotation (it uses the first key of the ring). It holds no payload data."""
    key = _ring()[min(_ring())]
    raw = _mac(key, "idempotency", f"{agent_id}\x00{effect_key}")[:20]
    return "el_" + base64.b32encode(raw).decode().lower().rstrip("=")


def business_key(tool: str, values: list[Any]) -> str:
    """The effect key of a tool's business key: the values of its `key_fields`, canonical (so
    25 and 25.0 are one value), under the first key of the ring like idempotency keys, so that
    it never changes. It is keyed, never a plain hash: the values may be card numbers or other
    guessable data."""
    key = _ring()[min(_ring())]
    canonical = jsonenc.dumps({"tool": tool, "values": values}, canonical=True)
    raw = _mac(key, "business-key", canonical)[:20]
    return f"key:{tool}:" + base64.b32encode(raw).decode().lower().rstrip("=")


def request_key(tool: str, request: Any) -> str:
    """The request's part of a key that includes it (`key_includes_request`): the tool and the
    canonical request under the first key of the ring, so that it never changes; keyed, never a
    plain hash, and short (50 bits: it tells apart the calls of one step of one run)."""
    key = _ring()[min(_ring())]
    canonical = jsonenc.dumps({"tool": tool, "request": request}, canonical=True)
    raw = _mac(key, "request-key", canonical)[:10]
    return "r" + base64.b32encode(raw).decode().lower().rstrip("=")


def request_hash(tool: str, target: str, request: Any, *, version: int | None = None) -> str:
    """HMAC of the canonical raw request (before redaction), tagged with the key version."""
    version = current_version() if version is None else version
    canonical = jsonenc.dumps({"tool": tool, "target": target, "request": request}, canonical=True)
    return f"v{version}:" + _mac(_ring()[version], "request", canonical).hex()


def same_request(stored_hash: str, tool: str, target: str, request: Any) -> bool:
    tag, _, _ = stored_hash.partition(":")
    try:
        version = int(tag.removeprefix("v"))
    except ValueError:
        return False
    if version not in _ring():
        return False
    return hmac.compare_digest(stored_hash, request_hash(tool, target, request, version=version))


def value_digest(value: Any, *, version: int | None = None) -> str:
    """Keyed digest of any JSON value (outcome repeats), tagged with the key version."""
    version = current_version() if version is None else version
    canonical = jsonenc.dumps(value, canonical=True)
    return f"v{version}:" + _mac(_ring()[version], "value", canonical).hex()


def same_value(stored_digest: str, value: Any) -> bool:
    """Is `stored_digest` the digest of `value`, under the version it names? One stored before
    digests named their version (bare hex) is tried under every version in the ring."""
    tag, sep, _ = stored_digest.partition(":")
    if not sep:
        return any(
            hmac.compare_digest(
                stored_digest.encode(), value_digest(value, version=v).split(":", 1)[1].encode()
            )
            for v in _ring()
        )
    try:
        version = int(tag.removeprefix("v"))
    except ValueError:
        return False
    return version in _ring() and hmac.compare_digest(
        stored_digest.encode(), value_digest(value, version=version).encode()
    )


def redaction_token(kind: str, value: str, *, version: int | None = None) -> str:
    """Equal values map to equal tokens under one key version, so redacted records can still be
    compared; after a rotation, through `token_matches`."""
    key = _ring()[current_version() if version is None else version]
    mac = _mac(key, "redact", value).hex()[:24]
    return f"[{kind}:{mac}]"


def token_matches(token: str, kind: str, value: str) -> bool:
    """Was `token` made from `value`, under any version of the ring?"""
    return any(
        hmac.compare_digest(token.encode(), redaction_token(kind, value, version=v).encode())
        for v in _ring()
    )


def content_digest(value: Any) -> str:
    """Unkeyed SHA-256 of already-redacted content (event data)."""
    return hashlib.sha256(jsonenc.dumps(value, canonical=True).encode()).hexdigest()


def lease_digest(token: str) -> str:
    """Names a lease token in the event log without storing it. Unkeyed: a token is 192 random
    bits, so its digest cannot be reversed, and it must match across key rotations."""
    return hashlib.sha256(f"lease:{token}".encode()).hexdigest()[:32]
