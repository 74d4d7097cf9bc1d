"""People and their accounts: who is behind a username.

A `Person` is a human; each Django `User` (an account) belongs to at most one person through
`Account`. An account without that row is a person of its own. An account created by single
sign-on is bound to the identity provider by `Identity`: the issuer and the subject of its ID
tokens, never its email address. An admin links a local account and an SSO account of the same
human to one person (`manage.py linkaccounts`, or the admin), and four-eyes then compares
persons (`reviews.decisions.approvals`).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now

__all__ = ["Account", "Identity", "Person"]


class Person(models.Model):
    """A human, whatever accounts they sign in with."""

    name = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return self.name or f"person #{self.pk}"


class Account(models.Model):
    """One account (a Django user) of a person."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ledger_account"
    )
    person = models.ForeignKey(Person, on_delete=models.PROTECT, related_name="accounts")

    def __str__(self) -> str:
        return f"{self.user_id} of {self.person_id}"


class Identity(models.Model):
    """An account's binding to the identity provider: (issuer, subject), as its ID tokens say.
    The username of the account is derived from them once (`reviews.sso.people.username_for`)
    and never changes, whatever the provider later says about the name or the email."""

    issuer = models.CharField(max_length=1000)
    subject = models.CharField(max_length=255)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    created_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    # Whether the provider said, at the last sign-in, that the account's email address (the
    # user's `email`) is verified (`email_verified`). Only such an address may map a Slack
    # user of a workspace trusted for it to this account (`reviews.remote.slack.people`).
    email_verified = models.BooleanField(default=False, db_default=False)

    class Meta:
        verbose_name_plural = "identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="identity_iss_sub_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
