"""What the ledger shows in Slack, in Block Kit: an alert's decision buttons, the message that
replaces them once someone decided (or once it is out of date), an answer for the presser
alone, and the modal that asks what the page's form asks.

Every text that comes from the ledger's data (effect keys, tools, reasons, labels) is a
`plain_text` object, never `mrkdwn`: nothing an agent named can become a mention or a link. The
alert's own text arrives already escaped (`reviews.alerts.channels.slack_text`). A button's
value names the effect, the decision, the effect's version the message showed and its review
item (`Pressed`); Slack sends it back as it was posted, in a request it signs, and every check
is made again when it comes back.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from reviews.decisions.forms import DecisionForm
from reviews.remote.offers import Choice, Offer

ACTION_PREFIX = "decide:"
# The modal's callback_id: a view_submission with another one is not the ledger's.
MODAL = "ledger_decide"
OPEN = "open_in_ledger"
# The modal's own field, beyond the form's: deciding although another person holds the item.
OVER_HOLD = "over_hold"
_MULTILINE = {"reason", "evidence", "compensation_request"}
_CHECKBOXES = {"verified_absent", "force"}


def plain(text: str, limit: int = 3000) -> dict[str, Any]:
    """A plain_text object, cut to Slack's limit for where it goes."""
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return {"type": "plain_text", "text": text or " ", "emoji": False}


@dataclass(frozen=True)
class Pressed:
    """What a button (or the modal it opened) asks for."""

    effect_id: uuid.UUID
    action: str
    version: int
    item_id: int | None

    def value(self) -> str:
        data = {"e": str(self.effect_id), "a": self.action, "v": self.version, "i": self.item_id}
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def parse(cls, raw: Any) -> Pressed:
        """A button's value as `value()` wrote it; ValueError for anything else."""
        try:
            data = json.loads(raw) if isinstance(raw, str) else None
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict):
            raise ValueError("not a decision button of the ledger")
        version, item, action = data.get("v"), data.get("i"), data.get("a")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValueError("the button names no effect version")
        if item is not None and (not isinstance(item, int) or isinstance(item, bool)):
            raise ValueError("the button names no review item")
        if not isinstance(action, str) or not action:
            raise ValueError("the button names no decision")
        return cls(uuid.UUID(str(data.get("e"))), action, version, item)


def alert_blocks(text: str, link: str, offer: Offer) -> list[dict[str, Any]]:
    """The alert's message: its text, then one line per decision offered (the suggested one
    first, its button primary) with what it will lead to, then the link to the effect page."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}
    ]
    if offer.held_by_other:
        blocks.append({"type": "context", "elements": [plain(offer.held_by_other)]})
    blocks += [_choice_block(offer, choice) for choice in offer.choices]
    if link:
        blocks.append(_open_button(link))
    return blocks


def _choice_block(offer: Offer, choice: Choice) -> dict[str, Any]:
    pressed = Pressed(offer.effect.pk, choice.action, offer.effect.version, _item_id(offer))
    button: dict[str, Any] = {
        "type": "button",
        "action_id": ACTION_PREFIX + choice.action,
        "text": plain(choice.label, 75),
        "value": pressed.value(),
    }
    if choice.suggested:
        button["style"] = "primary"
    elif choice.dangerous:
        button["style"] = "danger"
    if choice.complete and not offer.held_by_other:
        # One press records it: Slack's own confirmation asks the page's question first.
        button["confirm"] = {
            "title": plain("Record this decision?", 100),
            "text": plain(f"{choice.question} {choice.consequence}", 300),
            "confirm": plain("Yes, record it", 30),
            "deny": plain("Back", 30),
        }
    said = f"{choice.label} (suggested)" if choice.suggested else choice.label
    return {
        "type": "section",
        "block_id": f"choice:{choice.action}",
        "text": plain(f"{said}: {choice.consequence}"),
        "accessory": button,
    }


def _item_id(offer: Offer) -> int | None:
    return offer.item.pk if offer.item is not None else None


def _open_button(link: str) -> dict[str, Any]:
    return {
        "type": "actions",
        "block_id": "open",
        "elements": [
            {"type": "button", "action_id": OPEN, "text": plain("Open in Effect Ledger", 75),
             "url": link[:3000]}
        ],
    }  # fmt: skip


def replacing(headline: str, said: str, link: str) -> dict[str, Any]:
    """The message that replaces an alert's buttons: what it was about, what happened."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": plain(headline)},
        {"type": "section", "text": plain(said)},
    ]
    if link:
        blocks.append(_open_button(link))
    return {"replace_original": True, "text": f"{headline}: {said}"[:3000], "blocks": blocks}


def ephemeral(text: str) -> dict[str, Any]:
    """An answer the presser alone sees; the message stays as it is."""
    return {"response_type": "ephemeral", "replace_original": False, "text": text[:3000]}


def modal(choice: Choice, pressed: Pressed, response_url: str, held: str) -> dict[str, Any]:
    """The modal asking what the page's form asks for this decision, pre-filled as the page
    pre-fills it; `held` names whoever else holds the item (deciding over them is asked)."""
    form = DecisionForm(action=choice.action)
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": plain(f"{choice.question} {choice.consequence}")}
    ]
    for name in form.kind.fields:
        blocks.append(_field(name, form, choice.initial.get(name)))
    if held:
        blocks.append(_checkbox(OVER_HOLD, held, "Decide although they hold it"))
    metadata = {"p": pressed.value(), "r": response_url}
    return {
        "type": "modal",
        "callback_id": MODAL,
        "title": plain(choice.label, 24),
        "submit": plain("Record", 24),
        "close": plain("Cancel", 24),
        "private_metadata": json.dumps(metadata, separators=(",", ":")),
        "blocks": blocks,
    }


def _field(name: str, form: DecisionForm, initial: Any) -> dict[str, Any]:
    field = form.fields[name]
    if name in _CHECKBOXES:
        return _checkbox(name, str(field.label), "Yes")
    element: dict[str, Any] = {
        "type": "plain_text_input",
        "action_id": "value",
        "multiline": name in _MULTILINE,
        "max_length": min(getattr(field, "max_length", None) or 3000, 3000),
    }
    if isinstance(initial, str) and initial:
        element["initial_value"] = initial[:3000]
    return {
        "type": "input",
        "block_id": name,
        "optional": not field.required,
        "label": plain(str(field.label), 2000),
        "element": element,
    }


def _checkbox(name: str, label: str, option: str) -> dict[str, Any]:
    return {
        "type": "input",
        "block_id": name,
        "optional": True,
        "label": plain(label, 2000),
        "element": {
            "type": "checkboxes",
            "action_id": "value",
            "options": [{"text": plain(option, 75), "value": "yes"}],
        },
    }


def submitted_values(view: dict[str, Any]) -> dict[str, Any]:
    """The modal's values as the page's form takes them: text as typed, a ticked box "on"."""
    state = (view.get("state") or {}).get("values") or {}
    data: dict[str, Any] = {}
    if not isinstance(state, dict):
        return data
    for block_id, actions in state.items():
        element = actions.get("value") if isinstance(actions, dict) else None
        if not isinstance(element, dict):
            continue
        if element.get("type") == "checkboxes":
            if element.get("selected_options"):
                data[block_id] = "on"
        elif isinstance(element.get("value"), str):
            data[block_id] = element["value"]
    return data
