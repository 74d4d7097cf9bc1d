"""Where alerts go: email through Django's mail backends, and a signed webhook (our JSON, or a
Slack-compatible payload). Each channel either delivers or raises `DeliveryFailed` (and the
sender treats any other exception the same way, for that alert and that channel only).

The alert's id travels with every copy (the email's Message-ID, the webhook's
Idempotency-Key): delivery is at least once, so a receiver drops the repeats by it.

Much of an alert is text an agent chose (run ids, effect keys, tool names, reasons), and it
reaches people from the ledger's own sender. Every line built from it is one line
(`ledger.rules.plaintext.one_line`: a line break in a run id can neither end the email's
subject header nor forge a line of the body), and in Slack's format every such value is escaped as
Slack asks (`&`, `<`, `>`), so `<!channel>` or `<https://evil.example|Re-login>` arrive as the
text they are, not as a mention or a disguised link; the one link is the ledger's own.
"""

from __future__ import annotations

import json
import smtplib
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
from django.conf import settings
from django.core.mail import EmailMessage

from ledger.api.webhooks import sign
from ledger.jsonenc import ExactJSONEncoder
from ledger.models import AlertKind
from ledger.rules.outbox import Leased
from ledger.rules.plaintext import one_line
from reviews.remote import emaillinks
from reviews.remote.slack import alerting as slack_alerting

# Per request; with the sender's time budget this keeps a run inside its django-q2 timeout.
WEBHOOK_TIMEOUT = 10.0


class DeliveryFailed(Exception):
    pass


def message_id(alert: Leased) -> str:
    return f"<{alert.id}@effect-ledger.alerts>"


def subject(alert: Leased) -> str:
    summary = alert.payload.get("summary") or alert.key
    return one_line(f"[effect-ledger] {AlertKind(alert.kind).label}: {summary}")


def _link(alert: Leased) -> str:
    link = alert.payload.get("link")
    return f"{settings.LEDGER_ALERT_LINK_BASE.rstrip('/')}{one_line(link)}" if link else ""


def text(alert: Leased) -> str:
    """The body: the summary, a link where there is one, then every field as given (each on
    its one line)."""
    lines = [subject(alert), ""]
    if link := _link(alert):
        lines += [link, ""]
    # A link per decision offered, signed and used once (`reviews.remote.emaillinks`).
    lines += emaillinks.lines_for(alert.payload)
    lines += _fields(alert)
    lines += ["", f"alert id: {alert.id}"]
    return "\n".join(lines)


def _fields(alert: Leased) -> list[str]:
    return [f"{one_line(name)}: {one_line(value)}" for name, value in sorted(alert.payload.items())]


def slack_escape(value: str) -> str:
    """Slack's own escaping for message text: only these three characters are control
    characters of its markup (mentions, channel and user links, `<url|label>` links)."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(alert: Leased) -> str:
    """The Slack message: as the email's body, every line escaped, and the ledger's link as
    Slack's explicit link markup (the one `<…>` in the message)."""
    lines = [slack_escape(subject(alert)), ""]
    if link := _link(alert):
        # The ledger's own address and path; anything that could end the markup early is
        # percent-encoded, so a strange value in it cannot turn into markup either.
        target = quote(link, safe=":/?=%#-._~+,;@!$&'()*")
        lines += [f"<{slack_escape(target)}|Open in Effect Ledger>", ""]
    lines += [slack_escape(line) for line in _fields(alert)]
    lines += ["", f"alert id: {alert.id}"]
    return "\n".join(lines)


def send_email(alert: Leased, to: list[str] | None = None) -> None:
    message = EmailMessage(
        subject=subject(alert),
        body=text(alert),
        from_email=settings.LEDGER_ALERT_FROM,
        to=settings.LEDGER_ALERT_EMAILS if to is None else to,
        headers={"Message-ID": message_id(alert)},
    )
    try:
        message.send(fail_silently=False)
    except (OSError, smtplib.SMTPException) as exc:
        raise DeliveryFailed(f"email: {exc}") from exc


def webhook_body(alert: Leased, fmt: str | None = None) -> bytes:
    if (fmt or settings.LEDGER_ALERT_WEBHOOK_FORMAT) == "slack":
        document: dict[str, Any] = {"text": slack_text(alert)}
        # With Slack's interactivity configured, the decisions offered as buttons (ADR 0020);
        # the text stays, as the notification's and the fallback's.
        decisions = slack_alerting.blocks_for(alert, document["text"], _link(alert))
        if decisions is not None:
            document["blocks"] = decisions
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


def send_webhook(alert: Leased, url: str | None = None, fmt: str | None = None) -> None:
    """POST the alert, signed like the providers' callbacks we accept (ledger.api.webhooks):
    `X-Ledger-Signature: t=<unix seconds>,v1=<HMAC-SHA256 of "<t>." + body>`. A team's
    channel (`reviews.alerts.routing`) gives its own URL and format; the key and the signature
    are the same."""
    body = webhook_body(alert, fmt)
    headers = {"Content-Type": "application/json", "Idempotency-Key": str(alert.id)}
    if secret := settings.LEDGER_ALERT_WEBHOOK_SECRET:
        headers["X-Ledger-Signature"] = sign(secret, int(time.time()), body)
    try:
        response = httpx.post(
            url or settings.LEDGER_ALERT_WEBHOOK_URL,
            content=body,
            headers=headers,
            timeout=WEBHOOK_TIMEOUT,
        )
    except httpx.HTTPError as exc:
        raise DeliveryFailed(f"webhook: {type(exc).__name__}: {exc}") from exc
    if not response.is_success:
        raise DeliveryFailed(f"webhook: HTTP {response.status_code}")


def channels() -> dict[str, Callable[[Leased], None]]:
    """The configured channels, by name (the names stored in an alert's `delivered`)."""
    configured: dict[str, Callable[[Leased], None]] = {}
    if settings.LEDGER_ALERT_EMAILS:
        configured["email"] = send_email
    if settings.LEDGER_ALERT_WEBHOOK_URL:
        configured["webhook"] = send_webhook
    return configured
