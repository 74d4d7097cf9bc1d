"""Background work known by name (ADR 0022).

Each app lists its jobs in its own `tasks.py`, under names that do not change when code moves:
`register("seal-events", seal.seal_all)`. What is stored outside the code, a django-q2 schedule
row in PostgreSQL or an rq job in Redis, names one function only, the dispatcher `run` below,
with the task's name as its first argument. Moving a module then changes the line in `tasks.py`
that names its function, and no stored row and no queued job.

The apps' `tasks` modules are found the first time a name is looked up (as the admin finds
`admin.py`), and by the system checks every management command runs at its start: a name
registered twice stops that process there (`reconcilers.schedules.tasks_are_registered`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

log = logging.getLogger(__name__)

# The one dotted path a schedule row or a queued job stores.
DISPATCHER = "config.tasks.run"


class UnknownTask(LookupError):
    """A job names a task nobody registered: it fails, and says which name."""


class DuplicateTask(ImproperlyConfigured):
    """Two registrations under one name: the process that finds them does not start."""


def _where(func: Callable[..., Any]) -> str:
    return f"{func.__module__}.{func.__qualname__}"


class Registry:
    """Task names and their functions. `_registry` is the name `autodiscover_modules` restores
    when an app's `tasks` module fails to import, so a second attempt does not meet the first
    attempt's half of the names as duplicates."""

    def __init__(self) -> None:
        self._registry: dict[str, Callable[..., Any]] = {}
        self._discovered = False
        self._lock = threading.Lock()

    def register(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        known = self._registry.get(name)
        if known is not None:
            raise DuplicateTask(
                f"The task name {name!r} is registered twice: for {_where(known)} "
                f"and for {_where(func)}."
            )
        self._registry[name] = func
        return func

    def discover(self) -> None:
        """Import every installed app's `tasks` module, once per process."""
        if self._discovered:
            return
        with self._lock:
            if not self._discovered:
                autodiscover_modules("tasks", register_to=self)
                self._discovered = True

    def tasks(self) -> dict[str, Callable[..., Any]]:
        self.discover()
        return dict(self._registry)

    def lookup(self, name: str) -> Callable[..., Any]:
        self.discover()
        func = self._registry.get(name)
        if func is None:
            log.error("no task is registered under the name %r", name)
            raise UnknownTask(f"No task is registered under the name {name!r}.")
        return func


REGISTRY = Registry()
register = REGISTRY.register


def run(name: str, *args: Any, **kwargs: Any) -> Any:
    """What every schedule row and every queued job calls: the task registered as `name`."""
    return REGISTRY.lookup(name)(*args, **kwargs)
