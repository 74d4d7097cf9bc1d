"""A halt's alert in Slack: its one decision, resuming, as a button that opens a modal asking
what the halts page asks (a reason, and the confirmation that claims resume at once), recorded
by `ledger.containment.halts.resume` as the page records it.

Who may: a person linked to the Slack user (`reviews.remote.slack.people`), an operator or
admin, who sees the halt and may switch it (`reviews.access.teams.may_switch_halt`, the halts
page's rule: a team's halt by its team's operators, a global one by admins once teams exist).
A halt resumed meanwhile replaces the message with who resumed it; nothing else is done.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpResponse, JsonResponse
from django.urls import reverse

from ledger.containment import halts as halting
from ledger.errors import LedgerError
from ledger.models import Halt
from reviews.access.counts import visible_halts
from reviews.access.teams import may_switch_halt
from reviews.remote.slack import blocks, people
from reviews.remote.slack.deciding import Refusal, bad, ok, person_refusal, who
from reviews.remote.slack.webapi import SlackCallFailed, open_modal, respond

RESUME = "resume_halt"
MODAL = "ledger_resume_halt"
CONFIRM = "Claims resume at once; this is recorded as a decision"


def halts_link() -> str:
    return settings.LEDGER_ALERT_LINK_BASE.rstrip("/") + reverse("halts")


def what(halt: Halt) -> str:
    return "everything" if halt.scope == "all" else f"{halt.scope} {halt.value}"


def halt_blocks(payload: dict[str, Any], text: str) -> list[dict[str, Any]] | None:
    """A halt alert's message: its text, and *Resume* while the halt is active."""
    halt = Halt.objects.filter(pk=payload.get("id"), resumed_at__isnull=True).first()
    if halt is None:
        return None
    button = {
        "type": "button",
        "action_id": RESUME,
        "text": blocks.plain("Resume", 75),
        "value": json.dumps({"h": halt.pk}),
    }
    said = f"Resume: claims of {what(halt)} resume at once (a reason is asked)."
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}},
        {"type": "section", "block_id": "resume", "text": blocks.plain(said), "accessory": button},
        {"type": "actions", "block_id": "open", "elements": [
            {"type": "button", "action_id": blocks.OPEN,
             "text": blocks.plain("Open the halts page", 75), "url": halts_link()}]},
    ]  # fmt: skip


def _halt_id(raw: Any) -> int:
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError):
        data = None
    halt = data.get("h") if isinstance(data, dict) else None
    if not isinstance(halt, int) or isinstance(halt, bool):
        raise ValueError("not a halt of the ledger")
    return halt


def _check(
    user: User | None, halt_id: int, presser: tuple[str, str]
) -> tuple[Halt | None, Refusal | None]:
    if (refused := person_refusal(user, presser)) is not None:
        return None, refused
    halt = Halt.objects.filter(pk=halt_id).first()
    if halt is None or not visible_halts(user, [halt]) or not may_switch_halt(user, halt):
        return None, Refusal(
            f"Nothing was done: {user.get_username()} may not resume this halt (a team's halt "
            "is its team's operators'; a global one, or one on something of no team, admins')."
        )
    if halt.resumed_at is not None:
        return None, Refusal(
            f"Already resumed by {halt.resumed_by} at {halt.resumed_at:%H:%M} UTC; nothing was "
            "done from this message.",
            replaces=True,
        )
    return halt, None


def _tell(refusal: Refusal, response_url: Any, halt_id: int) -> None:
    halt = Halt.objects.filter(pk=halt_id).first()
    if refusal.replaces and halt is not None:
        message = blocks.replacing(f"Halt of {what(halt)}", refusal.text, halts_link())
    else:
        message = blocks.ephemeral(refusal.text)
    respond(response_url, message)


def pressed(payload: dict[str, Any], action: dict[str, Any]) -> HttpResponse:
    """A press on *Resume*: the modal, once the presser may resume this halt."""
    try:
        halt_id = _halt_id(action.get("value"))
    except ValueError as exc:
        return bad(str(exc))
    presser, response_url = who(payload), payload.get("response_url")
    halt, refusal = _check(people.who_pressed(*presser), halt_id, presser)
    if refusal is not None:
        _tell(refusal, response_url, halt_id)
        return ok()
    try:
        open_modal(str(payload.get("trigger_id") or ""), _modal(halt, str(response_url or "")))
    except SlackCallFailed:
        said = "The form could not be opened in Slack; nothing was done. Resume it in the page: "
        respond(response_url, blocks.ephemeral(said + halts_link()))
    return ok()


def _modal(halt: Halt, response_url: str) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": MODAL,
        "title": blocks.plain("Resume", 24),
        "submit": blocks.plain("Resume", 24),
        "close": blocks.plain("Cancel", 24),
        "private_metadata": json.dumps({"h": halt.pk, "r": response_url}),
        "blocks": [
            {"type": "section", "text": blocks.plain(
                f"Resume the halt of {what(halt)} ({halt.reason}), set by {halt.halted_by}?")},
            {"type": "input", "block_id": "reason", "label": blocks.plain("Reason for resuming"),
             "element": {"type": "plain_text_input", "action_id": "value", "max_length": 2000}},
            {"type": "input", "block_id": "confirm", "label": blocks.plain("Confirmation"),
             "element": {"type": "checkboxes", "action_id": "value",
                         "options": [{"text": blocks.plain(CONFIRM, 75), "value": "yes"}]}},
        ],
    }  # fmt: skip


def submitted(payload: dict[str, Any]) -> HttpResponse:
    """The resume modal sent: the halt resumed as the page resumes it, the message updated."""
    view = payload.get("view") if isinstance(payload.get("view"), dict) else {}
    try:
        metadata = json.loads(view.get("private_metadata") or "")
        halt_id, response_url = _halt_id(json.dumps(metadata)), metadata.get("r")
    except (ValueError, AttributeError, RecursionError):
        return bad("The modal is not one the ledger opened.")
    presser = who(payload)
    user = people.who_pressed(*presser)
    halt, refusal = _check(user, halt_id, presser)
    if refusal is not None:
        if refusal.replaces:
            _tell(refusal, response_url, halt_id)
        return _errors(refusal.text)
    values = blocks.submitted_values(view)
    if not values.get("confirm"):
        return JsonResponse({"response_action": "errors", "errors": {"confirm": "Tick it."}})
    try:
        switched = halting.resume(
            halt.pk, reason=values.get("reason", ""), by=user.get_username(), channel="slack"
        )
    except LedgerError as exc:
        return _errors(exc.detail)
    said = (
        f"{user.get_username()} resumed it from Slack. Reason: {values.get('reason', '')}"
        if switched.changed
        else f"Already resumed by {switched.halt.resumed_by}; nothing was done."
    )
    respond(response_url, blocks.replacing(f"Halt of {what(halt)}", said, halts_link()))
    return _errors(said) if not switched.changed else JsonResponse({"response_action": "clear"})


def _errors(text: str) -> JsonResponse:
    return JsonResponse({"response_action": "errors", "errors": {"reason": text}})
