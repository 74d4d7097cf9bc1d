"""POST /control/ with `Authorization: Bearer <IDP_CONTROL_TOKEN>` and a JSON body:

- {"action": "person", "username", "password", "claims": {...}, "active": true}: create or
  update a person and the extra claims of their tokens (groups, teams, names);
- {"action": "remove", "username"}: deactivate a person (their session here ends);
- {"action": "fault", "mode": "" | "tampered" | "expired" | "audience"};
- {"action": "client", "client_id", "client_secret", "redirect_uris": [...],
  "post_logout_redirect_uris": [...]}: register the relying party.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest, JsonResponse
from django.utils.crypto import constant_time_compare
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from oauth2_provider.models import get_application_model

from devstack.idp import state


def _person(body: dict[str, Any]) -> dict[str, Any]:
    user, _ = User.objects.get_or_create(username=body["username"])
    # A new hash would end the person's session here (Django checks it): set it only when it
    # changes.
    if body.get("password") and not user.check_password(body["password"]):
        user.set_password(body["password"])
    user.is_active = bool(body.get("active", True))
    user.save()
    state.set_claims(user.username, body.get("claims", {}))
    return {"sub": str(user.pk)}


def _remove(body: dict[str, Any]) -> dict[str, Any]:
    User.objects.filter(username=body["username"]).update(is_active=False)
    return {}


def _client(body: dict[str, Any]) -> dict[str, Any]:
    application = get_application_model()
    app = application.objects.filter(client_id=body["client_id"]).first() or application(
        client_id=body["client_id"]
    )
    app.name = "Effect Ledger"
    app.client_secret = body["client_secret"]
    app.client_type = application.CLIENT_CONFIDENTIAL
    app.authorization_grant_type = application.GRANT_AUTHORIZATION_CODE
    app.redirect_uris = " ".join(body["redirect_uris"])
    app.post_logout_redirect_uris = " ".join(body.get("post_logout_redirect_uris", []))
    app.algorithm = application.RS256_ALGORITHM
    app.skip_authorization = True
    app.save()
    return {}


ACTIONS = {
    "person": _person,
    "remove": _remove,
    "client": _client,
    "fault": lambda body: state.set_fault(body.get("mode", "")) or {},
}


@csrf_exempt
@require_POST
def control(request: HttpRequest) -> JsonResponse:
    token = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if not settings.CONTROL_TOKEN or not constant_time_compare(token, settings.CONTROL_TOKEN):
        return JsonResponse({"error": "forbidden"}, status=403)
    try:
        body = json.loads(request.body)
        return JsonResponse(ACTIONS[body["action"]](body))
    except (KeyError, ValueError, TypeError) as exc:
        return JsonResponse({"error": str(exc)}, status=400)
