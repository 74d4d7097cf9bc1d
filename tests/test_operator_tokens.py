"""Operator tokens' life on the API tokens page: made by the person with a name, scopes, teams
of their own and an expiry of at most 90 days; shown once and stored as a digest; listed with
their last use; revoked by their person only."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from ledger.models import Team
from ledger.policy.teams import add_member
from reviews.access.counts import forget
from reviews.models import OperatorToken, OperatorTokenUse
from tests.factories import signed_in

TOKEN = re.compile(r"elop_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")


def make(client: Client, **fields) -> tuple[int, str]:
    form = {"name": "on-call script", "scopes": ["read"], "expires_in_days": "30", **fields}
    answer = client.post("/tokens/", form)
    shown = TOKEN.findall(answer.content.decode())
    return answer.status_code, shown[0] if shown else ""


def queue(raw: str):
    return Client().get("/api/v1/operator/queue", headers={"Authorization": f"Bearer {raw}"})


def test_a_token_is_shown_once_and_only_its_digest_is_kept(olga):
    page = signed_in(olga)
    status, raw = make(page, scopes=["read", "decide"])

    assert status == 200 and raw
    token = OperatorToken.objects.get()
    assert (token.user, token.name, token.scopes) == (olga, "on-call script", ["decide", "read"])
    assert token.digest == hashlib.sha256(raw.encode()).hexdigest()
    assert raw.startswith(f"elop_{token.prefix}_")
    # The secret is in no column of any table: only the prefix and the digest are.
    # Everything after "elop_<prefix>_" (the secret's own alphabet holds "_" and "-").
    secret = raw.removeprefix(f"elop_{token.prefix}_")
    assert len(secret) == 43
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(t)::text FROM reviews_operatortoken t")
        assert secret not in cursor.fetchone()[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT expires_at - created_at FROM reviews_operatortoken")
        assert cursor.fetchone()[0] == timedelta(days=30)
    listed = page.get("/tokens/").content.decode()
    assert raw not in listed and TOKEN.search(listed) is None
    assert f"elop_{token.prefix}_…" in listed and "never" in listed
    assert queue(raw).status_code == 200


def test_the_list_shows_the_last_use(olga):
    page = signed_in(olga)
    _, raw = make(page)
    assert queue(raw).status_code == 200
    token = OperatorToken.objects.get()
    assert token.last_used_at is not None
    assert OperatorTokenUse.objects.filter(token=token, outcome="ok").count() == 1
    row = re.search(r'<tr id="token-\d+">.*?</tr>', page.get("/tokens/").content.decode(), re.S)
    assert row is not None and "never" not in row.group(0) and "ago" in row.group(0)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"expires_in_days": "91"}, "expires_in_days"),
        ({"expires_in_days": ""}, "expires_in_days"),
        ({"scopes": []}, "scopes"),
        ({"scopes": ["admin"]}, "scopes"),
        ({"name": ""}, "name"),
    ],
)
def test_a_token_without_an_expiry_within_90_days_a_scope_or_a_name_is_refused(
    olga, fields, problem
):
    status, raw = make(signed_in(olga), **fields)
    assert (status, raw) == (422, "")
    assert not OperatorToken.objects.exists()


def test_teams_offered_are_the_persons_own_and_no_other(olga, tools):
    mine = Team.objects.create(name="Payments", slug="payments")
    other = Team.objects.create(name="Support", slug="support")
    add_member(olga, mine)
    forget()
    page = signed_in(olga)
    form = page.get("/tokens/").content.decode()
    assert "Payments" in form and "Support" not in form

    assert make(page, teams=[str(other.pk)]) == (422, "")
    assert not OperatorToken.objects.exists()
    status, raw = make(page, teams=[str(mine.pk)])
    assert status == 200 and raw
    assert list(OperatorToken.objects.get().teams.all()) == [mine]


def test_a_token_is_revoked_by_its_person_only(olga, otto):
    _, raw = make(signed_in(olga))
    token = OperatorToken.objects.get()

    assert signed_in(otto).post(f"/tokens/{token.pk}/revoke").status_code == 404
    assert queue(raw).status_code == 200
    assert signed_in(olga).post(f"/tokens/{token.pk}/revoke").status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert queue(raw).status_code == 401
    assert "revoked" in signed_in(olga).get("/tokens/").content.decode()


def test_an_auditor_makes_no_token(audrey):
    assert make(signed_in(audrey)) == (403, "")
    assert not OperatorToken.objects.exists()


def test_an_admin_lists_and_revokes_tokens_from_the_shell_without_seeing_them(olga):
    _, raw = make(signed_in(olga))
    token = OperatorToken.objects.get()
    out = StringIO()
    call_command("operatortokens", "list", "--user", "olga", stdout=out)
    assert f"elop_{token.prefix}  olga  'on-call script'  scopes read" in out.getvalue()
    assert raw not in out.getvalue() and "live" in out.getvalue()

    call_command("operatortokens", "revoke", f"elop_{token.prefix}", stdout=StringIO())
    assert queue(raw).status_code == 401
    with pytest.raises(CommandError, match="revoked already"):
        call_command("operatortokens", "revoke", f"elop_{token.prefix}", stdout=StringIO())
    with pytest.raises(CommandError, match="No operator token"):
        call_command("operatortokens", "revoke", "elop_000000000000", stdout=StringIO())
