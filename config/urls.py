from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from ledger.api import api
from ledger.metrics import metrics_view

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("metrics", metrics_view, name="metrics"),
    path("", include("reviews.urls")),
]
