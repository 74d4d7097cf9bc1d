"""Notes on review items: operators write them on the effect page, everyone who reads the
effect sees them, nobody edits or deletes them; and a decision that lost a race is kept as one."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, transaction
from django.test import Client

from ledger.models import Effect, Reason, ReviewItem
from ledger.rules.reviewqueue import open_review
from reviews.decisions.decide import AlreadyDecided, Ask, decide
from reviews.models import ReviewNote
from reviews.queue.notes import MAX_NOTE, keep_lost_decision
from tests.factories import signed_in

VISA = "4111111111111111"


@pytest.fixture
def unknown(make_effect) -> Effect:
    """An unknown charge waiting in the review queue."""
    effect = make_effect("unknown", attempt=1)
    open_review(effect.id, Reason.INCONCLUSIVE)
    return effect


def item_of(effect: Effect) -> ReviewItem:
    return ReviewItem.objects.filter(effect=effect).latest("opened_at")


def post_note(client: Client, effect: Effect, text: str, *, htmx: bool = True):
    headers = {"HX-Request": "true"} if htmx else {}
    return client.post(f"/queue/{item_of(effect).pk}/notes", {"text": text}, headers=headers)


def test_an_operator_adds_a_note_and_gets_the_panel_with_it_focused(olga, unknown):
    response = post_note(signed_in(olga), unknown, "Called the bank: they see nothing yet.")

    assert response.status_code == 200
    [note] = ReviewNote.objects.filter(effect_id=unknown.id)
    assert (note.author, note.kind, note.item_id) == (olga, "note", item_of(unknown).pk)
    html = response.content.decode()
    assert 'id="item-panel"' in html
    assert f'id="note-{note.pk}" tabindex="-1" autofocus data-new-note' in html
    assert "Called the bank: they see nothing yet." in html


def test_a_plain_form_post_goes_back_to_the_effect_page_at_the_note(olga, unknown):
    response = post_note(signed_in(olga), unknown, "plain post", htmx=False)

    note = ReviewNote.objects.get(effect_id=unknown.id)
    assert response.status_code == 302
    assert response["Location"] == f"/effects/{unknown.id}/#note-{note.pk}"


def test_card_numbers_in_a_note_are_redacted_before_they_are_stored(olga, unknown):
    post_note(signed_in(olga), unknown, f"customer read out {VISA} on the phone")

    note = ReviewNote.objects.get(effect_id=unknown.id)
    assert VISA not in note.text and "customer read out" in note.text
    page = signed_in(olga).get(f"/effects/{unknown.id}/").content.decode()
    assert VISA not in page


@pytest.mark.parametrize("text", ["", "   \n  "])
def test_an_empty_note_is_refused_with_422_and_a_message(olga, unknown, text):
    response = post_note(signed_in(olga), unknown, text)

    assert response.status_code == 422
    assert "empty" in response.content.decode()
    assert 'role="alert"' in response.content.decode()
    assert not ReviewNote.objects.exists()


def test_a_too_long_note_is_refused_with_422_and_what_was_typed_is_kept(olga, unknown):
    text = "x" * (MAX_NOTE + 1)
    response = post_note(signed_in(olga), unknown, text)

    assert response.status_code == 422
    html = response.content.decode()
    assert f"at most {MAX_NOTE} characters" in html and text in html
    assert not ReviewNote.objects.exists()
    plain = post_note(signed_in(olga), unknown, text, htmx=False)
    assert plain.status_code == 422 and "at most" in plain.content.decode()


def test_a_note_on_an_item_that_does_not_exist_is_404(olga):
    response = signed_in(olga).post("/queue/999999/notes", {"text": "hello"})
    assert response.status_code == 404


def test_an_auditor_cannot_add_a_note_but_reads_every_note(olga, audrey, unknown):
    post_note(signed_in(olga), unknown, "olga's note")

    refused = post_note(signed_in(audrey), unknown, "auditor's note")
    assert refused.status_code == 403
    assert ReviewNote.objects.count() == 1
    page = signed_in(audrey).get(f"/effects/{unknown.id}/").content.decode()
    assert "olga&#x27;s note" in page
    assert 'id="note-text"' not in page  # no form for a reader
    assert 'id="hold-item"' not in page


def test_a_user_without_a_role_can_neither_add_nor_read_notes(olga, nemo, unknown):
    assert post_note(signed_in(nemo), unknown, "hi").status_code == 403
    assert signed_in(nemo).get(f"/effects/{unknown.id}/").status_code == 403


def test_a_signed_out_visitor_is_sent_to_sign_in_and_no_note_is_kept(unknown):
    response = post_note(Client(), unknown, "anonymous", htmx=False)
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert not ReviewNote.objects.exists()


def test_a_note_without_a_csrf_token_is_refused(olga, unknown):
    client = Client(enforce_csrf_checks=True)
    client.force_login(olga)
    assert post_note(client, unknown, "forged").status_code == 403
    assert not ReviewNote.objects.exists()


def test_a_note_needs_a_post(olga, unknown):
    assert signed_in(olga).get(f"/queue/{item_of(unknown).pk}/notes").status_code == 405


def test_notes_stay_with_the_item_after_it_resolves_and_show_oldest_first(olga, otto, unknown):
    post_note(signed_in(olga), unknown, "first, before the decision")
    decide(unknown.id, Ask("fail", "declined", unknown.version, evidence="x"), user=otto)
    unknown.refresh_from_db()
    post_note(signed_in(otto), unknown, "second, after it")

    item = item_of(unknown)
    assert item.resolved_at is not None
    assert list(item.notes.order_by("id").values_list("text", flat=True)) == [
        "first, before the decision",
        "second, after it",
    ]
    page = signed_in(olga).get(f"/effects/{unknown.id}/").content.decode()
    assert page.index("first, before the decision") < page.index("second, after it")
    assert "(on the latest, resolved item)" in page


def test_notes_cannot_be_edited_or_deleted_even_in_sql(olga, unknown):
    post_note(signed_in(olga), unknown, "what I found")
    note = ReviewNote.objects.get()

    with pytest.raises(DatabaseError), transaction.atomic():
        ReviewNote.objects.filter(pk=note.pk).update(text="something else")
    with pytest.raises(DatabaseError), transaction.atomic():
        ReviewNote.objects.filter(pk=note.pk).delete()
    assert ReviewNote.objects.get().text == "what I found"


# --- A decision that lost a race ---------------------------------------------------------------


def test_a_lost_decision_is_kept_as_a_note_naming_who_won(olga, otto, unknown):
    seen = unknown.version
    decide(unknown.id, Ask("fail", "declined", seen, evidence="bank said no"), user=olga)
    late = Ask("confirm", f"paid, card {VISA}", seen, provider_ref="ch_77", evidence="dashboard")
    with pytest.raises(AlreadyDecided) as lost:
        decide(unknown.id, late, user=otto)

    note = keep_lost_decision(unknown.id, otto, late, lost.value)

    assert note is not None
    assert (note.author, note.kind, note.item_id) == (otto, "lost_decision", item_of(unknown).pk)
    assert note.details["won_by"] == "olga"
    assert (note.details["provider_ref"], note.details["evidence"]) == ("ch_77", "dashboard")
    assert "olga decided first" in note.text and VISA not in note.text
    assert VISA not in str(note.details)
    page = signed_in(olga).get(f"/effects/{unknown.id}/").content.decode()
    assert "lost decision: olga decided first" in page and "ch_77" in page


def test_a_lost_decision_on_an_effect_without_review_items_keeps_nothing(otto, make_effect):
    effect = make_effect("unknown", attempt=1)
    refusal = AlreadyDecided("Already decided by olga", decided_by="olga")

    assert keep_lost_decision(effect.id, otto, Ask("fail", "x", 1), refusal) is None
    assert not ReviewNote.objects.exists()


def test_two_operators_deciding_through_the_page_leave_the_loser_s_evidence(olga, otto, unknown):
    body = {"version": unknown.version, "reason": "checked", "confirm": "on"}
    first = signed_in(olga).post(
        f"/effects/{unknown.id}/decide/fail", {**body, "evidence": "declined"}
    )
    assert first.status_code == 302
    second = signed_in(otto).post(
        f"/effects/{unknown.id}/decide/confirm",
        {**body, "provider_ref": "ch_5", "evidence": "otto saw it paid"},
    )

    assert second.status_code == 409
    # The decide view (engineer A's) keeps the loser's ask through keep_lost_decision.
    note = ReviewNote.objects.get(effect_id=unknown.id)
    assert (note.author, note.kind, note.details["won_by"]) == (otto, "lost_decision", "olga")
    assert note.details["evidence"] == "otto saw it paid"
