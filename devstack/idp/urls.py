from django.contrib.auth import views as auth_views
from django.urls import include, path

from devstack.idp.control import control

urlpatterns = [
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("control/", control, name="control"),
]
