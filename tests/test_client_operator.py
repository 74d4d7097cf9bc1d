"""The Python client's `Operator` against the real ledger over HTTP (live_server): an operator's
script reads the queue and an item, takes the suggested decision, and meets each refusal as its
own exception, all `LedgerClientError`s, with nothing recorded."""

from __future__ import annotations

import pytest
from django.db import connection
from ledger_client import (
    DecisionInvalid,
    DecisionRefused,
    ItemNotFound,
    LedgerClientError,
    Operator,
    OperatorForbidden,
    TokenRefused,
)

from ledger.models import Effect, Reason
from reviews.operatorapi.tokens import issue
from tests.factories import in_review, lookup_found

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def connect(live_server):
    made: list[Operator] = []

    def connect(user, *scopes: str) -> Operator:
        _, raw = issue(user, name="script", scopes=scopes or ("read", "decide"), days=1)
        made.append(Operator(live_server.url, raw, retries=0))
        return made[-1]

    yield connect
    for operator in made:
        operator.close()


@pytest.fixture
def unknown(make_effect) -> Effect:
    effect = make_effect("unknown", attempt=1)
    in_review(effect)
    return effect


def test_a_script_reads_the_queue_and_takes_the_suggested_decision(connect, olga, unknown):
    lookup_found(unknown, "ch_found")
    op = connect(olga)

    [row] = op.queue().items
    assert (row.effect_id, row.suggested) == (str(unknown.id), "confirm")
    assert [r.item for r in op.iter_queue()] == [row.item]
    item = op.item(row.effect_id)
    assert item.offers("confirm") and item.suggested is not None
    decided = op.decide(row.effect_id, **item.suggested.ask)

    assert (decided.action, decided.status, decided.channel) == ("confirm", "confirmed", "api")
    unknown.refresh_from_db()
    assert (unknown.status, unknown.provider_ref) == ("confirmed", "ch_found")
    decision = Effect.objects.get(pk=decided.decision_id)
    assert decision.provenance["channel"] == "api"
    assert op.queue().items == []


def test_each_refusal_is_its_own_exception_and_records_nothing(connect, olga, otto, make_effect):
    email = make_effect("unknown", tool="send_email", attempt=1)
    in_review(email, Reason.NO_LOOKUP)
    mine, reader = connect(olga), connect(olga, "read")
    version = email.version
    mine.decide(
        str(email.id), "retry", reason="never arrived", expected_version=version,
        evidence="mail log: nothing sent", verified_absent=True,
    )  # fmt: skip
    version = mine.item(str(email.id)).effect.version

    with pytest.raises(DecisionRefused) as four_eyes:
        mine.decide(str(email.id), "approve", reason="ok", expected_version=version)
    assert four_eyes.value.code == "four_eyes" and four_eyes.value.status == 409
    with pytest.raises(DecisionInvalid) as incomplete:
        mine.decide(str(email.id), "fail", reason="x", expected_version=version)
    assert "evidence" in incomplete.value.fields
    with pytest.raises(OperatorForbidden) as scope:
        reader.decide(str(email.id), "approve", reason="ok", expected_version=version)
    assert scope.value.code == "insufficient_scope"
    with pytest.raises(ItemNotFound):
        reader.item("00000000-0000-4000-8000-000000000000")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE reviews_operatortoken SET revoked_at = now() WHERE user_id = %s", [olga.pk]
        )
    with pytest.raises(TokenRefused) as revoked:
        mine.queue()
    assert "revoked" in revoked.value.detail
    assert all(
        isinstance(e.value, LedgerClientError) for e in (four_eyes, incomplete, scope, revoked)
    )

    email.refresh_from_db()
    assert email.status == "unknown"
    assert [d.provenance["action"] for d in Effect.objects.filter(parent=email)] == [
        "propose_retry"
    ]
    approved = connect(otto).decide(str(email.id), "approve", reason="ok", expected_version=version)
    assert approved.status == "planned"
