"""SendGrid's Signed Event Webhook as a callback scheme (`POST /api/v1/callbacks/sendgrid`).

SendGrid signs each POST with ECDSA (P-256, SHA-256) over the timestamp followed by the raw
body, and sends the signature (base64, DER) in `X-Twilio-Email-Event-Webhook-Signature` and
the timestamp in `X-Twilio-Email-Event-Webhook-Timestamp`. The verification key SendGrid shows
for the webhook (a base64 public key) is the provider's "secret" in LEDGER_WEBHOOK_SECRETS
(`sendgrid:<key>`; two while one is replaced). The check is the `sendgrid` library's own
(`sendgrid.helpers.eventwebhook.EventWebhook`, on `cryptography`).

SendGrid documents no freshness window; the ledger takes a timestamp within five minutes of
its clock, either way. A delivery is known by a digest of its timestamp and body, not by its
signature: an ECDSA signature can be re-written into another valid one for the same message,
so a replay with a re-written signature is still the same delivery, refused the second time.

The body is a JSON array of events. An event that carries our custom argument `ledger_key`
settles that effect: processed, deferred, delivered and bounce say SendGrid took the message
and sent it (or will), so the effect is confirmed; dropped says SendGrid never sent it, so it
failed. Engagement events (open, click, …) and events without our key settle nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time

from reconcilers.providers.callbacks import CallbackRefused, CallbackRequest, Settlement

log = logging.getLogger(__name__)

SIGNATURE = "x-twilio-email-event-webhook-signature"
TIMESTAMP = "x-twilio-email-event-webhook-timestamp"
TOLERANCE = 300  # seconds either side of the ledger's clock
SETTLES = {
    "processed": "confirmed",
    "deferred": "confirmed",
    "delivered": "confirmed",
    "bounce": "confirmed",
    "dropped": "failed",
}
# What of an event is kept as the provider's record (never the recipient's address).
KEPT = ("event", "sg_message_id", "sg_event_id", "timestamp", "reason", "type", "ledger_effect")


def request_id(msg_id: str) -> str:
    """The request's `X-Message-Id` within an event's `sg_message_id`."""
    return msg_id.split(".", 1)[0]


class EventWebhookScheme:
    name = "sendgrid"

    def verify(self, request: CallbackRequest) -> str:
        signature = request.headers.get(SIGNATURE, "")
        stamp = request.headers.get(TIMESTAMP, "")
        if not signature or not stamp:
            raise CallbackRefused("Missing SendGrid's signature or timestamp header.")
        if not stamp.isdecimal() or len(stamp) > 12:
            raise CallbackRefused("SendGrid's timestamp is not a Unix time.")
        if abs(time.time() - int(stamp)) > TOLERANCE:
            raise CallbackRefused("The signature's timestamp is outside the accepted window.")
        try:
            payload = request.body.decode("utf-8")
        except UnicodeDecodeError:
            raise CallbackRefused("The signed body is not UTF-8.") from None
        if not any(_holds(key, payload, signature, stamp) for key in request.secrets):
            raise CallbackRefused("The signature does not match.")
        return hashlib.sha256(stamp.encode() + b"." + request.body).hexdigest()

    def settlements(self, body: bytes) -> list[Settlement]:
        events = json.loads(body)
        if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
            raise ValueError("SendGrid's events come as a JSON array of objects")
        said: list[Settlement] = []
        seen: set[tuple[str, str, str]] = set()
        for event in events:
            key, status = event.get("ledger_key"), SETTLES.get(str(event.get("event")))
            if not isinstance(key, str) or not key or status is None:
                continue
            message = event.get("sg_message_id")
            ref = request_id(message) if isinstance(message, str) else ""
            if (key, status, ref) in seen:
                continue  # processed and delivered of one message say the same thing
            seen.add((key, status, ref))
            record = {name: event[name] for name in KEPT if name in event}
            said.append(Settlement(key, status, provider_ref=ref, response=record))
        return said


def _holds(public_key: str, payload: str, signature: str, stamp: str) -> bool:
    """Does the signature hold under this verification key (the library's own check)?"""
    from sendgrid.helpers.eventwebhook import EventWebhook

    try:
        return bool(EventWebhook(public_key).verify_signature(payload, signature, stamp))
    except (ValueError, TypeError) as exc:
        # A key that is not a P-256 public key, or a signature that is not base64.
        log.info("SendGrid signature check failed: %s", type(exc).__name__)
        return False


SCHEME = EventWebhookScheme()
