"""`manage.py decide EFFECT_ID ACTION --reason "…" --as USERNAME`: a decision taken on the server,
for when the pages cannot be reached (break-glass).

EFFECT_ID is the effect's id, as the effect page's address and the queue show it (not a review
item's number: a decision is on an effect, open item or not). ACTION is a decision kind
(`confirm`, `fail`, `retry`, `compensate`, `cancel`, `approve`, `reject`, `not_duplicate`,
`accept_record`, `extra_attempt`), with the fields the kind needs (`--provider-ref`,
`--evidence`, …), exactly as the effect page's form asks them.

The decision is `reviews.decisions.decide`, as from the page, taken as the person named by
`--as`: an active account with the operator role (or admin) and the effect's team, and four-eyes
compares persons (whoever asked for what waits cannot approve it). It is recorded with channel
`command` and, as `via`, the server account that ran the command; a warning is logged. Every
refusal is a `CommandError` naming the page's reason code (`four_eyes`, `outside_teams`,
`not_an_operator`, `already_decided`, …), and nothing is written but, for a decision that lost a
race, the note of its evidence the page keeps too.
"""

from __future__ import annotations

import getpass
import json
import logging
import socket
import uuid
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.errors import LedgerError, ValidationFailed
from ledger.models import Effect
from reviews.decisions.decide import AlreadyDecided, Ask, decide
from reviews.decisions.kinds import ACTIONS, KINDS
from reviews.queue import notes

log = logging.getLogger("reviews.breakglass")


def _effect(effect_id: str) -> Effect:
    try:
        found = Effect.objects.filter(pk=uuid.UUID(effect_id)).first()
    except ValueError:
        found = None
    if found is None:
        raise CommandError(f"No effect with the id {effect_id!r} (give the effect's id).")
    return found


def _person(username: str) -> User:
    try:
        return User.objects.get(username=username)
    except User.DoesNotExist:
        raise CommandError(f"No account named {username!r}.") from None


def _request(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CommandError(f"--compensation-request is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CommandError("--compensation-request must be a JSON object.")
    return value


def _runner() -> str:
    """Who ran the command, on which host: what the decision records as `via`."""
    try:
        account = getpass.getuser()
    except (KeyError, OSError):
        account = "unknown"
    return f"manage.py decide, run by {account} on {socket.gethostname()}"


class Command(BaseCommand):
    help = "Take a decision on an effect as an operator, from the server (break-glass)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("effect_id", help="the effect's id (not a review item's number)")
        parser.add_argument("action", choices=ACTIONS)
        parser.add_argument("--reason", required=True, help="why (every decision needs one)")
        parser.add_argument(
            "--as", dest="username", required=True, metavar="USERNAME", help="the operator"
        )
        parser.add_argument("--provider-ref", default="")
        parser.add_argument("--evidence", default="")
        parser.add_argument(
            "--verified-absent",
            action="store_true",
            help="you checked with the provider: it never received the request",
        )
        parser.add_argument("--compensation-tool", default="")
        parser.add_argument("--compensation-request", default="", metavar="JSON")
        parser.add_argument(
            "--force", action="store_true", help="compensate although dependents may have acted"
        )
        parser.add_argument(
            "--over-hold", action="store_true", help="decide although another operator holds it"
        )
        parser.add_argument(
            "--expected-version",
            type=int,
            default=None,
            help="refuse if the effect moved past this version (default: as it is now)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = _person(options["username"])
        effect = _effect(options["effect_id"])
        ask = self._ask(options, effect)
        try:
            decided = decide(effect.pk, ask, user=user)
        except ValidationFailed as exc:
            fields = exc.extra.get("fields", {})
            problems = "; ".join(f"--{k.replace('_', '-')}: {v}" for k, v in fields.items())
            raise CommandError(f"refused ({exc.code}): {exc.detail} {problems}") from None
        except AlreadyDecided as exc:
            notes.keep_lost_decision(effect.pk, user, ask, exc)
            raise CommandError(f"refused ({exc.code}): {exc.detail}") from None
        except LedgerError as exc:
            raise CommandError(f"refused ({exc.code}): {exc.detail}") from None
        log.warning(
            "break-glass decision %s (%s) on effect %s as %s: %s",
            decided.decision.pk,
            decided.decision.provenance.get("action"),
            effect.pk,
            user.get_username(),
            ask.via,
        )
        self.stdout.write(
            f"Decision {decided.decision.pk} recorded ({decided.decision.provenance.get('action')}"
            f", channel command): effect {effect.pk} is now {decided.target.status}."
        )
        if decided.follow_up is not None:
            self.stdout.write(f"Compensation {decided.follow_up.pk} recorded.")

    def _ask(self, options: dict[str, Any], effect: Effect) -> Ask:
        """The ask as the page's form makes it: a field the action does not read never
        decides."""
        shown = KINDS[options["action"]].fields
        expected = options["expected_version"]
        return Ask(
            action=options["action"],
            reason=options["reason"],
            expected_version=effect.version if expected is None else expected,
            provider_ref=options["provider_ref"],
            evidence=options["evidence"],
            verified_absent=options["verified_absent"] and "verified_absent" in shown,
            compensation_tool=options["compensation_tool"] if "compensation_tool" in shown else "",
            compensation_request=_request(options["compensation_request"]),
            force=options["force"] and "force" in shown,
            over_hold=options["over_hold"],
            channel="command",
            via=_runner(),
        )
