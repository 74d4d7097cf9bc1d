from typing import Any

from django.apps import AppConfig
from django.core import checks


def keys_match_the_database(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every management command that starts a process (the workers, migrate, runserver) runs the
    system checks first: one started with LEDGER_KEYS other than this database's refuses to."""
    from ledger.restore.keyring import KeysMismatch, check

    try:
        check()
    except KeysMismatch as exc:
        return [checks.Error(str(exc), id="ledger.E001")]
    return []


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "Effect ledger"

    def ready(self) -> None:
        checks.register(keys_match_the_database, "ledger_keys")
        from ledger.containment import duplicates
        from ledger.effects import outcomes

        # A move may find a duplicate; what a duplicate means is an act of a floor above it.
        outcomes.duplicate_found.connect(duplicates.on_late_report, dispatch_uid="late-duplicate")
        from ledger.restore import incarnation

        incarnation.watch()
