from django.apps import AppConfig


class ReconcilersConfig(AppConfig):
    name = "reconcilers"
    verbose_name = "Reconcilers"
