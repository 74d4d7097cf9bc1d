"""Slack's request signing, for every request Slack sends: Events API callbacks here, and the
same check serves interactive components and slash commands, which Slack signs alike.

Slack sends `X-Slack-Request-Timestamp` (Unix seconds) and `X-Slack-Signature: v0=<hex>`,
the hex being HMAC-SHA256(signing secret, "v0:<timestamp>:<raw body>"). A request more than
five minutes from our clock is refused, and so is one no secret signed (two secrets while one
rotates; each is checked with `slack_sdk.signature.SignatureVerifier`). What identifies a
delivery is its signature: a replay presents it again, while Slack's own retry of an event
comes with a new timestamp and so a new signature.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence

TOLERANCE = 300  # seconds: Slack's five minutes
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")


class SignatureRefused(Exception):
    """The request is not one Slack signed with our secret, or not a fresh one."""


class _At:
    """The SDK verifier's clock, set to the moment the check was asked for."""

    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


def verify(
    headers: Mapping[str, str], body: bytes, secrets: Sequence[str], now: float | None = None
) -> str:
    """The request's signature (its identity), or `SignatureRefused`. `headers` are keyed in
    lower case."""
    from slack_sdk.signature import SignatureVerifier

    stamp = headers.get("x-slack-request-timestamp", "")
    signature = headers.get("x-slack-signature", "")
    # Checked before the SDK sees them: it would raise on a timestamp that is not a number,
    # and compare_digest raises on a signature that is not ASCII.
    if not _TIMESTAMP.fullmatch(stamp) or not _SIGNATURE.fullmatch(signature):
        raise SignatureRefused(
            "Missing or malformed X-Slack-Signature or X-Slack-Request-Timestamp header."
        )
    moment = time.time() if now is None else now
    if abs(moment - int(stamp)) > TOLERANCE:
        raise SignatureRefused("The request's timestamp is more than five minutes from ours.")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        raise SignatureRefused("The body is not UTF-8, so Slack did not sign it.") from None
    for secret in secrets:
        if secret and SignatureVerifier(secret, clock=_At(moment)).is_valid(body, stamp, signature):
            return signature
    raise SignatureRefused("The signature does not match.")
