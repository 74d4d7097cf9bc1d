"""django-oauth-toolkit's validator with each person's extra claims (groups, teams, names) and
the fault modes a test switches on through the control endpoint."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from oauth2_provider.oauth2_validators import OAuth2Validator

from devstack.idp import state


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Validator(OAuth2Validator):
    # Every claim whatever the scopes asked: the tests choose the claims per person.
    oidc_claim_scope = None

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        return dict(state.claims_of(request.user.get_username()))

    # prompt=none (the ledger's renewals): django-oauth-toolkit's authorize view requires a
    # signed-in, active person before it gets here (anyone else is answered login_required),
    # and the ledger's client skips the consent screen.
    def validate_silent_login(self, request: Any) -> bool:
        return True

    def validate_silent_authorization(self, request: Any) -> bool:
        return True

    def get_id_token_dictionary(self, token, token_handler, request):  # type: ignore[no-untyped-def]
        claims, expiration = super().get_id_token_dictionary(token, token_handler, request)
        if state.fault() == "expired":
            claims["exp"] = int(time.time()) - 3600
        return claims, expiration

    def finalize_id_token(self, id_token, token, token_handler, request):  # type: ignore[no-untyped-def]
        fault = state.fault()
        if fault == "audience":
            id_token["aud"] = "another-application"
        signed = super().finalize_id_token(id_token, token, token_handler, request)
        if fault == "tampered":
            # The payload changed after signing: a role the person does not have.
            header, payload, signature = signed.split(".")
            claims = json.loads(_unb64(payload))
            claims["groups"] = [*claims.get("groups", []), "ledger-admins"]
            signed = ".".join([header, _b64(json.dumps(claims).encode()), signature])
        return signed
