"""A press on an alert's decision button, and the modal it may open, answered as the effect page
answers its form: through `reviews.decisions.decide.decide()` with `Ask.channel` "slack".

Before anything is decided, in this order (`_check`): the Slack user is mapped to an account
(`reviews.remote.slack.people`), the account may act (operators and admins), the effect is
one of its teams' (`reviews.access.teams.decides_on`, what `decide()` checks again), and the
message is not out of date: its review item still open, its effect at the version the message
showed. A refusal is answered to the presser alone (ephemeral); an out-of-date message is
replaced by what happened meanwhile. Nothing is recorded for any of them.

Then the decision offered to this person (`reviews.remote.offers.offer_for`): the suggested one,
where the evidence fills all its kind asks and nobody else holds the item, is recorded on the
press (its button carried Slack's confirmation, with the page's question); every other one
opens a modal with the page's fields (`views.open`), and is recorded on its submission. The
message is then updated in place with who decided what (`response_url`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpResponse, JsonResponse
from django.urls import reverse

from ledger.errors import LedgerError, ValidationFailed
from ledger.models import Effect
from reviews.access.checks import can_act
from reviews.access.teams import decides_on
from reviews.decisions.approvals import asked_by, is_asker, pending_proposal
from reviews.decisions.decide import AlreadyDecided, decide
from reviews.decisions.forms import DecisionForm
from reviews.decisions.kinds import KINDS
from reviews.queue.notes import keep_lost_decision
from reviews.remote.offers import decided_elsewhere, offer_for
from reviews.remote.slack import blocks, people
from reviews.remote.slack.blocks import Pressed
from reviews.remote.slack.webapi import SlackCallFailed, open_modal, respond

log = logging.getLogger("reviews.remote.slack")
CHANNEL = "slack"


@dataclass(frozen=True)
class Refusal:
    """Why nothing was done; `replaces` when the message itself is out of date (it is then
    replaced by `text`), else it is said to the presser alone."""

    text: str
    replaces: bool = False


def ok() -> HttpResponse:
    return HttpResponse(status=200)


def bad(detail: str) -> JsonResponse:
    return JsonResponse({"error": "bad_request", "detail": detail}, status=400)


def who(payload: dict[str, Any]) -> tuple[str, str]:
    """The presser's workspace and user id, as Slack's signed payload names them."""
    user = payload.get("user") if isinstance(payload.get("user"), dict) else {}
    team = payload.get("team") if isinstance(payload.get("team"), dict) else {}
    return str(user.get("team_id") or team.get("id") or ""), str(user.get("id") or "")


def effect_link(effect_id: Any) -> str:
    path = reverse("effect", kwargs={"effect_id": effect_id})
    return settings.LEDGER_ALERT_LINK_BASE.rstrip("/") + path


def headline(effect: Effect) -> str:
    return f"{effect.effect_key} ({effect.tool})"


def person_refusal(user: User | None, presser: tuple[str, str]) -> Refusal | None:
    """Why the presser may not act at all: linked to nobody (with the link to link their
    account), or not an operator (nor an admin); None when they may."""
    if user is None:
        url = people.link_url(*presser)
        return Refusal(
            "Your Slack account is not linked to an account of Effect Ledger, so nothing was "
            f"done. Link it (once, within {settings.LEDGER_SLACK_LINK_MAX_AGE // 60} minutes, "
            f"after signing in): {url}"
        )
    if not can_act(user):
        return Refusal(
            f"Nothing was done: {user.get_username()} may not decide (operators and admins do)."
        )
    return None


def _check(
    user: User | None, asked: Pressed, presser: tuple[str, str]
) -> tuple[Effect | None, Refusal | None]:
    """The effect, once the presser may decide on it from this message; else why not."""
    if (refused := person_refusal(user, presser)) is not None:
        return None, refused
    effect = Effect.objects.filter(pk=asked.effect_id).first()
    if effect is None or not decides_on(user, effect.pk):
        return None, Refusal(
            f"Nothing was done: {user.get_username()} decides only on effects of their teams "
            "(or of no team), and this is not one."
        )
    done = decided_elsewhere(asked.item_id)
    if done is not None:
        by = done.resolved_by.get_username() if done.resolved_by else "the ledger"
        return None, Refusal(
            f"Already decided by {by} at {done.resolved_at:%H:%M} UTC ({done.resolution}); "
            "nothing was done from this message.",
            replaces=True,
        )
    if effect.version != asked.version:
        return None, Refusal(
            f"This message is out of date: the effect changed since it was sent (it is now "
            f"{effect.status}); nothing was done. Open it in Effect Ledger to decide.",
            replaces=True,
        )
    return effect, None


def _tell(refusal: Refusal, response_url: Any, asked: Pressed) -> None:
    if refusal.replaces:
        effect = Effect.objects.get(pk=asked.effect_id)
        message = blocks.replacing(headline(effect), refusal.text, effect_link(effect.pk))
    else:
        message = blocks.ephemeral(refusal.text)
    respond(response_url, message)


def pressed(payload: dict[str, Any]) -> HttpResponse:
    """A `block_actions` payload: a press on one of the ledger's buttons."""
    actions = payload.get("actions")
    action = actions[0] if isinstance(actions, list) and actions else None
    action_id = action.get("action_id") if isinstance(action, dict) else None
    if not isinstance(action_id, str) or not action_id.startswith(blocks.ACTION_PREFIX):
        return ok()  # the link button, or another app's element: nothing to do
    try:
        asked = Pressed.parse(action.get("value"))
    except ValueError as exc:
        return bad(str(exc))
    if asked.action not in KINDS:
        return bad("The button names no decision kind of the ledger.")
    presser = who(payload)
    response_url = payload.get("response_url")
    user = people.who_pressed(*presser)
    effect, refusal = _check(user, asked, presser)
    if refusal is not None:
        _tell(refusal, response_url, asked)
        return ok()
    offer = offer_for(effect, user)
    choice = offer.choice(asked.action)
    if choice is None:
        said = f"Nothing was done: “{KINDS[asked.action].label}” is not offered to you here now."
        respond(response_url, blocks.ephemeral(_not_offered(effect, user, said)))
    elif choice.complete and not offer.held_by_other:
        data = {**choice.initial, "version": asked.version, "confirm": "on"}
        problems = _record(effect, _ask(data, asked.action), user, response_url)
        if problems:
            respond(response_url, blocks.ephemeral("Nothing was done: " + _said(problems)))
    else:
        view = blocks.modal(choice, asked, str(response_url or ""), offer.held_by_other)
        try:
            open_modal(str(payload.get("trigger_id") or ""), view)
        except SlackCallFailed as exc:
            log.warning("slack: the decision's modal did not open: %s", exc)
            said = "The form could not be opened in Slack; nothing was done. Decide in the page: "
            respond(response_url, blocks.ephemeral(said + effect_link(effect.pk)))
    return ok()


def _not_offered(effect: Effect, user: User, said: str) -> str:
    """Four-eyes says why: the person asked for it themselves."""
    if is_asker(asked_by(effect, pending_proposal(effect)), user):
        return said + " You asked for this yourself: four-eyes needs another person to decide."
    return said


def _ask(data: dict[str, Any], action: str):
    form = DecisionForm(data, action=action)
    if not form.is_valid():
        raise ValidationFailed("The decision is incomplete.", _form_errors(form))
    return replace(form.to_ask(), channel=CHANNEL)


def _form_errors(form: DecisionForm) -> dict[str, str]:
    return {
        name or "reason": " ".join(str(e) for e in errors) for name, errors in form.errors.items()
    }


def _said(problems: dict[str, str]) -> str:
    return " ".join(f"{name}: {text}" if name else text for name, text in problems.items())


def _record(effect: Effect, ask: Any, user: User, response_url: Any) -> dict[str, str]:
    """Decide; on success the message says who decided what. The problems, keyed by form
    field ("" for the decision as a whole), when nothing was recorded."""
    try:
        decided = decide(effect.pk, ask, user=user)
    except ValidationFailed as exc:
        return dict(exc.extra.get("fields") or {}) or {"": exc.detail}
    except AlreadyDecided as exc:
        # As on the page: the loser's evidence stays on the item as a note.
        keep_lost_decision(effect.pk, user, ask, exc)
        moved = Effect.objects.get(pk=effect.pk)
        said = f"{exc.detail} Nothing was done from this message."
        respond(response_url, blocks.replacing(headline(moved), said, effect_link(effect.pk)))
        return {"": f"{exc.detail} Your evidence was kept as a note on the item."}
    except LedgerError as exc:
        return {"": exc.detail}
    label = KINDS[ask.action].label
    said = (
        f"{user.get_username()} decided from Slack: {label}. Reason: {ask.reason} "
        f"The effect is now {decided.target.status}."
    )
    if decided.decision.provenance.get("action") != ask.action:
        said += " Another person approves or rejects it (four-eyes)."
    respond(response_url, blocks.replacing(headline(effect), said, effect_link(effect.pk)))
    return {}


def submitted(payload: dict[str, Any]) -> HttpResponse:
    """A `view_submission` payload: the modal a press opened, sent with what was typed."""
    view = payload.get("view") if isinstance(payload.get("view"), dict) else {}
    if view.get("callback_id") != blocks.MODAL:
        return ok()
    try:
        metadata = json.loads(view.get("private_metadata") or "")
        asked = Pressed.parse(metadata.get("p"))
        response_url = metadata.get("r")
    except (ValueError, AttributeError, RecursionError):
        return bad("The modal is not one the ledger opened.")
    if asked.action not in KINDS:
        return bad("The modal names no decision kind of the ledger.")
    presser = who(payload)
    user = people.who_pressed(*presser)
    effect, refusal = _check(user, asked, presser)
    if refusal is not None:
        if refusal.replaces:
            _tell(refusal, response_url, asked)
        return _errors({"": refusal.text}, asked.action)
    data = {**blocks.submitted_values(view), "version": asked.version, "confirm": "on"}
    try:
        problems = _record(effect, _ask(data, asked.action), user, response_url)
    except ValidationFailed as exc:
        problems = exc.extra["fields"]
    if problems:
        return _errors(problems, asked.action)
    return JsonResponse({"response_action": "clear"})


def _errors(problems: dict[str, str], action: str) -> JsonResponse:
    """Slack shows these under the modal's fields: a problem of a field the modal does not
    show, or of the decision as a whole, under the reason (every decision asks for one)."""
    fields = KINDS[action].fields
    shown: dict[str, str] = {}
    for name, text in problems.items():
        block = name if name in fields else "reason"
        shown[block] = f"{shown[block]} {text}" if block in shown else text
    return JsonResponse({"response_action": "errors", "errors": shown})
