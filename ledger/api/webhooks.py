"""Signed provider callbacks, matched to effects by idempotency key.

Signature: header `X-Ledger-Signature: t=<unix seconds>,v1=<hex>` where the hex is
HMAC-SHA256(provider secret, "<t>.<raw body>"). A timestamp outside the tolerance window or a
signature seen before is refused.

A card number in anything a callback brings in that is kept (the provider ref, the response)
is tokenized first, with the same keyed token the outcome path uses, so that refs still match.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from ledger.containment.duplicates import report_duplicate
from ledger.effects.agentcalls import Answer, answer
from ledger.effects.transitions import Superseded, transition
from ledger.errors import InvalidTransition, LedgerError, NotFound, ValidationFailed
from ledger.models import Effect, EventKind, Reason, Tool, WebhookDelivery
from ledger.models.states import TERMINAL, Status
from ledger.policy.redaction import excerpt, scrub_cards
from ledger.policy.tools import policy_for
from ledger.rules.events import record_event
from ledger.rules.matching import differences
from ledger.rules.reviewqueue import open_review

_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_RESOLVABLE = (Status.DISPATCHING, Status.AWAITING_CONFIRMATION, Status.UNKNOWN)
_LONGEST_REF = 500  # Effect.provider_ref


class BadSignature(LedgerError):
    status, code = 401, "unauthorized"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def secrets_of(provider: str) -> list[str]:
    """The provider's callback secrets, the newest first (two while one rotates): from
    LEDGER_WEBHOOK_SECRETS and LEDGER_WEBHOOK_OLD_SECRETS."""
    secrets = [settings.LEDGER_WEBHOOK_SECRETS.get(provider)]
    secrets.append(settings.LEDGER_WEBHOOK_OLD_SECRETS.get(provider))
    return [secret for secret in secrets if secret]


def verify(provider: str, header: str, body: bytes) -> str:
    """Check the signature; returns its MAC, which identifies this delivery. During a rotation
    a provider has two secrets (LEDGER_WEBHOOK_OLD_SECRETS holds the old one): either signs."""
    secret = settings.LEDGER_WEBHOOK_SECRETS.get(provider)
    if secret is None:
        raise NotFound(f"No webhook is configured for provider {excerpt(provider)}.")
    old = settings.LEDGER_WEBHOOK_OLD_SECRETS.get(provider)
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    # Unix seconds in ASCII digits; a longer number cannot be a time within the window (and
    # one of hundreds of digits would overflow the float comparison below).
    if not _TIMESTAMP.fullmatch(parts.get("t", "")) or "v1" not in parts:
        raise BadSignature("Missing or malformed X-Ledger-Signature header.")
    timestamp, given = int(parts["t"]), parts["v1"]
    if abs(time.time() - timestamp) > settings.LEDGER_WEBHOOK_TOLERANCE:
        raise BadSignature("The signature's timestamp is outside the accepted window.")
    for candidate in (secret, old) if old else (secret,):
        expected = sign(candidate, timestamp, body).split("v1=", 1)[1]
        if hmac.compare_digest(expected.encode(), given.encode()):
            return expected
    raise BadSignature("The signature does not match.")


def receive(provider: str, header: str, body: bytes, payload: dict[str, Any]) -> Answer:
    """A callback as it arrived (`POST /webhooks/{provider}`): its signature header checked
    against the raw body, then applied; the effect it settled, as the API shows it."""
    return answer(deliver(provider, verify(provider, header, body), payload))


def deliver(provider: str, signature: str, payload: dict[str, Any]) -> Effect:
    """Apply a verified callback in the ledger's own scheme to the effect it names."""
    # Checked before the delivery is recorded, so that a refusal uses up no signature.
    check_ref(payload.get("provider_ref") or "")
    accept_delivery(provider, signature)
    effect = effect_of(provider, payload["idempotency_key"])
    if effect is None:
        raise NotFound("No effect of this provider has this idempotency key.")
    return settle(effect, provider, payload)


def check_ref(ref: str) -> None:
    if len(scrub_cards(ref)) > _LONGEST_REF:
        raise ValidationFailed(
            "The provider ref is too long.",
            {"provider_ref": f"longer than {_LONGEST_REF} characters once cards are tokenized"},
        )


def accept_delivery(provider: str, signature: str) -> None:
    """Record a verified delivery by its signature; a signature seen before is a replay."""
    try:
        with transaction.atomic():
            WebhookDelivery.objects.create(provider=provider, signature=signature[:128])
    except IntegrityError:
        raise BadSignature("This signature was already used (replayed delivery).") from None


def effect_of(provider: str, idempotency_key: str) -> Effect | None:
    """The effect a callback of this provider names. Only effects of a tool that names this
    provider: one provider's signature must not settle another provider's effects."""
    return (
        Effect.objects.filter(idempotency_key=idempotency_key)
        .filter(tool__in=Tool.objects.filter(webhook_provider=provider).values("name"))
        .first()
    )


def settle(effect: Effect, provider: str, payload: dict[str, Any]) -> Effect:
    """What a verified callback says of an effect (`status` confirmed or failed, and the
    provider's `provider_ref` and `response`), applied as the ledger applies any outcome."""
    to = Status(payload["status"])
    redact = policy_for(effect.tool).redactor
    ref = redact.text(payload.get("provider_ref") or "")
    if effect.status == to and (not ref or ref == effect.provider_ref):
        return effect
    if _another_record(effect, ref):
        return _keep_as_duplicate(effect, provider, ref, payload)
    if effect.status not in _RESOLVABLE:
        raise InvalidTransition(f"The effect is already {effect.status}.", status=effect.status)
    mismatches = _differs(effect, payload.get("response")) if to == Status.CONFIRMED else []
    if mismatches:
        evidence = {
            "provider_ref": ref,
            "webhook": True,
            "mismatches": mismatches,
            # The provider's record, so that ours and theirs can be shown side by side.
            "record": redact(payload["response"]),
        }
        return _hold_for_review(effect, provider, evidence)
    changes: dict[str, Any] = {}
    if ref:
        changes["provider_ref"] = ref
    if payload.get("response") is not None:
        changes["response"] = redact(payload["response"])
    try:
        return transition(
            effect,
            to,
            actor=f"provider:{provider}",
            reason="webhook",
            changes=changes,
            data={"provider_ref": changes.get("provider_ref", ""), "webhook": True},
        )
    except Superseded:
        raise InvalidTransition("The effect changed while the callback was applied.") from None


def _differs(effect: Effect, record: Any) -> list[str]:
    """A confirmation counts only if what the provider recorded matches what we asked for."""
    return differences(effect, record) if isinstance(record, dict) else []


def _hold_for_review(effect: Effect, provider: str, evidence: dict[str, Any]) -> Effect:
    """`evidence` is redacted already: it goes into the append-only event log, on the move to
    unknown, or as the provider's word on an effect that is unknown already."""
    actor = f"provider:{provider}"
    with transaction.atomic():
        if effect.status != Status.UNKNOWN:
            try:
                effect = transition(
                    effect, Status.UNKNOWN, actor=actor, reason=Reason.MISMATCH.value, data=evidence
                )
            except Superseded:
                raise InvalidTransition(
                    "The effect changed while the callback was applied."
                ) from None
        else:
            record_event(
                effect.id,
                kind=EventKind.RECONCILIATION,
                actor=actor,
                from_status=effect.status,
                to_status=effect.status,
                reason=Reason.MISMATCH.value,
                data=evidence,
            )
        open_review(effect.id, Reason.MISMATCH)
    return effect


def _another_record(effect: Effect, ref: str) -> bool:
    """Does the callback speak of a record the effect does not hold? A provider ref other than
    the one a settled effect recorded, or any ref for an effect sent again on a proof of
    absence (planned once more): the first request landed after all."""
    if not ref:
        return False
    if effect.status in TERMINAL:
        return bool(effect.provider_ref) and ref != effect.provider_ref
    return effect.status == Status.PLANNED and effect.attempt > 0


def _keep_as_duplicate(effect: Effect, provider: str, ref: str, payload: dict[str, Any]) -> Effect:
    """Keep the callback as a late outcome and report the duplicate; the effect stays as it
    is. Answered 200: the delivery was taken, and a retried delivery would add nothing."""
    evidence = {"provider_ref": ref, "status": str(payload["status"]), "webhook": True}
    report_duplicate(
        effect.id,
        effect.tool,
        status=effect.status,
        actor=f"provider:{provider}",
        kind=EventKind.LATE_OUTCOME,
        evidence={**evidence, "recorded_ref": effect.provider_ref},
    )
    return effect
