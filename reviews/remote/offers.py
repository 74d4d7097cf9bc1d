"""What an alert offers to decide: the decisions the effect page offers on the effect of the
alert's review item, the suggested one first, each with its form's pre-filled values and the
plan preview's one-line consequence. Read when the alert is sent (the buttons and links it
carries) and again when a person acts on it (what is offered to them, now).

Every rule is the pages' own (`reviews.decisions.offer.allowed_actions`,
`reviews.decisions.suggest.suggestion`, `reviews.decisions.preview.preview_for`): only their
results are put in the shape a message needs. An alert goes to people in general, so its
four-eyes decisions are offered to "someone who did not ask for it"; when a person acts, what
is offered to that person decides.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q

from ledger.models import Effect, ReviewItem
from ledger.models.states import Kind
from reviews.decisions.evidence import evidence_of
from reviews.decisions.forms import DecisionForm
from reviews.decisions.kinds import KINDS
from reviews.decisions.offer import allowed_actions, open_item
from reviews.decisions.preview import preview_for
from reviews.decisions.suggest import suggestion
from reviews.queue.holds import hold_of, hold_text

# Slack shows at most this many decisions per message; the page has them all.
MOST = 6


@dataclass(frozen=True)
class Choice:
    """One decision offered: what its button says and leads to, and its form's values."""

    action: str
    label: str
    # The plan preview's first sentence: "The effect becomes planned." …
    consequence: str
    # The page's confirmation question for it.
    question: str
    suggested: bool = False
    dangerous: bool = False
    # The decision form's pre-filled values (the kind's own, then the suggestion's).
    initial: dict[str, Any] = field(default_factory=dict)
    # Whether the pre-filled values are all the kind asks for (a reason and its required
    # fields): then one press and the confirmation record it, as on the page.
    complete: bool = False


@dataclass(frozen=True)
class Offer:
    effect: Effect
    item: ReviewItem | None
    choices: tuple[Choice, ...]
    # "olga is working on this since 10:02" when another person holds the item, else "".
    held_by_other: str = ""

    def choice(self, action: str) -> Choice | None:
        return next((c for c in self.choices if c.action == action), None)


def effect_of_alert(payload: dict[str, Any]) -> tuple[Effect, int | None] | None:
    """The effect an alert is about and its review item's id, where the alert names an effect
    with an open review item (a review item's alert, a repeated request); None otherwise."""
    effect_id = payload.get("effect_id")
    try:
        pk = uuid.UUID(str(effect_id))
    except ValueError:
        return None
    effect = Effect.objects.select_related("agent").filter(pk=pk).first()
    if effect is None or effect.kind == Kind.DECISION:
        return None
    item = open_item(effect)
    return (effect, item.pk) if item is not None else None


def offer_for(effect: Effect, user: User | None = None, item: ReviewItem | None = None) -> Offer:
    """What the effect page offers `user` on `effect`; None as user: anyone who did not ask for
    what waits (an alert's readers). The suggested decision first."""
    item = item if item is not None else open_item(effect)
    evidence = evidence_of(effect.pk)
    someone = user if user is not None else AnonymousUser()
    actions = allowed_actions(effect, someone, item=item, evidence=evidence)
    suggested = suggestion(effect, item, evidence)
    first = suggested.action if suggested is not None and suggested.action in actions else ""
    ordered = sorted(actions, key=lambda a: a != first)[:MOST]
    choices = tuple(
        _choice(effect, action, suggested.initial if action == first else {}, action == first)
        for action in ordered
    )
    hold = hold_of(item)
    other = hold is not None and (user is None or hold.held_by.pk != user.pk)
    return Offer(effect, item, choices, hold_text(hold) if other else "")


def _choice(effect: Effect, action: str, suggested: dict[str, Any], is_suggested: bool) -> Choice:
    kind = KINDS[action]
    initial: dict[str, Any] = {}
    if kind.initial is not None:
        initial.update(kind.initial(effect))
    initial.update(suggested)
    form = DecisionForm({**initial, "version": effect.version}, action=action)
    return Choice(
        action=action,
        label=kind.label,
        consequence=consequence(effect, action),
        question=kind.question_for(effect, str(initial.get("provider_ref") or "{ref}")),
        suggested=is_suggested,
        dangerous=kind.dangerous,
        initial=initial,
        complete=is_suggested and form.is_valid(),
    )


def consequence(effect: Effect, action: str) -> str:
    """The plan preview's one line: its first sentence, with the money it names."""
    preview = preview_for(effect, action)
    if not preview.lines:
        return f"The effect becomes {preview.status}."
    line = preview.lines[0]
    return f"{line.text} {line.money}".strip()


def decided_elsewhere(item_id: int | None) -> ReviewItem | None:
    """The alert's review item, with who resolved it, once it is resolved; None while open."""
    if item_id is None:
        return None
    return (
        ReviewItem.objects.select_related("resolved_by")
        .filter(Q(pk=item_id) & Q(resolved_at__isnull=False))
        .first()
    )
