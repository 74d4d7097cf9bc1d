from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView

from ledger.api.app import api
from ledger.overview.scrape import metrics_view
from reconcilers.providers.callbacks import router as callbacks
from reviews.operatorapi.endpoints import router as operator
from reviews.sso import views as sso

# Callbacks in a provider's own signature scheme, beside the agent API and in its document.
api.add_router("/callbacks", callbacks)
# The operator API: a person's token, the page's rules (reviews.operatorapi), in the same document.
api.add_router("/operator", operator)

urlpatterns = [
    path("login/", sso.SignInView.as_view(), name="login"),
    path("logout/", sso.SignOutView.as_view(), name="logout"),
    # Single sign-on's round trip (reviews.sso); 404 while it is not configured.
    path("oidc/authenticate/", sso.SsoStart.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", sso.SsoCallback.as_view(), name="oidc_authentication_callback"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("metrics", metrics_view, name="metrics"),
    # Browsers ask for /favicon.ico whatever the pages link: send them to the SVG. Lazy, as
    # the static storage may not be ready when the URLconf is imported.
    path(
        "favicon.ico",
        RedirectView.as_view(
            url=lazy(static, str)("favicon.svg"), http_method_names=["get", "head"]
        ),
        name="favicon",
    ),
    path("", include("reviews.urls")),
]
