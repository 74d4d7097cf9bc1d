"""The effect page puts our request beside the provider's record, names every provider reference
of a duplicate, shows event data as JSON with its age, and has a favicon."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.effects.transitions import record_event
from ledger.models import EffectEvent, Reason, Tool
from ledger.rules.reviewqueue import open_review
from tests.factories import add_event, signed_in, tampering

RECORD = {
    "id": "ch_1",
    "amount": "12.00",
    "currency": "EUR",
    "account": "acct_42",
    "status": "succeeded",
}


def page_of(client: Client, effect) -> str:
    response = client.get(f"/effects/{effect.id}/")
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def compared_rows(html: str) -> dict[str, str]:
    """The comparison table's rows, keyed by their label, as their HTML."""
    table = re.search(r'<section aria-labelledby="compared-h".*?</section>', html, re.S)
    assert table, "no comparison section"
    rows = re.findall(r"<tr[^>]*>\s*<th scope=\"row\">(.*?)</tr>", table[0], re.S)
    return {re.sub(r"<.*", "", row, flags=re.S).strip(): row for row in rows}


def mismatch(make_effect, **request):
    effect = make_effect(
        "unknown", request=request or {"amount": "10.00", "currency": "EUR"}, provider_ref="ch_1"
    )
    record_event(
        effect.id,
        kind="reconciliation",
        actor="system:reconciler",
        reason="provider_mismatch",
        data={"provider_ref": "ch_1", "record": RECORD, "mismatches": ["amount"]},
    )
    return effect


def test_a_mismatch_shows_both_amounts_with_the_differing_row_marked(olga, make_effect):
    effect = mismatch(make_effect)
    rows = compared_rows(page_of(signed_in(olga), effect))
    assert "10.00" in rows["Amount"] and "12.00" in rows["Amount"]
    assert "differs" in rows["Amount"]
    assert "EUR" in rows["Currency"] and "differs" not in rows["Currency"]
    assert "acct_42" in rows["Target (account)"]
    assert "succeeded" in rows["Status"] and "ch_1" in rows["Provider reference (id)"]
    html = page_of(signed_in(olga), effect)
    assert '<tr class="differs">' in html and html.count('<tr class="differs">') == 1


def test_the_latest_record_is_the_one_compared(olga, make_effect):
    effect = mismatch(make_effect)
    record_event(
        effect.id,
        kind="reconciliation",
        actor="provider:sandbox-pay",
        reason="provider_mismatch",
        data={"record": {**RECORD, "currency": "USD"}, "mismatches": ["currency"]},
    )
    rows = compared_rows(page_of(signed_in(olga), effect))
    assert "USD" in rows["Currency"] and "differs" in rows["Currency"]
    assert "differs" not in rows["Amount"]


def test_the_request_is_read_at_the_tools_declared_paths(olga, make_effect, tools):
    Tool.objects.filter(name="charge_card").update(
        amount_path="money.value", currency_path="money.currency"
    )
    effect = mismatch(make_effect, money={"value": "10.00", "currency": "EUR"}, amount="ignored")
    rows = compared_rows(page_of(signed_in(olga), effect))
    assert "10.00" in rows["Amount"] and "ignored" not in rows["Amount"]


def test_an_effect_without_a_record_has_no_comparison(olga, make_effect):
    effect = make_effect("unknown")
    add_event(effect)
    assert 'id="compared"' not in page_of(signed_in(olga), effect)


def test_a_duplicate_item_shows_every_provider_reference(olga, make_effect):
    effect = make_effect("confirmed", provider_ref="ch_ours")
    record_event(
        effect.id,
        kind="late_outcome",
        actor="provider:sandbox-pay",
        reason="duplicate",
        data={"provider_ref": "ch_theirs", "recorded_ref": "ch_ours", "webhook": True},
    )
    record_event(
        effect.id,
        kind="reconciliation",
        actor="system:tailcheck",
        reason="duplicate",
        data={"refs": ["ch_ours", "ch_third"]},
    )
    open_review(effect.id, Reason.DUPLICATE)
    html = page_of(signed_in(olga), effect)
    section = re.search(r'<section aria-labelledby="refs-h".*?</section>', html, re.S)
    assert section and "Provider references" in section[0]
    for ref in ("ch_ours", "ch_theirs", "ch_third"):
        assert section[0].count(f"<code>{ref}</code>") == 1, ref


def test_provider_references_are_not_listed_for_other_review_reasons(olga, make_effect):
    effect = make_effect("unknown", provider_ref="ch_ours")
    open_review(effect.id, Reason.INCONCLUSIVE)
    assert 'id="provider-refs"' not in page_of(signed_in(olga), effect)


def test_the_timeline_shows_event_data_as_json_with_a_relative_time(olga, make_effect):
    effect = mismatch(make_effect)
    html = page_of(signed_in(olga), effect)
    timeline = re.search(r'<table id="timeline">.*?</table>', html, re.S)[0]
    assert "&quot;mismatches&quot;: [" in timeline
    assert "{&#x27;" not in timeline and "{'" not in timeline
    # Long data folds away; the absolute time stays machine-readable beside the relative one.
    assert "<details><summary>data</summary><pre" in timeline
    assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT[^"]+">', timeline)
    assert ">just now</time>" in timeline  # recorded a moment ago


def test_the_timeline_tells_the_age_of_an_old_event(olga, make_effect):
    effect = make_effect("unknown")
    add_event(effect)
    with tampering():  # events are append-only: back-date it as a direct SQL write would
        EffectEvent.objects.filter(effect=effect).update(
            created_at=timezone.now() - timedelta(days=3, hours=2, minutes=1)
        )
    timeline = re.search(
        r'<table id="timeline">.*?</table>', page_of(signed_in(olga), effect), re.S
    )
    assert "3\xa0days, 2\xa0hours ago" in timeline[0]


@pytest.mark.parametrize(
    "request_body", [{"redacted": True}, {"amount": "10.00", "currency": "EUR"}]
)
def test_redacted_events_requests_and_records_render(olga, make_effect, request_body):
    effect = make_effect("unknown", request=request_body)
    add_event(effect, redacted=True)
    record_event(
        effect.id,
        kind="reconciliation",
        actor="system:reconciler",
        reason="provider_mismatch",
        data={"record": {"redacted": True}, "mismatches": ["amount"]},
    )
    html = page_of(signed_in(olga), effect)
    rows = compared_rows(html)
    assert "redacted" in rows["Amount"]
    if request_body.get("redacted"):
        assert rows["Amount"].count("redacted") == 2
    assert "&quot;redacted&quot;: true" in html


def test_an_event_whose_data_is_only_redacted_renders(olga, make_effect):
    effect = make_effect("unknown", request={"redacted": True})
    record_event(
        effect.id,
        kind="reconciliation",
        actor="system:reconciler",
        reason="provider_mismatch",
        data={"redacted": True},
    )
    html = page_of(signed_in(olga), effect)
    assert 'id="compared"' not in html
    assert '<span class="muted">redacted</span>' in html


def test_the_pages_link_the_svg_favicon(olga, make_effect):
    html = signed_in(olga).get("/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in html


def test_favicon_ico_redirects_to_the_svg_which_is_served(db, settings):
    # Served from the finders, as collectstatic has not run for the tests.
    settings.WHITENOISE_USE_FINDERS = True
    client = Client()
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"] == "/static/favicon.svg"
    svg = client.get(response["Location"])
    assert svg.status_code == 200
    assert svg["Content-Type"].startswith("image/svg+xml")
    assert b"<svg" in b"".join(svg.streaming_content)


def test_the_comparison_and_references_add_no_query_per_event(olga, make_effect):
    effect = mismatch(make_effect)
    open_review(effect.id, Reason.DUPLICATE)
    client = signed_in(olga)
    page_of(client, effect)  # the tool's policy is read once, then cached

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            page_of(client, effect)
        # The configuration version is read again whenever this process's copy is older than
        # half a second (`ledger.policy.configversion`): on a busy machine, at any page.
        return len([q for q in captured if "ledger_configversion" not in q["sql"]])

    def late(i: int) -> None:
        record_event(
            effect.id,
            kind="late_outcome",
            actor="provider:sandbox-pay",
            reason="duplicate",
            data={"provider_ref": f"ch_{i + 2}", "recorded_ref": "ch_1", "record": RECORD},
        )

    # The first late outcome may change which decisions the page offers (and so what it
    # reads for them); from then on, more of them must cost nothing more.
    late(0)
    few = queries()
    for i in range(1, 21):
        late(i)
    assert queries() == few
