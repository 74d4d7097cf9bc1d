"""The SendGrid adapter: a mail sent through SendGrid's v3 Mail Send, found again by the custom
arguments it carried (docs/providers/sendgrid.md).

SendGrid keeps no idempotency keys: every accepted request is another email. What the ledger
can do is label each request with `custom_args` (`ledger_key`, the effect's idempotency key,
and `ledger_effect`, its id) and look for them afterwards in the Email Activity API, or hear
them back in the Event Webhook's events (`events`).

The activity can show that a message was sent; it can never show that one was not. It is a
paid add-on, it is eventually consistent (a new message is missing for a while), it forgets
after its retention (30 days with the add-on), and a search cannot be told apart from one
that silently missed. So a not-found is never `listed`, the backing never `proves_absence`,
and an effect nobody can settle (no message found, no event heard) goes to a person.

What SendGrid's record means for the effect (the ledger's "confirmed" for an email: SendGrid
took the message to deliver it, so sending it again would be a second email):

| the activity shows                                   | the effect                        |
| ---------------------------------------------------- | --------------------------------- |
| processed, delivered, deferred, bounced (any)         | confirmed: it left, or will leave |
| dropped only                                         | failed: SendGrid never sent it    |
| not_delivered without events yet                     | pending: asked again              |
| two requests (X-Message-Ids) under our one key       | duplicate                         |
| nothing                                              | not found, proving nothing        |

The provider's reference is the request's `X-Message-Id` (the part of a message's `msg_id`
before its first dot), the same one the sender reports and the events carry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar

from ledger.models import Effect
from reconcilers.providers.base import AdapterBase, Backing, secret_variable
from reconcilers.providers.outcomes import (
    Lookup,
    duplicate,
    found,
    inconclusive,
    not_found,
)
from reconcilers.providers.sendgrid.activity import Activity, AskLater, custom_args
from reconcilers.providers.sendgrid.events import SCHEME

DEFAULT_BASE_URL = "https://api.sendgrid.com"
# SendGrid states no delay between a send and its activity record; minutes are usual.
SEARCH_LAG = timedelta(minutes=10)
# The Email Activity history add-on keeps 30 days.
RETENTION = timedelta(days=30)
SENT_EVENTS = frozenset({"processed", "delivered", "deferred", "bounced", "opened", "clicked"})


def request_id(msg_id: str) -> str:
    """The request's `X-Message-Id` within a message's `msg_id` (one per recipient)."""
    return msg_id.split(".", 1)[0]


@dataclass
class SendGrid(AdapterBase):
    name: ClassVar[str] = "sendgrid"
    callbacks: ClassVar[Any] = SCHEME

    @classmethod
    def backing(cls, config: dict[str, Any]) -> Backing:
        return Backing(
            honours_key=False,
            lookup=True,
            lookup_consistency="eventual",
            search_lag=SEARCH_LAG,
            proves_absence=False,
            lookup_horizon=RETENTION,
            callbacks="sendgrid",
        )

    @classmethod
    def config_problems(cls, config: dict[str, Any], mode: str) -> list[str]:
        problems = []
        base_url = config.get("base_url", DEFAULT_BASE_URL)
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            problems.append("base_url must be SendGrid's http(s) address")
        if not secret_variable(config, "api_key", mode):
            problems.append(
                "api_key_env must name the environment variable that holds the API key "
                "(one with Email Activity access)"
            )
        return problems

    @property
    def base_url(self) -> str:
        return str(self.config.get("base_url") or DEFAULT_BASE_URL).rstrip("/")

    def lookup(self, effect: Effect) -> Lookup:
        api_key = self.secret("api_key")
        if not api_key:
            return inconclusive("no SendGrid API key in the variable api_key_env names")
        activity = Activity(api_key, self.base_url, self.timeout)
        try:
            messages = activity.search(effect.idempotency_key)
            if not messages:
                return not_found(
                    "no message with our key in the Email Activity, which cannot prove that "
                    "none was sent (eventual, retention-limited)"
                )
            requests: dict[str, list[dict[str, Any]]] = {}
            for message in messages:
                requests.setdefault(request_id(message["msg_id"]), []).append(message)
            details = {
                ref: activity.message(copies[0]["msg_id"]) for ref, copies in requests.items()
            }
        except AskLater as later:
            return inconclusive(later.detail, retry_after=later.retry_after)
        for detail in details.values():
            problem = _not_ours(effect, detail)
            if problem:
                return inconclusive(problem)
        if len(requests) > 1:
            return duplicate(
                sorted(requests), f"SendGrid holds {len(requests)} requests under one key"
            )
        ((ref, listed),) = requests.items()
        detail = details[ref]
        return found(ref, _status(detail, listed), _mismatches(effect, detail), answer=detail)


def _not_ours(effect: Effect, detail: dict[str, Any]) -> str:
    """Why a listed message does not show itself to be this effect's ("" when it does)."""
    args = custom_args(detail)
    if args is None:
        return "the message's custom arguments cannot be read"
    if args.get("ledger_key") != effect.idempotency_key:
        return "the listed message does not carry our key (the search did not filter)"
    if "ledger_effect" in args and args["ledger_effect"] != str(effect.id):
        return "the message carries our key with another effect's id"
    return ""


def _status(detail: dict[str, Any], listed: list[dict[str, Any]]) -> str:
    """confirmed when any copy left (or will), failed when SendGrid dropped it, else pending."""
    names = {event["event_name"] for event in detail.get("events", [])}
    statuses = {message["status"] for message in listed} | {detail["status"]}
    if names & SENT_EVENTS or statuses & {"processed", "delivered"}:
        return "confirmed"
    if "dropped" in names:
        return "failed"
    return "pending"


def _mismatches(effect: Effect, detail: dict[str, Any]) -> list[str]:
    """Where the message differs from the request the effect recorded (`to`, `subject`)."""
    request = effect.request or {}
    differs = []
    to = request.get("to")
    if isinstance(to, str) and to.casefold() != str(detail.get("to_email", "")).casefold():
        differs.append("to")
    subject = request.get("subject")
    if isinstance(subject, str) and subject != detail.get("subject"):
        differs.append("subject")
    return differs
