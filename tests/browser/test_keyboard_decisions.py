"""From the queue to a recorded decision at the keyboard alone, for every decision kind, in
Chromium: move to the row (`j`), press the decision's letter, type what the form needs, send it
with Ctrl+Enter, confirm with Enter. Every key pressed is counted except the characters typed;
each kind takes at most ten, and the decision is in the database. Focus lands where the form
needs input, stays visible, never traps, and the htmx swap still brings the result."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

import pytest
from playwright.sync_api import Page, expect

from ledger.models import Effect, Reason, RetryProposal, ReviewItem, Tool
from ledger.models.states import Kind
from ledger.rules.reviewqueue import open_review
from reviews.decisions.decide import Ask, decide
from reviews.decisions.kinds import KINDS
from tests.browser.test_three_actions import (
    _absent,
    _charged_twice,
    _declined,
    _refused_each_time,
    queued,
)
from tests.factories import lookup

pytestmark = pytest.mark.browser

# The most key presses, besides the characters typed, from the queue to a recorded decision.
MOST = 10
SUBMIT = "Control+Enter"


@dataclass
class Keys:
    """The operator's keyboard: every key pressed is counted, characters typed are not."""

    page: Page
    presses: list[str] = field(default_factory=list)

    def press(self, key: str) -> None:
        self.page.keyboard.press(key)
        self.presses.append(key)

    def type(self, text: str) -> None:
        self.page.keyboard.type(text)


def focused(page: Page) -> str:
    """What has the focus: a field's name, "submit" for a decision's submit button, "confirm"
    for the dialog's confirm button, else the element's tag."""
    return page.evaluate(
        """() => { const el = document.activeElement;
                   if (el.matches('[data-decide-submit]')) return 'submit';
                   if (el.matches('[data-dialog-confirm]')) return 'confirm';
                   return el.name || el.tagName.toLowerCase(); }"""
    )


# --- the items, one per case ------------------------------------------------------------------


def _inconclusive(make_effect, **_: object) -> Effect:
    return queued(make_effect, "unknown", Reason.INCONCLUSIVE, "kb-1:charge", attempt=1)


def _stale_plan(make_effect, **_: object) -> Effect:
    """A planned charge escalated as stale: cancel applies, nothing suggests it."""
    return queued(make_effect, "planned", Reason.STALE, "kb-2:charge", attempt=1)


def _confirmed_but_differs(make_effect, **_: object) -> Effect:
    """A confirmed charge whose provider record differs: compensating it is one way out."""
    effect = make_effect("confirmed", effect_key="kb-4:charge", attempt=1, provider_ref="ch_kb4")
    lookup(
        effect,
        "found",
        provider_ref="ch_kb4",
        status="confirmed",
        mismatches=["amount"],
        record={"id": "ch_kb4", "amount": "12.00", "status": "succeeded"},
    )
    open_review(effect.id, Reason.MISMATCH)
    return effect


def _email_nobody_checked(make_effect, **_: object) -> Effect:
    """An email nobody can look up: a retry on the operator's word waits for a second one."""
    return queued(make_effect, "unknown", Reason.NO_LOOKUP, "kb-3:email", tool="send_email")


def _proposed_by_otto(make_effect, *, otto, **_: object) -> Effect:
    """otto proposed a retry on his word that the relay never got it: it waits for olga."""
    effect = _email_nobody_checked(make_effect)
    ask = Ask(
        action="retry",
        reason="Relay log: never handed over",
        expected_version=effect.version,
        evidence="Mail relay log",
        verified_absent=True,
    )
    decide(effect.id, ask, user=otto)
    assert RetryProposal.objects.filter(effect=effect, decided_at__isnull=True).exists()
    return effect


def _above_threshold(make_effect, *, alice, **_: object) -> Effect:
    """alice's charge above its tool's approval threshold waits in the queue."""
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount",
        currency_path="currency",
        limit_amount_per_day={"EUR": "100000.00"},
        approve_above=Decimal("1000.00"),
    )
    held = alice.intent(step_id="big", request={"amount": "4000.00", "currency": "EUR"})
    return Effect.objects.get(pk=held["id"])


def _given(make: Callable[..., Effect]) -> Callable[..., Effect]:
    """A builder of tests/browser/test_three_actions.py, taking the same arguments as ours."""
    return lambda make_effect, **_: make(make_effect)


T = "Tab"
BACK = "Shift+Tab"


@dataclass(frozen=True)
class Case:
    """One decision from the queue: the item, where the focus lands after the letter, what is
    typed and pressed there, what is recorded and the effect's status after."""

    action: str
    make: Callable[..., Effect]
    lands_on: str
    steps: tuple[str, ...]
    recorded: str
    after: str


CASES = [
    # The reason, evidence and reference typed: nothing suggests these.
    Case(
        "confirm",
        _inconclusive,
        "provider_ref",
        ("'ch_kb1", T, "'Dashboard shows ch_kb1 paid", T, "'Checked by phone"),
        "confirm",
        "confirmed",
    ),
    Case(
        "fail",
        _inconclusive,
        "evidence",
        ("'Dashboard: declined", T, "'The provider declined it"),
        "fail",
        "failed",
    ),
    Case("cancel", _stale_plan, "reason", ("'Customer withdrew the order",), "cancel", "cancelled"),
    Case(
        "compensate",
        _confirmed_but_differs,
        "reason",
        ("'Refund: the customer was charged more",),
        "compensate",
        "confirmed",
    ),
    Case(
        "not_duplicate",
        _given(_charged_twice),
        "evidence",
        ("'Provider shows one charge", T, "'Same charge reported twice"),
        "not_duplicate",
        "confirmed",
    ),
    Case(
        "accept_record",
        _given(_declined),
        "evidence",
        ("'Dashboard: record stands", T, "'Their record is right"),
        "accept_record",
        "failed",
    ),
    Case(
        "extra_attempt",
        _given(_refused_each_time),
        "reason",
        ("'Card limit raised",),
        "extra_attempt",
        "planned",
    ),
    # Four-eyes: a retry on the operator's word is a proposal (its checkbox ticked with Space);
    # another operator's proposal is approved; an intent above the threshold is rejected.
    Case(
        "retry",
        _email_nobody_checked,
        "reason",
        ("'Never reached the relay", BACK, "'Relay log", BACK, "Space"),
        "propose_retry",
        "unknown",
    ),
    Case("approve", _proposed_by_otto, "reason", ("'Relay log agrees",), "approve", "planned"),
    Case("reject", _above_threshold, "reason", ("'Not ordered",), "reject", "cancelled"),
    # Suggested and filled in from the evidence: the focus is on the submit button.
    Case("retry", _given(_absent), "submit", (), "retry", "planned"),
]


def row_to(keys: Keys, effect: Effect) -> None:
    """Press j until the effect's row is the current one."""
    current = "tr.queue-row.is-current"
    for _ in range(keys.page.locator("tr.queue-row").count()):
        keys.press("j")
        if keys.page.locator(current).get_attribute("data-effect") == str(effect.id):
            return
    raise AssertionError(f"no queue row for {effect.effect_key}")


def do(keys: Keys, steps: tuple[str, ...]) -> None:
    """A step starting with ' is typed; any other is a key pressed."""
    for step in steps:
        if step.startswith("'"):
            keys.type(step[1:])
        else:
            keys.press(step)


def decide_from_queue(page: Page, effect: Effect, case: Case) -> Keys:
    keys = Keys(page)
    page.goto("/queue/")
    row_to(keys, effect)
    keys.press(KINDS[case.action].key)
    expect(page).to_have_url(re.compile(rf"/effects/{effect.id}/\?decide={case.action}$"))
    expect(page.locator(f"#decide-{case.action}")).to_have_attribute("open", "")
    page.wait_for_load_state("load")
    assert focused(page) == case.lands_on
    do(keys, case.steps)
    keys.press(SUBMIT)
    expect(page.locator(f"#decide-{case.action} dialog.decide-dialog")).to_be_visible()
    assert focused(page) == "confirm"
    keys.press("Enter")
    return keys


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c.action}-{c.recorded}-{c.lands_on}" for c in CASES]
)
def test_every_decision_kind_is_recorded_from_the_queue_in_at_most_ten_keys(
    signed_in, olga, otto, alice, make_effect, case
):
    effect = case.make(make_effect, otto=otto, alice=alice)
    others = [_inconclusive_other(make_effect, n) for n in range(2)]
    page = signed_in(olga)

    keys = decide_from_queue(page, effect, case)

    result = page.locator("#decision-result")
    expect(result).to_contain_text("Decision recorded")
    expect(result).to_be_focused()
    assert len(keys.presses) <= MOST, keys.presses
    effect.refresh_from_db()
    assert effect.status == case.after
    decisions = Effect.objects.filter(parent=effect, kind=Kind.DECISION).order_by("created_at")
    last = decisions.last()
    assert last is not None and last.provenance["action"] == case.recorded
    assert last.provenance["actor"] == "operator:olga"
    if case.recorded != "propose_retry":
        assert not ReviewItem.objects.filter(effect=effect, resolved_at__isnull=True).exists()
    for other in others:  # the rows passed on the way are untouched
        assert not Effect.objects.filter(parent=other, kind=Kind.DECISION).exists()


def _inconclusive_other(make_effect, n: int) -> Effect:
    return queued(make_effect, "unknown", Reason.INCONCLUSIVE, f"kb-other-{n}:charge", attempt=1)


# --- focus: visible, never trapped; the swap; the keys the controls declare -------------------


def outline_of_focused(page: Page) -> tuple[str, float]:
    """The focused element's outline style and width, as the browser draws it."""
    style, width = page.evaluate(
        """() => { const s = getComputedStyle(document.activeElement);
                   return [s.outlineStyle, parseFloat(s.outlineWidth)]; }"""
    )
    return style, width


def assert_focus_visible(page: Page) -> None:
    style, width = outline_of_focused(page)
    assert style != "none" and width >= 2, (focused(page), style, width)


def inside_decision(page: Page, action: str) -> bool:
    return page.evaluate(f"() => Boolean(document.activeElement.closest('#decide-{action}'))")


def test_focus_is_visible_escape_goes_back_and_tab_leaves_the_form(signed_in, olga, make_effect):
    effect = _stale_plan(make_effect)
    page = signed_in(olga)
    page.goto("/queue/")
    page.keyboard.press("j")
    page.keyboard.press("x")
    page.wait_for_load_state("load")
    reason = page.locator("#decide-cancel").get_by_role("textbox", name=re.compile("Reason"))
    expect(reason).to_be_focused()
    assert_focus_visible(page)

    # Sent empty, the form asks for the reason where it is; nothing opens, nothing is sent.
    page.keyboard.press(SUBMIT)
    expect(reason).to_be_focused()
    expect(page.locator("#decide-cancel dialog.decide-dialog")).to_be_hidden()

    page.keyboard.type("Customer withdrew the order")
    page.keyboard.press(SUBMIT)
    dialog = page.locator("#decide-cancel dialog.decide-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("[data-dialog-confirm]")).to_be_focused()
    assert_focus_visible(page)
    # Esc backs out to the field it left, with what was typed; nothing is recorded.
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(reason).to_be_focused()
    expect(reason).to_have_value("Customer withdrew the order")
    assert not Effect.objects.filter(parent=effect, kind=Kind.DECISION).exists()

    # No trap: Tab moves on past the submit button and out of the decision, Shift+Tab back.
    page.keyboard.press("Tab")
    assert focused(page) == "submit"
    assert_focus_visible(page)
    for _ in range(5):
        if not inside_decision(page, "cancel"):
            break
        page.keyboard.press("Tab")
    assert not inside_decision(page, "cancel")
    page.keyboard.press("Shift+Tab")
    assert inside_decision(page, "cancel")


def test_the_decision_is_swapped_in_by_htmx_and_the_keys_go_on_working(
    signed_in, olga, make_effect
):
    effect = _stale_plan(make_effect)
    page = signed_in(olga)
    page.goto(f"/effects/{effect.id}/")
    page.evaluate("() => { window.sameDocument = true; }")

    page.keyboard.press("x")
    page.keyboard.type("Customer withdrew the order")
    page.keyboard.press(SUBMIT)
    page.keyboard.press("Enter")

    result = page.locator("#decision-result")
    expect(result).to_contain_text("Decision recorded (cancel)")
    expect(result).to_be_focused()
    assert_focus_visible(page)
    # The same document: htmx swapped the page's content in, nothing reloaded.
    assert page.evaluate("() => window.sameDocument === true")
    expect(page.locator("#effect-status")).to_have_text("cancelled")
    effect.refresh_from_db()
    assert effect.status == "cancelled"
    page.keyboard.press("?")
    expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()


def test_each_control_does_what_its_aria_keyshortcut_says(signed_in, olga, make_effect):
    effect = _given(_charged_twice)(make_effect)  # compensate or not a duplicate
    page = signed_in(olga)
    page.goto(f"/effects/{effect.id}/")
    summaries = page.locator("summary[aria-keyshortcuts]")
    assert summaries.count() >= 2
    for summary in summaries.all():
        action = summary.get_attribute("data-decide")
        key = summary.get_attribute("aria-keyshortcuts")
        assert key == KINDS[action].key
        page.locator("h1").click()  # out of any field
        page.keyboard.press(key)
        expect(page.locator(f"#decide-{action}")).to_have_attribute("open", "")
        assert inside_decision(page, action), (action, focused(page))

    help_button = page.get_by_role("button", name="Shortcuts")
    expect(help_button).to_have_attribute("aria-keyshortcuts", "Shift+?")
    page.locator("h1").click()
    page.keyboard.press("Shift+?")
    help_ = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(help_).to_be_visible()
    page.keyboard.press("Escape")
    help_button.click()
    expect(help_).to_be_visible()
    page.keyboard.press("Escape")

    # The queue: the current row's suggested decision is its link's declared key.
    page.goto("/queue/")
    page.keyboard.press("j")
    suggest = page.locator("tr.queue-row.is-current a[data-suggest]")
    action = suggest.get_attribute("data-suggest")
    expect(suggest).to_have_attribute("aria-keyshortcuts", KINDS[action].key)
    page.keyboard.press(KINDS[action].key)
    expect(page).to_have_url(re.compile(rf"/effects/{effect.id}/\?decide={action}$"))
    page.wait_for_load_state("load")
    assert inside_decision(page, action)
