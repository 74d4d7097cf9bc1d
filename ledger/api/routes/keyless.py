"""The doors that take no agent key: a provider's signed callback in the ledger's own scheme
(`ledger.api.webhooks`; providers' own schemes are `reconcilers.providers.callbacks`), and the
health check."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status as Reply

from ledger.api import health as checks
from ledger.api import webhooks
from ledger.api.schemas import ERRORS, EffectOut, HealthOut, WebhookIn
from ledger.api.serialize import answer_dict, health_dict

router = Router()


@router.post(
    "/webhooks/{provider}",
    auth=None,
    response={200: EffectOut, **ERRORS},
    summary="Signed provider callback, matched by idempotency key",
    operation_id="receiveProviderWebhook",
    tags=["webhooks"],
)
def provider_webhook(request: HttpRequest, provider: str, payload: WebhookIn) -> dict[str, Any]:
    signature = request.headers.get("X-Ledger-Signature", "")
    settled = webhooks.receive(provider[:100], signature, request.body, payload.model_dump())
    return answer_dict(settled, settled.effect.agent.name)


@router.get(
    "/health",
    auth=None,
    response={200: HealthOut, 503: HealthOut},
    exclude_none=True,
    summary="Liveness and readiness",
    operation_id="getHealth",
    tags=["health"],
)
def health(request: HttpRequest) -> Reply:
    checked = checks.check()
    return Reply(200 if checked.ready else 503, health_dict(checked))
