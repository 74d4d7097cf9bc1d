"""The operator pages: overview, queue and effect detail, read through the Django test client
(the browser tests drive the same pages in Chromium)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ledger.effects.transitions import record_event
from ledger.models import Effect, EffectDependency, Reason, ReviewItem
from ledger.overview.summary import summary
from ledger.policy import configversion
from ledger.rules.reviewqueue import open_review
from reviews.queue import pages as review_queue
from tests.factories import signed_in


def queries_for(client: Client, path: str, **headers: str) -> int:
    # The tools' cache re-reads the configuration version when its copy is half a second old:
    # expired here, every page that reads a tool's policy counts that read, however fast the
    # test runs.
    configversion.expire()
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path, headers=headers)
    assert response.status_code == 200, response.content[:500]
    return len(captured)


def backdate_review(effect: Effect, days: float) -> None:
    item = ReviewItem.objects.get(effect=effect, resolved_at__isnull=True)
    item.opened_at -= timedelta(days=days)
    item.due_at -= timedelta(days=days)
    item.save(update_fields=["opened_at", "due_at"])


def queued(make_effect, n: int, **fields) -> list[Effect]:
    effects = [make_effect("unknown", attempt=1, **fields) for _ in range(n)]
    for effect in effects:
        open_review(effect.id, Reason.INCONCLUSIVE)
    return effects


# --- Overview --------------------------------------------------------------------------------


def test_the_overview_counts_effects_by_status_and_tool(olga, make_effect):
    make_effect("confirmed")
    make_effect("unknown", tool="send_email")
    make_effect("unknown", tool="send_email")
    page = signed_in(olga).get("/")
    assert page.status_code == 200
    by_status = page.context["by_status"]
    assert dict(by_status)["unknown"] == 2 and dict(by_status)["confirmed"] == 1
    tools = {tool: total for tool, _, total in page.context["by_tool"]}
    assert tools == {"charge_card": 1, "send_email": 2}


def test_the_overview_charts_open_review_items_by_age(olga, make_effect):
    _fresh, old, older = queued(make_effect, 3)
    backdate_review(old, 2)
    backdate_review(older, 8)
    page = signed_in(olga).get("/")
    ages = dict(page.context["ages"])
    assert (ages["< 1 h"], ages["1–3 d"], ages["> 7 d"]) == (1, 1, 1)
    html = page.content.decode()
    assert "<svg" in html and 'class="bar late"' in html


def test_the_overview_names_the_oldest_unresolved_effect_and_blocked_branches(olga, make_effect):
    first = make_effect("unknown")
    waiting = make_effect("planned")
    EffectDependency.objects.create(downstream=waiting, upstream=first)
    Effect.objects.filter(pk=first.pk).update(created_at=first.created_at - timedelta(days=3))
    page = signed_in(olga).get("/")
    assert page.context["oldest"].id == first.id
    assert page.context["blocked_total"] == 1
    assert page.context["blocked"][0]["id"] == waiting.id


def test_the_overview_shows_recent_recovery_activity(olga, make_effect):
    effect = make_effect("unknown")
    record_event(effect.id, kind="reconciliation", actor="system:reconciler", reason="not_found")
    page = signed_in(olga).get("/")
    assert [e.effect_id for e in page.context["activity"]] == [effect.id]


def test_the_overview_refreshes_its_panels_through_htmx(olga):
    client = signed_in(olga)
    full = client.get("/").content.decode()
    assert 'hx-trigger="every 5s"' in full
    partial = client.get("/", headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<div id="panels"') and "<html" not in partial


def unknown_effects(client: Client) -> int:
    return dict(client.get("/").context["by_status"])["unknown"]


def test_the_overview_counts_from_the_summary_not_from_the_effects_each_time(olga, make_effect):
    make_effect("unknown")
    client = signed_in(olga)
    assert unknown_effects(client) == 1  # the process's first read of the summary
    make_effect("unknown")
    with CaptureQueriesContext(connection) as captured:
        assert unknown_effects(client) == 1  # as counted a moment ago
    assert not any("GROUP BY" in q["sql"] for q in captured.captured_queries)


@pytest.mark.django_db(transaction=True)
def test_while_the_overview_polls_a_thread_keeps_its_counts_fresh(olga, make_effect, settings):
    settings.LEDGER_METRICS_REFRESH = 1
    make_effect("unknown")
    client = signed_in(olga)
    assert unknown_effects(client) == 1
    make_effect("unknown")
    deadline = time.monotonic() + 10
    # Each poll is answered at once from the summary at hand, until the thread has re-read it.
    while unknown_effects(client) != 2:
        assert time.monotonic() < deadline, "the summary was not refreshed"
        time.sleep(0.2)


# --- Queue ------------------------------------------------------------------------------------


def test_the_queue_lists_open_items_with_due_time_and_marks_overdue_ones(olga, make_effect):
    fresh, late = queued(make_effect, 2)
    backdate_review(late, 8)
    html = signed_in(olga).get("/queue/").content.decode()
    assert f'id="item-{ReviewItem.objects.get(effect=fresh).pk}"' in html
    assert html.count('class="overdue"') == 1


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=unknown", {"a", "b"}),
        ("status=planned", {"c"}),
        ("tool=send_email", {"b"}),
        ("run=other-run", {"c"}),
        ("reason=no_lookup", {"c"}),
        ("age=gt7d", {"a"}),
        ("age=overdue", {"a"}),
        ("age=lt1d", {"b", "c"}),
        ("assignee=none", {"b", "c"}),
        ("assignee=me", {"a"}),
        ("agent=alice", {"a", "b", "c"}),
        ("agent=nobody", set()),
        ("state=resolved", set()),
    ],
)
def test_the_queue_filters(olga, make_effect, query, expected):
    effects = {
        "a": make_effect("unknown"),
        "b": make_effect("unknown", tool="send_email"),
        "c": make_effect("planned", run_id="other-run"),
    }
    open_review(effects["a"].id, Reason.INCONCLUSIVE)
    open_review(effects["b"].id, Reason.INCONCLUSIVE)
    open_review(effects["c"].id, Reason.NO_LOOKUP)
    backdate_review(effects["a"], 8)
    ReviewItem.objects.filter(effect=effects["a"]).update(assignee=olga)
    page = signed_in(olga).get(f"/queue/?{query}")
    assert page.status_code == 200
    found = {item.effect_id for item in page.context["page"]}
    assert found == {effects[name].id for name in expected}


def test_a_filter_that_matches_nothing_says_so(olga, make_effect):
    queued(make_effect, 1)
    html = signed_in(olga).get("/queue/?tool=nothing-like-it").content.decode()
    assert "0 items." in html and "Nothing to review with these filters." in html


def test_a_bad_filter_value_is_a_400_not_a_500(olga):
    assert signed_in(olga).get("/queue/?status=exploded").status_code == 400
    assert signed_in(olga).get("/queue/?sort=sideways").status_code == 400


def test_the_queue_sorts_and_pages(olga, make_effect):
    effects = queued(make_effect, 55)
    for age, effect in enumerate(effects):
        backdate_review(effect, age / 100)
    client = signed_in(olga)
    first = client.get("/queue/?sort=opened")
    assert first.context["page"].num_pages == 2
    assert first.context["page"][0].effect_id == effects[-1].id  # the oldest
    assert "55 items." in first.content.decode() and "Page 1 of 2" in first.content.decode()
    newest = client.get("/queue/?sort=-opened&page=2")
    # Newest first: page 2 holds the five oldest, from the least old on.
    assert [i.effect_id for i in newest.context["page"]] == [e.id for e in effects[-5:]]
    # A page past the end shows the last one, as does anything that is not a page number.
    assert client.get("/queue/?page=9").context["page"].number == 2
    assert client.get("/queue/?page=last").context["page"].number == 1


def test_past_the_count_cap_the_queue_says_more_than_and_still_pages_on(
    olga, make_effect, monkeypatch
):
    monkeypatch.setattr(review_queue, "COUNT_CAP", 60)
    monkeypatch.setattr(review_queue, "PAGE_SIZE", 25)
    queued(make_effect, 80)
    client = signed_in(olga)
    html = client.get("/queue/").content.decode()
    assert "More than 60 items." in html and "Page 1</span>" in html and 'rel="next"' in html
    last = client.get("/queue/?page=4")
    assert len(last.context["page"]) == 5 and not last.context["page"].has_next
    assert 'rel="next"' not in last.content.decode()


def test_the_queue_sorts_by_the_age_of_the_effects(olga, make_effect):
    effects = queued(make_effect, 3)
    for days, effect in zip((1, 3, 2), effects, strict=True):
        Effect.objects.filter(pk=effect.pk).update(created_at=effect.created_at - timedelta(days))
    ReviewItem.objects.all().delete()
    for effect in effects:
        open_review(effect.id, Reason.INCONCLUSIVE)  # copies the effects' creation times
    page = signed_in(olga).get("/queue/?sort=effect_created").context["page"]
    assert [i.effect_id for i in page] == [effects[1].id, effects[2].id, effects[0].id]


def test_the_queue_shows_the_items_copies_of_their_effects_tool_agent_and_run(olga, make_effect):
    [effect] = queued(make_effect, 1, tool="send_email", run_id="run-copies")
    html = signed_in(olga).get("/queue/?tool=send_email&agent=alice&run=run-copies").content
    row = html.decode().split(f'data-effect="{effect.id}"')[1].split("</tr>")[0]
    assert '<span class="tool">send_email</span>' in row and "alice" in row and "run-copies" in row


def test_holding_takes_an_item_once(olga, otto, make_effect):
    [effect] = queued(make_effect, 1)
    item = ReviewItem.objects.get(effect=effect)
    first = signed_in(olga).post(f"/queue/{item.pk}/hold", headers={"HX-Request": "true"})
    assert first.status_code == 200 and "olga" in first.content.decode()
    second = signed_in(otto).post(f"/queue/{item.pk}/hold", headers={"HX-Request": "true"})
    assert "Already held by olga" in second.content.decode()
    item.refresh_from_db()
    assert item.assignee == olga


def test_an_operator_assigns_an_item_and_the_row_updates_in_place(olga, otto, make_effect):
    [effect] = queued(make_effect, 1)
    item = ReviewItem.objects.get(effect=effect)
    response = signed_in(olga).post(
        f"/queue/{item.pk}/assign", {"assignee": otto.pk}, headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert html.lstrip().startswith(f'<tr id="item-{item.pk}"')
    item.refresh_from_db()
    assert item.assignee == otto


def test_without_javascript_a_hold_redirects_back_to_the_queue(olga, make_effect):
    [effect] = queued(make_effect, 1)
    item = ReviewItem.objects.get(effect=effect)
    response = signed_in(olga).post(f"/queue/{item.pk}/hold", {"next": "/queue/?tool=x"})
    assert response.status_code == 302 and response["Location"] == "/queue/?tool=x"


def test_an_auditor_sees_the_queue_without_actions_and_cannot_hold(audrey, make_effect):
    [effect] = queued(make_effect, 1)
    client = signed_in(audrey)
    html = client.get("/queue/").content.decode()
    assert "/hold" not in html and "/assign" not in html
    item = ReviewItem.objects.get(effect=effect)
    assert client.post(f"/queue/{item.pk}/hold").status_code == 403
    assert client.post(f"/queue/{item.pk}/claim").status_code == 403
    item.refresh_from_db()
    assert item.assignee is None
    detail = client.get(f"/effects/{effect.id}/").content.decode()
    assert "Record decision" not in detail


# --- Effect detail ----------------------------------------------------------------------------


def test_the_effect_page_shows_timeline_reconciliations_dependencies_and_decisions(
    olga, make_effect
):
    upstream = make_effect("confirmed", provider_ref="ch_0")
    effect = make_effect("unknown", request={"amount": "5.00", "card": "[card:abc]"})
    downstream = make_effect("planned")
    EffectDependency.objects.create(downstream=effect, upstream=upstream)
    EffectDependency.objects.create(downstream=downstream, upstream=effect)
    record_event(
        effect.id,
        kind="transition",
        actor="agent:alice",
        from_status="dispatching",
        to_status="unknown",
        reason="timeout",
    )
    record_event(
        effect.id,
        kind="reconciliation",
        actor="system:reconciler",
        reason="inconclusive",
        data={"outcome": "inconclusive", "detail": "provider answered 503"},
    )
    html = signed_in(olga).get(f"/effects/{effect.id}/").content.decode()
    assert "provider answered 503" in html
    assert "dispatching → unknown" in html
    assert str(upstream.effect_key) in html and str(downstream.effect_key) in html
    assert "[card:abc]" in html
    for action in ("confirm", "fail", "retry"):
        assert f'id="decide-{action}"' in html
    assert 'id="decide-cancel"' not in html


def test_page_queries_do_not_grow_with_the_rows(olga, make_effect):
    client = signed_in(olga)
    # One more than a page: page 2 has rows (and their suggestions) in both counts.
    queued(make_effect, review_queue.PAGE_SIZE + 1)
    effect = make_effect("unknown")
    record_event(effect.id, kind="transition", actor="a", reason="x")

    def counted() -> dict[str, int]:
        summary.expire()  # the overview's first read of the summary is counted in
        return {
            "overview": queries_for(client, "/"),
            "overview, summary at hand": queries_for(client, "/"),
            "queue": queries_for(client, "/queue/"),
            "queue, filtered, page 2": queries_for(client, "/queue/?tool=charge_card&page=2"),
            "detail": queries_for(client, f"/effects/{effect.id}/"),
        }

    counted()  # once first: a tool's policy is read once per process, then cached
    few = counted()
    queued(make_effect, 60)
    for i in range(40):
        record_event(effect.id, kind="reconciliation", actor="system:reconciler", reason=str(i))
        child = make_effect("planned")
        EffectDependency.objects.create(downstream=child, upstream=effect)
    assert counted() == few
