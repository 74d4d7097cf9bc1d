"""What the crash test sends to the fake SendGrid, through the official `sendgrid` library: one
email per claimed effect, carrying the effect's identity as custom arguments (`ledger_key`,
`ledger_effect`), since SendGrid keeps no idempotency keys.

`send` answers with the outcome the worker reports: confirmed with the request's
`X-Message-Id` on a 202, failed on a refusal SendGrid documents as final (a 4xx but 429), and
unknown for everything else (a lost answer, a timeout, a 5xx, a 429 after the body left).
It speaks only HTTP and never imports Django.
"""

from __future__ import annotations

import http.client
import os
from typing import Any

import httpx

API_KEY_ENV = "SENDGRID_API_KEY"
API_KEY = "SG.fake-sendgrid-key"  # the fake's default key
TIMEOUT = 2.0  # seconds: under the tool's call_timeout
ENV = {API_KEY_ENV: API_KEY}  # the ledger's lookups read the key from here

# The crash test's tool for this provider, as a tools.toml table.
TOOL: dict[str, Any] = {
    "preset": "lookup",
    "description": "Send an email through SendGrid (no idempotency keys; found by custom args)",
    "reconciler": "sendgrid",
    "reconciler_config": {"base_url": "{provider_url}", "api_key_env": API_KEY_ENV},
    "webhook_provider": "sendgrid",
    "call_timeout": "2s",
}


def request_for(workflow: dict[str, Any]) -> dict[str, Any]:
    """The email a crash-test workflow sends."""
    return {
        "to": f"{workflow['account']}@example.com",
        "subject": f"Receipt {workflow['run_id']}",
        "text": "Thank you.",
    }


def fake_args(ledger_url: str) -> tuple[str, ...]:
    """The fake for a crash test: its signed events reach the ledger's callback door 3 s after
    each send, and its Email Activity shows nothing for ten minutes (SendGrid's is eventual),
    so what was sent is settled by the events and what was not is left to a person."""
    door = f"{ledger_url.rstrip('/')}/api/v1/callbacks/sendgrid"
    return ("--webhook-url", door, "--activity-lag", "600", "--events-delay", "3")


def callback_secret(provider_url: str) -> str:
    """The fake's Event Webhook verification key: the ledger's secret for `sendgrid`."""
    answer = httpx.get(f"{provider_url}/_sandbox/public_key", timeout=10, trust_env=False)
    answer.raise_for_status()
    return str(answer.json()["public_key"])


def warm(provider_url: str) -> None:
    """The sendgrid library loaded: what `send` needs, before forking."""
    import python_http_client.exceptions  # noqa: F401
    import sendgrid
    import sendgrid.helpers.mail  # noqa: F401


def mail(effect: dict[str, Any], request: dict[str, Any]) -> Any:
    """The v3 Mail Send body of an effect's request (`to`, `subject`, `text`), labelled."""
    from sendgrid.helpers.mail import CustomArg, Mail

    message = Mail(
        from_email=str(request.get("from") or "ledger@example.com"),
        to_emails=str(request["to"]),
        subject=str(request["subject"]),
        plain_text_content=str(request.get("text") or "-"),
    )
    message.custom_arg = [
        CustomArg("ledger_key", effect["idempotency_key"]),
        CustomArg("ledger_effect", str(effect["id"])),
    ]
    return message


def send(provider_url: str, effect: dict[str, Any], request: dict[str, Any], fault: str) -> dict:
    """Send the effect's email once; `fault` ("", "hang=1", "drop") is applied by the fake to
    this one call. Returns {"status", "provider_ref", "response"} for POST /outcome."""
    from python_http_client.exceptions import HTTPError
    from sendgrid import SendGridAPIClient

    client = SendGridAPIClient(api_key=os.environ.get(API_KEY_ENV) or API_KEY, host=provider_url)
    if fault:
        client.client.request_headers["X-Sandbox-Fault"] = fault
    try:
        body = mail(effect, request).get()
        answer = client.client.mail.send.post(request_body=body, timeout=TIMEOUT)
    except HTTPError as error:
        status = error.status_code
        final = 400 <= status < 500 and status != 429
        return {
            "status": "failed" if final else "unknown",
            "provider_ref": "",
            "response": {"status": status, "body": _text(error.body)},
        }
    except (OSError, http.client.HTTPException) as exc:
        # The request may have left: a lost answer is unknown, never failed.
        return {"status": "unknown", "provider_ref": "", "response": {"error": type(exc).__name__}}
    ref = answer.headers.get("X-Message-Id") or ""
    if answer.status_code != 202 or not ref:
        return {"status": "unknown", "provider_ref": "", "response": {"status": answer.status_code}}
    return {"status": "confirmed", "provider_ref": ref, "response": {"x_message_id": ref}}


def records(provider_url: str) -> dict[str, int]:
    """How many emails the fake holds per effect idempotency key (its inspection endpoint)."""
    answer = httpx.get(f"{provider_url}/_sandbox/transactions", timeout=10, trust_env=False)
    answer.raise_for_status()
    counts: dict[str, int] = {}
    for message in answer.json()["data"]:
        key = message["custom_args"].get("ledger_key")
        if key:
            counts[key] = counts.get(key, 0) + 1
    return counts


def _text(body: Any) -> str:
    return body.decode(errors="replace")[:500] if isinstance(body, bytes) else str(body)[:500]
