"""The two ways to sign in: a local password, and the identity provider.

`LocalPasswordBackend` is Django's `ModelBackend` that refuses accounts whose person is linked
to the provider, and every account when `LEDGER_LOCAL_LOGIN` is off: their sessions end too,
since Django asks the backend again at every request. django-axes (first in the list) keeps
counting failures and locking as before.

`ProviderBackend` is mozilla-django-oidc's backend, reading its configuration per request
(tests turn single sign-on on and off in one process) and binding accounts by (issuer, subject)
(`reviews.sso.people.bind`), never by email. Inert while single sign-on is off.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from reviews.sso import people
from reviews.sso.provider import SsoRefused, current, endpoint, verify_id_token


class LocalPasswordBackend(ModelBackend):
    def user_can_authenticate(self, user: Any) -> bool:
        if not super().user_can_authenticate(user):
            return False
        if not getattr(settings, "LEDGER_LOCAL_LOGIN", True):
            return False
        return not people.linked_to_provider(user)


class ProviderBackend(OIDCAuthenticationBackend):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # mozilla-django-oidc reads its endpoints here, once; ours come from `current()` at
        # each sign-in, so nothing is read (and nothing can be missing) at construction.
        self.UserModel = User

    @property
    def config(self):  # type: ignore[no-untyped-def]
        config = current()
        if config is None:
            raise SsoRefused("Single sign-on is not configured.", status=404, reason="off")
        return config

    # mozilla-django-oidc reads these attributes in `authenticate`, `get_token` and
    # `get_userinfo`.
    @property
    def OIDC_RP_CLIENT_ID(self) -> str:
        return self.config.client_id

    @property
    def OIDC_RP_CLIENT_SECRET(self) -> str:
        return self.config.client_secret

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:
        return endpoint(self.config, "token")

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:
        return endpoint(self.config, "userinfo")

    def authenticate(self, request: Any, **kwargs: Any) -> User | None:
        if current() is None or request is None or "username" in kwargs:
            return None
        return super().authenticate(request, **kwargs)

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        return verify_id_token(self.config, token, kwargs.get("nonce"))

    def get_or_create_user(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> User | None:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload["sub"]:
            raise SsoRefused(
                "The identity provider's user information names another person than its ID token.",
                reason="userinfo",
            )
        # The ID token's claims, which were verified, win over the userinfo's.
        return people.bind(self.config, {**userinfo, **payload})

    def get_user(self, user_id: Any) -> User | None:
        if current() is None:
            return None  # single sign-on turned off: its sessions end
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None
