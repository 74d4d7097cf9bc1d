"""People, not usernames: SSO accounts bound by (issuer, subject), their stable usernames, roles
from claims, linked accounts, and four-eyes comparing persons (reviews.sso.people,
reviews.decisions.approvals). The sign-in itself, through a real provider, is in
tests/browser/test_sso_browser.py."""

from __future__ import annotations

import io
import re
from dataclasses import replace

import pytest
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.management import call_command
from django.db import connection
from django.test import Client

from ledger.models import Effect, Team
from ledger.policy.teams import teams_of
from reviews.decisions.approvals import SecondPairNeeded, check_second_pair, is_asker
from reviews.decisions.declaration import Action
from reviews.decisions.offer import allowed_actions
from reviews.models import Identity
from reviews.sso import people
from reviews.sso.config import read
from reviews.sso.provider import SsoRefused
from tests.helpers import PASSWORD

ISSUER = "https://login.example.com/tenant"
CONFIG = read(
    {
        "LEDGER_OIDC_ISSUER": ISSUER,
        "LEDGER_OIDC_CLIENT_ID": "effect-ledger",
        "LEDGER_OIDC_CLIENT_SECRET": "s3cret-s3cret",
        "LEDGER_OIDC_ROLES": '{"ops": "operator", "audit": "auditor", "root": "admin"}',
    }
)


def claims(sub: str, groups: list[str], **more) -> dict:
    return {"iss": ISSUER, "sub": sub, "groups": groups, **more}


# --- usernames ---------------------------------------------------------------------------------


def test_the_username_is_derived_from_issuer_and_subject_and_never_changes():
    name = people.username_for(ISSUER, "00u1abcd")
    assert name == people.username_for(ISSUER, "00u1abcd")
    assert re.fullmatch(r"sso\.[a-z2-7]{8}\.00u1abcd", name)
    assert people.username_for("https://other.example.com", "00u1abcd") != name
    assert people.username_for(ISSUER, "00u1abce") != name


@pytest.mark.parametrize(
    "subject", ["a b", "x" * 400, "user.with.dots", "ünïcode", "h.abc", "../../etc", "'; drop"]
)
def test_any_subject_gives_a_valid_username_of_at_most_150_characters(subject):
    name = people.username_for(ISSUER, subject)
    assert len(name) <= 150
    UnicodeUsernameValidator()(name)
    assert re.fullmatch(r"[A-Za-z0-9._@+-]+", name)
    assert ".h." in name  # hashed: it can never read as another, plain subject


def test_roles_come_from_the_claim_through_the_mapping():
    assert people.roles_from(CONFIG, claims("s", ["ops", "audit", "other"])) == {
        "operator",
        "auditor",
    }
    assert people.roles_from(CONFIG, {"groups": "ops root"}) == {"operator", "admin"}
    assert people.roles_from(CONFIG, {"groups": ["other"]}) == set()
    assert people.roles_from(CONFIG, {"groups": {"ops": True}}) == set()
    assert people.roles_from(CONFIG, {}) == set()


# --- binding -----------------------------------------------------------------------------------


def test_an_account_is_found_by_issuer_and_subject_never_by_email(db):
    first = people.bind(CONFIG, claims("sub-1", ["ops"], email="sam@example.com", name="Sam"))
    second = people.bind(CONFIG, claims("sub-2", ["ops"], email="sam@example.com"))
    assert first.pk != second.pk
    again = people.bind(CONFIG, claims("sub-1", ["ops"], email="new@example.com", name="Sam B"))
    assert again.pk == first.pk
    again.refresh_from_db()
    assert (again.username, again.email, again.first_name) == (
        people.username_for(ISSUER, "sub-1"),
        "new@example.com",
        "Sam B",
    )
    assert Identity.objects.get(user=again).subject == "sub-1"
    assert not again.has_usable_password()


def test_roles_are_taken_again_at_each_sign_in_and_removed_when_the_claim_drops_them(db):
    user = people.bind(CONFIG, claims("sub-1", ["ops", "root"]))
    assert set(user.groups.values_list("name", flat=True)) == {"operator", "admin"}
    assert user.is_staff and user.is_superuser
    user = people.bind(CONFIG, claims("sub-1", ["audit"]))
    user.refresh_from_db()
    assert set(user.groups.values_list("name", flat=True)) == {"auditor"}
    assert not user.is_staff and not user.is_superuser


def test_no_mapped_role_is_refused_and_creates_no_account(db):
    with pytest.raises(SsoRefused, match="none of your groups gives you a role"):
        people.bind(CONFIG, claims("sub-9", ["marketing"]))
    assert not User.objects.exists()


def test_a_local_account_holding_the_derived_name_is_never_taken_over(db):
    User.objects.create_user(people.username_for(ISSUER, "sub-1"), password=PASSWORD)
    with pytest.raises(SsoRefused, match="held by another account"):
        people.bind(CONFIG, claims("sub-1", ["ops"]))
    assert not Identity.objects.exists()


def test_an_account_deactivated_here_is_refused(db):
    user = people.bind(CONFIG, claims("sub-1", ["ops"]))
    User.objects.filter(pk=user.pk).update(is_active=False)
    with pytest.raises(SsoRefused, match="deactivated"):
        people.bind(CONFIG, claims("sub-1", ["ops"]))


def test_teams_come_from_the_team_claim_when_one_is_configured(db):
    payments = Team.objects.create(name="Payments", slug="payments")
    support = Team.objects.create(name="Support", slug="support")
    config = replace(CONFIG, team_claim="teams")
    user = people.bind(config, claims("sub-1", ["ops"], teams=["payments", "Support", "nope"]))
    assert teams_of(User.objects.get(pk=user.pk)) == {payments.pk, support.pk}
    user = people.bind(config, claims("sub-1", ["ops"], teams=["payments"]))
    assert teams_of(User.objects.get(pk=user.pk)) == {payments.pk}
    # Without the setting, the claim changes nothing.
    people.bind(CONFIG, claims("sub-1", ["ops"], teams=[]))
    assert teams_of(User.objects.get(pk=user.pk)) == {payments.pk}


# --- persons and four-eyes ---------------------------------------------------------------------


def asked_by_olga(make_effect) -> Effect:
    effect = make_effect("awaiting_approval")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_effectevent (effect_id, kind, actor, from_status, to_status, "
            "reason, data, digest, created_at) VALUES (%s, 'intent', 'operator:olga', '', "
            "'awaiting_approval', 'intent', '{}'::jsonb, '', now())",
            [effect.id],
        )
    return effect


def test_four_eyes_refuses_another_account_of_the_person_who_asked(olga, otto, make_effect):
    effect = asked_by_olga(make_effect)
    sso_olga = people.bind(CONFIG, claims("olga-at-idp", ["ops"]))
    assert check_second_pair(effect, sso_olga) is None  # not linked yet: another person
    call_command("linkaccounts", "olga", sso_olga.username, stdout=io.StringIO())

    assert people.same_person(olga, sso_olga) and not people.same_person(olga, otto)
    assert is_asker("olga", sso_olga) and not is_asker("olga", otto)
    with pytest.raises(SecondPairNeeded):
        check_second_pair(effect, sso_olga)
    assert Action.APPROVE not in allowed_actions(effect, sso_olga)
    assert Action.APPROVE in allowed_actions(effect, otto)
    assert check_second_pair(effect, otto) is None

    call_command("linkaccounts", "--unlink", "olga", stdout=io.StringIO())
    assert check_second_pair(effect, sso_olga) is None


def test_linking_merges_persons_and_the_command_shows_them(olga, otto):
    out = io.StringIO()
    call_command("linkaccounts", "olga", "otto", stdout=out)
    assert "Linked as" in out.getvalue() and "otto (local)" in out.getvalue()
    assert [u.username for u in people.accounts_of(olga)] == ["olga", "otto"]
    with pytest.raises(Exception, match="No account named 'nobody'"):
        call_command("linkaccounts", "olga", "nobody", stdout=io.StringIO())


# --- local sign-in -----------------------------------------------------------------------------


def test_a_local_account_linked_to_the_provider_cannot_sign_in_with_its_password(olga):
    assert Client().post("/login/", {"username": "olga", "password": PASSWORD}).status_code == 302
    signed_in = Client()
    signed_in.force_login(olga)
    sso_olga = people.bind(CONFIG, claims("olga-at-idp", ["ops"]))
    people.link(olga, sso_olga)

    refused = Client().post("/login/", {"username": "olga", "password": PASSWORD})
    assert refused.status_code == 200 and "did not match" in refused.content.decode()
    # Its open session ends as well.
    assert signed_in.get("/").status_code == 302


def test_local_login_turned_off_refuses_every_password(olga, settings):
    settings.LEDGER_SSO = CONFIG
    settings.LEDGER_LOCAL_LOGIN = False
    page = Client().get("/login/").content.decode()
    assert 'name="password"' not in page and "Sign in with single sign-on" in page
    refused = Client().post("/login/", {"username": "olga", "password": PASSWORD})
    assert refused.status_code == 403
    assert "Signing in with a password is turned off" in refused.content.decode()


def test_without_single_sign_on_the_login_page_is_as_before(olga):
    page = Client().get("/login/").content.decode()
    assert "single sign-on" not in page and 'name="password"' in page
    assert Client().get("/oidc/authenticate/").status_code == 404
    assert Client().get("/oidc/callback/?code=x&state=y").status_code == 404
