"""Where alerts go: email through Django's mail backends, and a signed webhook (our JSON, or a
Slack-compatible payload). Each channel either delivers or raises `DeliveryFailed`.

The alert's id travels with every copy (the email's Message-ID, the webhook's
Idempotency-Key): delivery is at least once, so a receiver drops the repeats by it.
"""

from __future__ import annotations

import json
import smtplib
import time
from collections.abc import Callable
from typing import Any

import httpx
from django.conf import settings
from django.core.mail import EmailMessage

from ledger.jsonenc import ExactJSONEncoder
from ledger.models import AlertKind
from ledger.outbox import Leased
from ledger.webhooks import sign

# Per request; with the sender's time budget this keeps a run inside its django-q2 timeout.
WEBHOOK_TIMEOUT = 10.0
# Shorter: an agent's endpoint that hangs must not hold up the operators' alerts behind it.
CALLBACK_TIMEOUT = 5.0


class DeliveryFailed(Exception):
    pass


def message_id(alert: Leased) -> str:
    return f"<{alert.id}@effect-ledger.alerts>"


def subject(alert: Leased) -> str:
    summary = alert.payload.get("summary") or alert.key
    return f"[effect-ledger] {AlertKind(alert.kind).label}: {summary}"


def text(alert: Leased) -> str:
    """The body: the summary, a link where there is one, then every field as given."""
    lines = [subject(alert), ""]
    if link := alert.payload.get("link"):
        lines += [f"{settings.LEDGER_ALERT_LINK_BASE.rstrip('/')}{link}", ""]
    lines += [f"{name}: {value}" for name, value in sorted(alert.payload.items())]
    lines += ["", f"alert id: {alert.id}"]
    return "\n".join(lines)


def send_email(alert: Leased) -> None:
    message = EmailMessage(
        subject=subject(alert),
        body=text(alert),
        from_email=settings.LEDGER_ALERT_FROM,
        to=settings.LEDGER_ALERT_EMAILS,
        headers={"Message-ID": message_id(alert)},
    )
    try:
        message.send(fail_silently=False)
    except (OSError, smtplib.SMTPException) as exc:
        raise DeliveryFailed(f"email: {exc}") from exc


def webhook_body(alert: Leased) -> bytes:
    if settings.LEDGER_ALERT_WEBHOOK_FORMAT == "slack":
        document: dict[str, Any] = {"text": text(alert)}
    else:
        document = {
            "id": str(alert.id),
            "kind": alert.kind,
            "key": alert.key,
            "summary": subject(alert),
            "created_at": alert.created_at.isoformat(),
            "payload": alert.payload,
        }
    return json.dumps(document, cls=ExactJSONEncoder, sort_keys=True).encode()


def send_webhook(alert: Leased) -> None:
    """POST the alert, signed like the providers' callbacks we accept (ledger.webhooks):
    `X-Ledger-Signature: t=<unix seconds>,v1=<HMAC-SHA256 of "<t>." + body>`."""
    body = webhook_body(alert)
    headers = {"Content-Type": "application/json", "Idempotency-Key": str(alert.id)}
    if secret := settings.LEDGER_ALERT_WEBHOOK_SECRET:
        headers["X-Ledger-Signature"] = sign(secret, int(time.time()), body)
    try:
        response = httpx.post(
            settings.LEDGER_ALERT_WEBHOOK_URL,
            content=body,
            headers=headers,
            timeout=WEBHOOK_TIMEOUT,
        )
    except httpx.HTTPError as exc:
        raise DeliveryFailed(f"webhook: {type(exc).__name__}: {exc}") from exc
    if not response.is_success:
        raise DeliveryFailed(f"webhook: HTTP {response.status_code}")


def callback_body(alert: Leased) -> bytes:
    """What an agent's callback receives: which effect moved, from what to what; the effect
    itself is one GET away (with the agent's key), so no payload data travels here."""
    document = {k: v for k, v in alert.payload.items() if k not in ("callback_url", "summary")}
    document["id"] = str(alert.id)
    return json.dumps(document, cls=ExactJSONEncoder, sort_keys=True).encode()


def send_callback(alert: Leased) -> None:
    """POST a status change to the effect's callback_url (ledger.notifications), signed with
    LEDGER_CALLBACK_SECRET as the alert webhook is; the alert id is the Idempotency-Key."""
    body = callback_body(alert)
    headers = {
        "Content-Type": "application/json",
        "Idempotency-Key": str(alert.id),
        "X-Ledger-Signature": sign(settings.LEDGER_CALLBACK_SECRET, int(time.time()), body),
    }
    try:
        response = httpx.post(
            alert.payload["callback_url"],
            content=body,
            headers=headers,
            timeout=CALLBACK_TIMEOUT,
            follow_redirects=False,  # only the allow-listed host, never where it points us
        )
    except httpx.HTTPError as exc:
        raise DeliveryFailed(f"callback: {type(exc).__name__}: {exc}") from exc
    if not response.is_success:
        raise DeliveryFailed(f"callback: HTTP {response.status_code}")


def channels() -> dict[str, Callable[[Leased], None]]:
    """The configured channels, by name (the names stored in an alert's `delivered`)."""
    configured: dict[str, Callable[[Leased], None]] = {}
    if settings.LEDGER_ALERT_EMAILS:
        configured["email"] = send_email
    if settings.LEDGER_ALERT_WEBHOOK_URL:
        configured["webhook"] = send_webhook
    return configured
