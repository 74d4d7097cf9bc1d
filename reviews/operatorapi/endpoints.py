"""The operator API's endpoints: thin views over what the pages use. `config/urls.py` mounts the
router under `/api/v1/operator`, in the agent API's document and with its error shape.

Reads (`read` scope) see what the pages show their person, by their teams as the database has
them now (narrowed to the token's teams, when it names some): another team's effect is a 404,
as on the pages. A decision (`decide` scope) is `reviews.decisions.decide` with channel "api",
so every rule of the page holds, and its refusals are the page's: 403 `outside_teams` or
`not_an_operator`, 409 with the reason code, 422 with `fields`.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest
from ninja import Query, Router
from ninja.responses import Status as Reply

from ledger.api.schemas import ERRORS
from reviews.models import OperatorToken as Token
from reviews.models import TokenScope
from reviews.operatorapi.auth import OperatorToken
from reviews.operatorapi.deciding import decide_as
from reviews.operatorapi.reads import item_view, queue_page
from reviews.operatorapi.schemas import (
    DecisionIn,
    DecisionOut,
    OperatorItemOut,
    QueuePageOut,
    QueueQuery,
)
from reviews.operatorapi.tokens import require

router = Router(tags=["operator"], auth=OperatorToken())


def _token(request: HttpRequest, scope: TokenScope) -> Token:
    token: Token = request.auth  # type: ignore[attr-defined]
    require(token, scope)
    return token


@router.get(
    "/queue",
    response={200: QueuePageOut, **ERRORS},
    summary="The review queue: open items of your teams, oldest first",
    operation_id="listReviewQueue",
)
def queue(request: HttpRequest, filters: Query[QueueQuery]) -> dict[str, Any]:
    return queue_page(_token(request, TokenScope.READ), filters)


@router.get(
    "/effects/{effect_id}",
    response={200: OperatorItemOut, **ERRORS},
    summary="One effect: its open item, the decisions offered to you, the suggested one",
    operation_id="getOperatorItem",
)
def item(request: HttpRequest, effect_id: uuid.UUID) -> dict[str, Any]:
    return item_view(_token(request, TokenScope.READ), effect_id)


@router.post(
    "/effects/{effect_id}/decisions",
    response={201: DecisionOut, **ERRORS},
    summary="Take a decision on an effect, under the page's rules",
    operation_id="decideOnEffect",
)
def decide_on(request: HttpRequest, effect_id: uuid.UUID, payload: DecisionIn) -> Reply:
    return Reply(201, decide_as(_token(request, TokenScope.DECIDE), effect_id, payload))
