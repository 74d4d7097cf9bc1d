"""What `GET /health` answers: whether PostgreSQL and Redis answer
(`ledger.observability.readiness`) and, when both do, whether the ledger is in restore mode
(`ledger.restore.mode`: it serves, but puts in doubt what may have been lost)."""

from __future__ import annotations

from dataclasses import dataclass

from ledger.models import RestoreWindow
from ledger.observability.readiness import database_ok, redis_ok
from ledger.restore import mode as restore


@dataclass(frozen=True)
class Health:
    database: bool
    redis: bool
    restore_window: RestoreWindow | None = None  # the open one; asked only when both answer

    @property
    def ready(self) -> bool:
        return self.database and self.redis


def check() -> Health:
    database_up, redis_up = database_ok(), redis_ok()
    if not (database_up and redis_up):
        return Health(database_up, redis_up)
    return Health(database_up, redis_up, restore.current())
