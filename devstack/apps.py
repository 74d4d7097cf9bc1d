from django.apps import AppConfig


class DevstackConfig(AppConfig):
    """Only for the management commands (crashtest, faultdrill, sandbox): no models, no
    signals. `config.settings` installs it when the package is importable, in a checkout."""

    name = "devstack"
    verbose_name = "Development stack and harnesses"
