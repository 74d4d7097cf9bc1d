"""gunicorn settings shared by every gunicorn this project starts (`devstack.web.gunicorn_argv`
passes `--config python:config.gunicorn_hooks`).

prometheus_client's multiprocess mode keeps each worker's counters in files under
PROMETHEUS_MULTIPROC_DIR. A worker that exits keeps its counter files (they are still summed:
counts must not fall when a worker is replaced), but its live-gauge files must go, which is
what `mark_process_dead` does.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def pre_fork(server: Any, worker: Any) -> None:
    """The master loads the application before it forks (`--preload`, `devstack.web`): a
    database connection it opened meanwhile must not be shared by its workers' processes."""
    from django.db import connections

    connections.close_all()


def child_exit(server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def post_worker_init(worker: Any) -> None:
    """Before a worker serves: LEDGER_KEYS must be this database's keys
    (`ledger.restore.keyring`; other keys stop the server, since every idempotency key would
    change), and the database is compared with the witness (`ledger.restore`): one that went
    back in time puts the ledger in restore mode before any agent is answered from it. A failed
    witness check is logged, not fatal: the sweep runs it every minute.

    gunicorn writes an access line whenever its logging is configured, as it is below; the
    application already logs every API request (`ledger.requests`) and nginx the rest, so a
    worker keeps gunicorn's access lines only when asked for them (`--access-logfile`, as the
    crash test and the payment-loop benchmark do)."""
    import logging

    from django.db import connection

    if not worker.cfg.accesslog:
        logging.getLogger("gunicorn.access").setLevel(logging.WARNING)

    from ledger.restore.keyring import KeysMismatch, check

    try:
        check()
    except KeysMismatch as exc:
        # gunicorn's "worker failed to boot" code: the arbiter stops rather than retrying.
        logging.getLogger("ledger.restore").critical("refusing to start: %s", exc)
        sys.exit(3)
    try:
        from ledger.restore.mode import check_witness

        check_witness()
    except Exception:
        logging.getLogger("ledger.restore").exception("the start-up witness check failed")
    finally:
        connection.close()


# gunicorn's own lines (booting, worker timeouts) in the same JSON shape as the application's
# (ledger.observability.jsonlog), unless LOG_FORMAT=plain. Card scrubbing may read
# settings.LEDGER_KEYS.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
if os.environ.get("LOG_FORMAT", "json") == "json":
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "ledger.observability.jsonlog.JsonFormatter"}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["console"], "propagate": False},
            "gunicorn.access": {"level": "INFO", "handlers": ["console"], "propagate": False},
        },
    }
