"""`POST /slack/interactions`: Slack's interactivity Request URL (docs/operations/slack-app.md).

In this order, and nothing is read or written before the signature holds:

1. Slack's request signature (`reconcilers.providers.slack.signing`, the Events API door's own
   check): `X-Slack-Signature` v0 over the timestamp and the raw body, with the app's signing
   secret (`LEDGER_SLACK_SIGNING_SECRET`, or the old one while it rotates), within five
   minutes. Unsigned, badly signed or stale: 401 with a JSON body.
2. The body: a form whose `payload` is a JSON object. Anything else: 400.
3. The signature used once: kept with the callbacks' (`ledger.api.webhooks.accept_delivery`),
   so a replay within the window is refused (401) and changes nothing.
4. The interaction: a button press (`block_actions`) or a modal's submission
   (`view_submission`), answered by `reviews.remote.slack.deciding` (a decision on an effect)
   or `reviews.remote.slack.halting` (resuming a halt); any other type is acknowledged and
   ignored.

Without a signing secret configured the door does not exist (404).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from ledger.api.webhooks import BadSignature, accept_delivery
from reconcilers.providers.slack.signing import SignatureRefused, verify
from reviews.remote.slack import deciding, halting

# Where the door's signatures are kept among the callbacks' (a name no provider has).
DELIVERIES = "slack-interactivity"


def _error(status: int, code: str, detail: str) -> JsonResponse:
    return JsonResponse({"error": code, "detail": detail}, status=status)


def payload_of(body: bytes) -> dict[str, Any]:
    """The interaction Slack posted (`payload=<JSON>` as a form); ValueError otherwise."""
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise ValueError("The body is not a form.") from None
    raw = form.get("payload")
    if not raw or len(raw) != 1:
        raise ValueError("The form has no payload field.")
    try:
        payload = json.loads(raw[0])
    except (ValueError, RecursionError):
        raise ValueError("The payload is not JSON.") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
        raise ValueError("The payload is not an interaction.")
    return payload


@csrf_exempt
@require_POST
def interactions(request: HttpRequest) -> HttpResponse:
    current = settings.LEDGER_SLACK_SIGNING_SECRET
    if not current:
        return _error(404, "not_found", "Slack interactivity is not configured here.")
    secrets = [s for s in (current, settings.LEDGER_SLACK_OLD_SIGNING_SECRET) if s]
    headers = {name.lower(): value for name, value in request.headers.items()}
    try:
        signature = verify(headers, request.body, secrets)
    except SignatureRefused as exc:
        return _error(401, "bad_signature", str(exc))
    try:
        payload = payload_of(request.body)
    except ValueError as exc:
        return _error(400, "bad_request", str(exc))
    try:
        accept_delivery(DELIVERIES, signature)
    except BadSignature as exc:
        return _error(401, "bad_signature", exc.detail)
    if payload["type"] == "block_actions":
        action = _first_action(payload)
        if action.get("action_id") == halting.RESUME:
            return halting.pressed(payload, action)
        return deciding.pressed(payload)
    if payload["type"] == "view_submission":
        view = payload.get("view") if isinstance(payload.get("view"), dict) else {}
        if view.get("callback_id") == halting.MODAL:
            return halting.submitted(payload)
        return deciding.submitted(payload)
    return HttpResponse(status=200)


def _first_action(payload: dict[str, Any]) -> dict[str, Any]:
    actions = payload.get("actions")
    first = actions[0] if isinstance(actions, list) and actions else None
    return first if isinstance(first, dict) else {}
