"""Accounts bound to the identity provider, and the persons behind accounts.

An SSO account is found by its (issuer, subject) alone: an email address or a name that the
provider sends is never used to find an account, so two people who swap addresses, or a new
hire given a leaver's address, never sign in as each other. Its username is derived from the
same pair (`username_for`), because decisions and sealed events record `operator:<username>`
forever; the provider's display name goes to the first and last names, which may change.

A binding is made by signing in and never deleted as a row: an admin ends one with `unbind`,
which needs a reason and records who, why and which binding as a decision of the system agent
(run `people`), in the sealed chain like a halt (issue 34, I1).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Q, Subquery
from django.db.models.functions import Now

from ledger.containment.halts import system_agent
from ledger.effects.decision_records import record_standalone_decision
from ledger.errors import ValidationFailed
from ledger.policy.redaction import scrub_cards
from ledger.policy.roles import ADMIN, ROLES
from reviews.models import Account, Identity, Person
from reviews.sso.config import SsoConfig
from reviews.sso.provider import SsoRefused

# The system agent's run under which bindings ended by an admin are recorded.
DECISIONS_RUN = "people"
# A subject kept as it is in the username: Django's username characters, no dot (the dot
# separates the parts, so a hashed subject can never read as a plain one).
PLAIN_SUBJECT = re.compile(r"[A-Za-z0-9_@+-]{1,120}")


def _b32(data: str, length: int) -> str:
    digest = hashlib.sha256(data.encode()).digest()
    return base64.b32encode(digest).decode().lower()[:length]


def username_for(issuer: str, subject: str) -> str:
    """`sso.<issuer hash>.<subject>`, or `sso.<issuer hash>.h.<subject hash>` when the subject
    has characters a username cannot hold or is too long: stable, at most 150 characters, and
    different for every (issuer, subject)."""
    prefix = f"sso.{_b32(issuer, 8)}."
    if PLAIN_SUBJECT.fullmatch(subject):
        return prefix + subject
    return prefix + "h." + _b32(subject, 52)


def claim_values(claims: dict[str, Any], name: str) -> list[str]:
    """A claim's values: a list of strings, or one string (several, space-separated)."""
    value = claims.get(name)
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list | tuple):
        return [str(v) for v in value if isinstance(v, str | int)]
    return []


def roles_from(config: SsoConfig, claims: dict[str, Any]) -> set[str]:
    """The ledger roles the role claim maps to (possibly none)."""
    return {config.roles[v] for v in claim_values(claims, config.role_claim) if v in config.roles}


def set_roles(user: User, roles: set[str]) -> None:
    """Make the user's role groups exactly `roles`: one removed at the provider goes here too."""
    wanted = [Group.objects.get_or_create(name=role)[0] for role in sorted(roles)]
    user.groups.remove(*Group.objects.filter(name__in=ROLES).exclude(name__in=roles))
    user.groups.add(*wanted)
    admin = ADMIN in roles
    if user.is_staff != admin or user.is_superuser != admin:
        user.is_staff = user.is_superuser = admin
        user.save(update_fields=["is_staff", "is_superuser"])
    user.__dict__.pop("_ledger_roles", None)


def _names(user: User, claims: dict[str, Any]) -> None:
    first = str(claims.get("given_name") or "")[:150]
    last = str(claims.get("family_name") or "")[:150]
    if not first and not last:
        first = str(claims.get("name") or claims.get("preferred_username") or "")[:150]
    email = str(claims.get("email") or "")[:254]
    if (user.first_name, user.last_name, user.email) != (first, last, email):
        user.first_name, user.last_name, user.email = first, last, email
        user.save(update_fields=["first_name", "last_name", "email"])


def _create(issuer: str, subject: str) -> User:
    username = username_for(issuer, subject)
    if User.objects.filter(username=username).exists():
        # Someone made a local account with this name: it is not theirs to take over.
        raise SsoRefused(
            f"The account name {username} is held by another account; an administrator must "
            "rename that account before you can sign in.",
            reason="username_taken",
        )
    user = User.objects.create_user(username)  # no usable password: it signs in through SSO
    Identity.objects.create(issuer=issuer, subject=subject, user=user)
    Account.objects.create(user=user, person=Person.objects.create())
    return user


@transaction.atomic
def bind(config: SsoConfig, claims: dict[str, Any]) -> User:
    """The account of the person the verified claims name, created at their first sign-in, with
    names, roles and teams brought up to date. `SsoRefused` when no role is mapped or the
    account was deactivated here."""
    issuer, subject = str(claims["iss"]), str(claims["sub"])
    roles = roles_from(config, claims)
    if not roles:
        raise SsoRefused(
            "You are signed in at the identity provider, but none of your groups gives you a "
            "role in Effect Ledger (operator, auditor or admin). Ask your administrator to add "
            "you to one of the groups mapped to a role.",
            reason="no_role",
        )
    identity = Identity.objects.select_related("user").filter(issuer=issuer, subject=subject)
    found = identity.first()
    user = found.user if found else _create(issuer, subject)
    if not user.is_active:
        raise SsoRefused("This account is deactivated in Effect Ledger.", reason="inactive")
    # Whether the provider vouches for the email it sent, as of this sign-in (a Slack user of
    # a workspace trusted for it is mapped by that address alone: `reviews.remote.slack`).
    verified = claims.get("email_verified") is True
    Identity.objects.filter(user=user).update(last_seen_at=Now(), email_verified=verified)
    _names(user, claims)
    set_roles(user, roles)
    Person.objects.filter(accounts__user=user, name="").update(name=user.get_full_name())
    if config.team_claim:
        from ledger.policy.teams import set_teams_from_claim

        set_teams_from_claim(user, claim_values(claims, config.team_claim))
    return user


def person_id(user: User | None) -> int | None:
    """The person the account belongs to, or None when it is a person of its own."""
    if user is None or user.pk is None:
        return None
    return Account.objects.filter(user=user).values_list("person_id", flat=True).first()


def same_person(a: User | None, b: User | None) -> bool:
    """Whether two accounts are one human's: the same account, or linked to one person."""
    if a is None or b is None:
        return False
    if a.pk == b.pk:
        return True
    mine = person_id(a)
    return mine is not None and mine == person_id(b)


def accounts_of(user: User) -> Iterable[User]:
    """Every account of the user's person (the user alone when unlinked)."""
    pid = person_id(user)
    if pid is None:
        return [user]
    return User.objects.filter(ledger_account__person_id=pid).order_by("pk")


def linked_to_provider(user: User) -> bool:
    """Whether the account's person signs in through the identity provider: the account is an
    SSO account, or is linked to a person who has one. Such accounts sign in through SSO only.
    One query: Django asks it at every request of a local session (`LocalPasswordBackend`)."""
    person = Account.objects.filter(user=user).values("person_id")[:1]
    return Identity.objects.filter(
        Q(user=user) | Q(user__ledger_account__person_id=Subquery(person))
    ).exists()


@transaction.atomic
def link(user: User, other: User) -> Person:
    """Make `other` an account of `user`'s person (both persons merge into one)."""
    if user.pk == other.pk:
        return person_of(user)
    keep = person_of(user)
    was = person_of(other)
    if was.pk != keep.pk:
        Account.objects.filter(person=was).update(person=keep)
        was.delete()
    return keep


def person_of(user: User) -> Person:
    """The user's person, created for it when it has none yet."""
    account = Account.objects.select_related("person").filter(user=user).first()
    if account is not None:
        return account.person
    person = Person.objects.create(name=user.get_full_name() or user.get_username())
    Account.objects.create(user=user, person=person)
    return person


@transaction.atomic
def unlink(user: User) -> Person:
    """Give the account a person of its own again."""
    Account.objects.filter(user=user).delete()
    return person_of(user)


def unbind(identity: Identity, *, reason: str, by: str) -> bool:
    """End an account's binding to the identity provider, recorded in the same transaction as a
    decision (who, why, the account, issuer and subject). The provider's person then no longer
    signs in as this account (a sign-in is refused: the account name is held), and accounts
    linked to its person may use their passwords again. `ValidationFailed` without a reason;
    False when the binding was gone already (nothing recorded)."""
    # Typed by a person: a card number in it is tokenized like any stored text.
    reason = scrub_cards((reason or "").strip())
    if not reason or len(reason) > 2000:
        raise ValidationFailed("Give a reason.", {"reason": "1 to 2000 characters"})
    with transaction.atomic():
        found = (
            Identity.objects.select_for_update()
            .select_related("user")
            .filter(pk=identity.pk)
            .first()
        )
        if found is None:
            return False
        account = found.user.get_username()
        details = {"account": account, "issuer": found.issuer, "subject": found.subject}
        record_standalone_decision(
            system_agent(),
            target=f"identity:{account}",
            run_id=DECISIONS_RUN,
            key=f"identity:{found.pk}:decision:unbind",
            action="unbind_identity",
            reason=reason,
            asked=details,
            actor=by,
            details=details,
        )
        found.delete()
    return True
