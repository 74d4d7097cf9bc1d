"""The operator API's door: `Authorization: Bearer elop_…`, an operator's personal token.

Its own scheme in the OpenAPI document (`OperatorToken`), beside the agent API's `AgentKey`: an
agent key is no operator token (refused 401 here), and the agent API's door refuses a token.
"""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer

from ledger.observability import logcontext
from reviews.models import OperatorToken as Token
from reviews.models import TokenScope
from reviews.operatorapi.tokens import REQUIRED, TokenRefused, authenticate


class OperatorToken(HttpBearer):
    openapi_description = (
        "An operator's personal token, `Authorization: Bearer elop_…`, made on the operator "
        "pages (API tokens, under the person's name). It acts as that person: their role and "
        "teams are checked on every call."
    )

    def __call__(self, request: HttpRequest) -> Token:
        # Every refusal in the API's error shape with what was wrong (401, or 403 for a person
        # who may no longer act), not ninja's generic answer for a missing credential.
        scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            raise TokenRefused(REQUIRED)
        return self.authenticate(request, raw.strip())

    def authenticate(self, request: HttpRequest, token: str) -> Token:
        # Reads need `read`, a decision (the one write) `decide`: checked at the door, so that
        # the recorded use says so too.
        method = request.method or ""
        scope = TokenScope.READ if method in ("GET", "HEAD") else TokenScope.DECIDE
        found = authenticate(token, method, request.path, scope)
        # Read by the middleware that marks a signed-in person's answers `no-store`.
        request.user = found.user
        request.operator_token = found  # type: ignore[attr-defined]
        logcontext.bind(operator=found.user.get_username(), operator_token=found.pk)
        return found
