"""Each decision kind is fully described by its one declaration (`reviews.decisions.kinds`):
every action has one with every part filled, every review reason is closed by some kind, and
the form, the preview, the bulk actions and the effect page take what they show from it."""

from __future__ import annotations

import re
import string

import pytest

from ledger.models import Effect, Reason
from ledger.rules.reviewqueue import open_review
from reviews.decisions.declaration import Action, DecisionKind
from reviews.decisions.forms import DecisionForm
from reviews.decisions.kinds import ACTIONS, KINDS
from reviews.decisions.offer import allowed_actions
from reviews.decisions.preview import preview_for
from reviews.queue import bulk
from tests.factories import signed_in

PLACEHOLDERS = {"key", "ref", "one_more"}


def test_every_action_has_exactly_one_declaration_under_its_own_name():
    assert set(KINDS) == set(Action)
    for action, kind in KINDS.items():
        assert isinstance(kind, DecisionKind)
        assert kind.action is action


@pytest.mark.parametrize("kind", KINDS.values(), ids=lambda kind: str(kind.action))
def test_every_part_of_a_declaration_is_filled(kind):
    assert kind.label and kind.past and kind.question
    assert kind.from_statuses
    assert kind.closes
    assert callable(kind.preview) and callable(kind.carry_out)
    form_fields = set(DecisionForm(action=kind.action).fields)
    assert "reason" in kind.fields
    assert set(kind.fields) <= form_fields
    assert kind.required <= set(kind.fields)
    # The question names only what the page knows: the effect, the reference typed, attempts.
    named = {name for _, name, _, _ in string.Formatter().parse(kind.question) if name}
    assert named <= PLACEHOLDERS
    assert "{key}" in kind.question


def test_every_reason_a_review_opens_for_is_closed_by_some_kind():
    closed = set().union(*(kind.closes for kind in KINDS.values()))
    assert closed == set(Reason)


def test_the_form_shows_and_requires_what_the_kind_declares():
    for action, kind in KINDS.items():
        form = DecisionForm(action=action)
        assert [field.name for field in form.shown()] == list(kind.fields)
        required = {name for name in kind.fields if form.fields[name].required}
        assert required == set(kind.required) | {"reason"}


def test_the_bulk_actions_are_the_kinds_declared_for_bulk():
    assert tuple(a for a, k in KINDS.items() if k.in_bulk) == bulk.KINDS
    assert not any(KINDS[a].four_eyes for a in bulk.KINDS)


def test_every_kind_previews_with_its_own_builder(make_effect, olga):
    effect = make_effect("unknown", attempt=1)
    open_review(effect.id, Reason.INCONCLUSIVE)
    effect = Effect.objects.select_related("agent").get(pk=effect.id)
    for action in ACTIONS:
        preview = preview_for(effect, action)
        texts = " ".join(line.text for line in preview.lines)
        assert preview.action == action
        assert "cannot say in advance" not in texts, action


def danger_classes(html: str) -> dict[str, bool]:
    """Each offered decision's submit button on the effect page: marked dangerous or not."""
    found = {}
    for form in re.finditer(r'data-action="(\w+)".*?</form>', html, re.S):
        button = re.search(r"<button type=\"submit\" data-decide-submit ([^>]*)>", form[0])
        found[form[1]] = button is not None and 'class="danger"' in button[1]
    return found


def test_the_effect_pages_danger_class_comes_from_the_declaration(make_effect, olga):
    effect = make_effect("unknown", attempt=1)
    open_review(effect.id, Reason.INCONCLUSIVE)
    html = signed_in(olga).get(f"/effects/{effect.id}/").content.decode()
    shown = danger_classes(html)
    assert set(shown) == set(allowed_actions(effect, olga))
    assert shown == {action: KINDS[action].dangerous for action in shown}
    assert shown["fail"] and not shown["confirm"]


def test_a_declared_question_is_what_the_dialog_asks(make_effect, olga):
    effect = make_effect("unknown", attempt=1)
    open_review(effect.id, Reason.INCONCLUSIVE)
    html = signed_in(olga).get(f"/effects/{effect.id}/").content.decode()
    confirm = KINDS[Action.CONFIRM].question_for(effect)
    assert "{ref}" in confirm
    assert f'data-question="{confirm}"' in html.replace("&#x27;", "'")
