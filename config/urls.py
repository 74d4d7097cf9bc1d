from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView

from ledger.api.endpoints import api
from ledger.observability.metrics import metrics_view

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
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
