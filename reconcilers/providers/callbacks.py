"""Callbacks in a provider's own signature scheme: `POST /api/v1/callbacks/{provider}`.

`provider` is a tool's `webhook_provider`; the scheme is that of the tools' adapter (its
`callbacks`, a `CallbackScheme`), and its secrets are the provider's in
LEDGER_WEBHOOK_SECRETS (two while one rotates). A scheme checks the request as the provider
signs it and reads what it says of effects (`Settlement`s, found by the idempotency key the
effect carried to the provider). The ledger's own scheme stays at `/webhooks/{provider}`.

A request whose signature is missing, bad, stale or replayed is refused (401) with nothing
written; a verified one is recorded once (`ledger.api.webhooks.accept_delivery`), then each
settlement is applied as any callback is (`ledger.api.webhooks.settle`). What names no effect
of the provider, or says nothing the ledger acts on (an event of another kind), is counted as
ignored and answered 200, so that the provider does not send it again and again.

A scheme may also answer a verified request in its own way, when the provider checks the
address before it sends anything (Slack's `url_verification`): its optional
`handshake(request)` returns the JSON object to answer with, or None for a delivery. A
handshake is answered 200 with that object and nothing is recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.db import transaction
from django.http import HttpRequest
from ninja import Router, Schema
from ninja.responses import Status as Reply

from ledger.api import webhooks
from ledger.api.schemas import ERRORS
from ledger.api.webhooks import BadSignature
from ledger.errors import InvalidTransition, NotFound, ValidationFailed
from ledger.models import Effect, Mode, Tool

log = logging.getLogger(__name__)


class CallbackRefused(BadSignature):
    """A callback whose signature does not hold (401, nothing written)."""


@dataclass(frozen=True)
class CallbackRequest:
    """A callback as it arrived: its headers (names in lower case), the raw body, the URL the
    provider called (Twilio signs it), and the provider's secrets, the newest first."""

    headers: Mapping[str, str]
    body: bytes
    url: str
    secrets: Sequence[str]


@dataclass(frozen=True)
class Settlement:
    """What a callback says of one effect: the effect's idempotency key (as it travelled to the
    provider), `confirmed` or `failed`, the provider's reference and its record."""

    idempotency_key: str
    status: str
    provider_ref: str = ""
    response: Any = None
    # The provider's test or live mode, when its callback says (Stripe's `livemode`): it
    # settles only an effect of a tool of the same mode. None: the scheme does not say.
    livemode: bool | None = None


class CallbackScheme(Protocol):
    name: str

    def verify(self, request: CallbackRequest) -> str:
        """The delivery's identity (a replay presents it again), or `CallbackRefused`."""
        ...

    def settlements(self, body: bytes) -> list[Settlement]:
        """What a verified body says of effects; `ValueError` for a body it cannot read."""
        ...

    # Optional: `handshake(request: CallbackRequest) -> dict[str, str] | None`, the answer to
    # a verified request that checks the address rather than delivers (module docstring).


def handshake(scheme: CallbackScheme, request: CallbackRequest) -> dict[str, str] | None:
    """The scheme's own answer to a verified request, when it is a handshake."""
    answer = getattr(scheme, "handshake", None)
    return None if answer is None else answer(request)


class CallbacksOut(Schema):
    settled: list[str]
    ignored: int


def scheme_of(provider: str) -> CallbackScheme:
    """The scheme of the adapter whose tools name this provider (`loadtools` keeps it one)."""
    from reconcilers.providers import provider_class

    for reconciler in (
        Tool.objects.filter(webhook_provider=provider).values_list("reconciler", flat=True)
    ).distinct():
        adapter = provider_class(reconciler)
        if adapter is not None and adapter.callbacks is not None:
            return adapter.callbacks
    raise NotFound("No provider of this name takes callbacks in its own scheme.")


router = Router(tags=["webhooks"])


@router.post(
    "/{provider}",
    auth=None,
    # A delivery's account, or a handshake's answer in the provider's terms (a challenge).
    response={200: CallbacksOut | dict[str, str], **ERRORS},
    summary="A provider's callback in its own signature scheme (Stripe, Slack, GitHub, …)",
    operation_id="receiveProviderCallback",
    openapi_extra={
        "requestBody": {
            "content": {"application/json": {"schema": {"type": "object"}}},
            "description": "The provider's own body, as it signed it.",
        }
    },
)
def provider_callback(request: HttpRequest, provider: str) -> Reply:
    return Reply(200, receive(provider[:100], request))


def receive(provider: str, request: HttpRequest) -> dict[str, Any]:
    """A callback of `provider` as it arrived: verified in its scheme, then a handshake's
    answer, or each settlement applied and the account of them (`CallbacksOut`)."""
    scheme = scheme_of(provider)
    secrets = webhooks.secrets_of(provider)
    if not secrets:
        raise NotFound(f"No secret is configured for provider {provider!r}.")
    incoming = CallbackRequest(
        headers={name.lower(): value for name, value in request.headers.items()},
        body=request.body,
        url=request.build_absolute_uri(),
        secrets=secrets,
    )
    delivery = scheme.verify(incoming)
    answer = handshake(scheme, incoming)
    if answer is not None:
        return answer
    try:
        said = scheme.settlements(request.body)
    except ValueError as exc:
        detail = f"The callback cannot be read: {exc}"[:300]
        raise ValidationFailed(detail, {"body": "not what the provider sends"}) from None
    for settlement in said:
        webhooks.check_ref(settlement.provider_ref)
    webhooks.accept_delivery(provider, delivery)
    settled, ignored = apply(provider, said)
    return {"settled": settled, "ignored": ignored}


def apply(provider: str, said: list[Settlement]) -> tuple[list[str], int]:
    """Each settlement applied on its own; what names no effect, or cannot move it, ignored."""
    settled: list[str] = []
    ignored = 0
    for settlement in said:
        effect_id = settle_one(provider, settlement)
        if effect_id is None:
            ignored += 1
        else:
            settled.append(effect_id)
    return settled, ignored


def _same_mode(effect: Effect, settlement: Settlement, provider: str) -> bool:
    """A test-mode event settles only a test tool's effect, a live one only a live tool's."""
    if settlement.livemode is None:
        return True
    said = Mode.LIVE if settlement.livemode else Mode.TEST
    mode = Tool.objects.filter(name=effect.tool).values_list("mode", flat=True).first()
    if mode == said:
        return True
    log.warning(
        "callback of %s: a %s-mode event names effect %s of a %s tool; ignored",
        provider,
        said,
        effect.id,
        mode,
    )
    return False


# Reads of an effect that moved while a settlement was applied, before it counts as ignored.
SETTLE_TRIES = 3


def settle_one(provider: str, settlement: Settlement) -> str | None:
    """Apply one settlement; the effect's id, or None when it names no effect or cannot move
    it. An effect that moved meanwhile (a reconciler's lookup that found nothing turned it
    unknown) is read again and settled from where it is now: the provider's word must not be
    lost to a race, since the 200 tells the provider not to send it again."""
    payload = {
        "status": settlement.status,
        "provider_ref": settlement.provider_ref,
        "response": settlement.response,
    }
    for _ in range(SETTLE_TRIES):
        effect = webhooks.effect_of(provider, settlement.idempotency_key)
        if effect is None or not _same_mode(effect, settlement, provider):
            return None
        try:
            with transaction.atomic():
                webhooks.settle(effect, provider, payload)
        except InvalidTransition as exc:
            log.info("callback of %s for %s: %s", provider, effect.id, exc)
            if Effect.objects.filter(id=effect.id, version=effect.version).exists():
                return None  # it has not moved: it cannot move this way
            continue
        return str(effect.id)
    return None
