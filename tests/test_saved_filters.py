"""Saved queue filters: each operator's own, saved and deleted by CSRF-protected posts, with bad
input refused as a 4xx."""

from __future__ import annotations

import pytest
from django.test import Client

from reviews.models import SavedFilter
from tests.factories import signed_in


def saved_links(client: Client) -> str:
    html = client.get("/queue/").content.decode()
    return html.split('aria-label="Saved filters"')[1].split("</nav>")[0]


def test_an_operator_saves_the_current_filter_and_finds_it_on_the_queue(olga):
    client = signed_in(olga)
    response = client.post(
        "/queue/filters",
        {"name": "Big charges", "query": "tool=charge_card&reason=duplicate&page=3"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/queue/?tool=charge_card&reason=duplicate"
    links = saved_links(client)
    assert '<a href="/queue/?tool=charge_card&amp;reason=duplicate">Big charges</a>' in links


def test_saving_under_the_same_name_replaces_the_filter(olga):
    client = signed_in(olga)
    client.post("/queue/filters", {"name": "Mine", "query": "assignee=me"})
    client.post("/queue/filters", {"name": "Mine", "query": "assignee=me&sort=due"})
    assert list(SavedFilter.objects.values_list("name", "query")) == [
        ("Mine", "assignee=me&sort=due")
    ]


def test_one_operator_never_sees_or_deletes_anothers_filters(olga, otto):
    signed_in(olga).post("/queue/filters", {"name": "Olga's", "query": "tool=charge_card"})
    saved = SavedFilter.objects.get()
    assert "Olga&#x27;s" not in saved_links(signed_in(otto))
    assert "Olga&#x27;s" in saved_links(signed_in(olga))
    assert signed_in(otto).post(f"/queue/filters/{saved.pk}/delete").status_code == 404
    assert SavedFilter.objects.filter(pk=saved.pk).exists()


def test_an_operator_deletes_their_filter(olga):
    client = signed_in(olga)
    client.post("/queue/filters", {"name": "Old", "query": "age=gt7d"})
    saved = SavedFilter.objects.get()
    response = client.post(f"/queue/filters/{saved.pk}/delete")
    assert response.status_code == 302 and response["Location"] == "/queue/"
    assert not SavedFilter.objects.exists()
    assert ">Old</a>" not in saved_links(client)


def test_saving_and_deleting_need_the_csrf_token(olga):
    client = Client(enforce_csrf_checks=True)
    client.force_login(olga)
    assert client.post("/queue/filters", {"name": "x", "query": ""}).status_code == 403
    saved = SavedFilter.objects.create(owner=olga, name="kept", query="")
    assert client.post(f"/queue/filters/{saved.pk}/delete").status_code == 403
    assert list(SavedFilter.objects.values_list("name", flat=True)) == ["kept"]
    # With the token the page carries, the same post goes through.
    page = client.get("/queue/").content.decode()
    token = page.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    saved_now = client.post(
        "/queue/filters", {"name": "x", "query": "", "csrfmiddlewaretoken": token}
    )
    assert saved_now.status_code == 302


@pytest.mark.parametrize(
    ("form", "why"),
    [
        ({"name": "", "query": "tool=x"}, "Name the filter"),
        ({"name": "   ", "query": "tool=x"}, "Name the filter"),
        ({"name": "n" * 101, "query": "tool=x"}, "Name the filter"),
        ({"name": "bad", "query": "status=exploded"}, "not valid"),
        ({"name": "bad", "query": "sort=sideways"}, "not valid"),
        ({"name": "long", "query": "tool=" + "x" * 2100}, "too long"),
    ],
)
def test_bad_input_is_a_400_and_saves_nothing(olga, form, why):
    response = signed_in(olga).post("/queue/filters", form)
    assert response.status_code == 400 and why in response.content.decode()
    assert not SavedFilter.objects.exists()


def test_filters_are_saved_by_post_only_and_only_by_operators(olga, audrey, nemo):
    assert signed_in(olga).get("/queue/filters").status_code == 405
    assert signed_in(nemo).post("/queue/filters", {"name": "x", "query": ""}).status_code == 403
    assert signed_in(olga).post("/queue/filters", {"name": "x", "query": ""}).status_code == 302
    assert SavedFilter.objects.get().owner == olga


def test_an_auditors_save_is_refused_and_nothing_is_stored(audrey):
    client = signed_in(audrey)
    response = client.post("/queue/filters", {"name": "Mine", "query": "tool=charge_card"})
    assert response.status_code == 403
    assert not SavedFilter.objects.exists()
    # The queue offers an auditor no save form and no delete buttons.
    html = client.get("/queue/").content.decode()
    assert 'id="save-filter"' not in html and "queue/filters" not in html


def test_an_auditor_cannot_delete_a_filter_kept_from_an_earlier_role(audrey):
    saved = SavedFilter.objects.create(owner=audrey, name="From before", query="tool=x")
    assert signed_in(audrey).post(f"/queue/filters/{saved.pk}/delete").status_code == 403
    assert SavedFilter.objects.filter(pk=saved.pk).exists()
