"""What a provider adapter is: a class with a `name`, built from a tool's `reconciler_config`
and the tool's mode, that declares what it can back (`Backing`) and answers `lookup`.

Optional abilities, each a method the ledger looks for:

| method                              | what it lets the ledger do                              |
| ----------------------------------- | ------------------------------------------------------- |
| `execute(effect) -> Sent`           | send the effects it originates (an operator's refund)   |
| `list_window(start, end) -> Listing`| account for a window restore mode lost                  |
| `fetch_statement(start, end)`       | fetch the provider's report of a day (`statement_fetch`)|

A provider's callbacks are verified and read by its `callbacks` (a `CallbackScheme`,
`reconcilers.providers.callbacks`), and its own report is read by its `report` (a
`ReportFormat`, `ledger.statements.formats`).

Secrets never live in a tool's configuration: the configuration names environment variables
(`reconciler_config.api_key_env = "STRIPE_SECRET_KEY"`), read when the adapter calls
(`secret`). A name may depend on the tool's mode (`{ test = "…", live = "…" }`), so that a
test tool speaks to the provider's test mode and a live tool to its live mode.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import httpx

from reconcilers.providers.outcomes import Lookup, inconclusive

if TYPE_CHECKING:
    from ledger.models import Effect
    from ledger.statements.formats import ReportFormat
    from reconcilers.providers.callbacks import CallbackScheme


@dataclass(frozen=True)
class Backing:
    """What an adapter, as configured, can back. `loadtools` refuses a tool that declares more
    (`reconcilers.providers.checks`).

    `honours_key` None: the adapter has no say in it (the agent's own call carries the key, and
    the adapter does not know the provider): the tool's word is taken."""

    honours_key: bool | None = None
    # How long the provider honours a key (Stripe: 24 hours); None: not bounded by the adapter.
    key_ttl: timedelta | None = None
    lookup: bool = False
    # "consistent": a request the provider took is found at once; "eventual": after `search_lag`.
    lookup_consistency: str = ""
    search_lag: timedelta = timedelta(0)
    # The lookup's not-found comes from a complete listing, so it can prove absence.
    proves_absence: bool = False
    # How far back the provider's lookup can see; None: as far as the ledger asks.
    lookup_horizon: timedelta | None = None
    lists_windows: bool = False
    fetches_statements: bool = False
    executes: bool = False
    # The provider's callback signature scheme ("" for none), and its report's format.
    callbacks: str = ""
    report: str = ""


class Provider(Protocol):
    """An adapter class. Built once per use: `Provider(config=…, mode=…)`."""

    name: ClassVar[str]
    # The provider's callback scheme and report reader, when it has them.
    callbacks: ClassVar[CallbackScheme | None]
    report: ClassVar[ReportFormat | None]

    def __init__(self, config: dict[str, Any], mode: str = "live") -> None: ...

    @classmethod
    def backing(cls, config: dict[str, Any]) -> Backing: ...

    @classmethod
    def config_problems(cls, config: dict[str, Any], mode: str) -> list[str]: ...

    def lookup(self, effect: Effect) -> Lookup: ...


@dataclass
class AdapterBase:
    """What most adapters share: the configuration, the mode, no callbacks nor report unless
    they say so, and no configuration problems unless they find some."""

    name: ClassVar[str] = ""
    callbacks: ClassVar[CallbackScheme | None] = None
    report: ClassVar[ReportFormat | None] = None
    config: dict[str, Any] = field(default_factory=dict)
    mode: str = "live"

    @classmethod
    def config_problems(cls, config: dict[str, Any], mode: str) -> list[str]:
        return []

    @property
    def timeout(self) -> float:
        value = self.config.get("timeout", 5.0)
        return float(value) if isinstance(value, int | float) and 0 < value <= 60 else 5.0

    def secret(self, key: str) -> str:
        """The secret the configuration names at `<key>_env` ("" when none is set)."""
        return secret(self.config, key, self.mode)


@dataclass
class Manual(AdapterBase):
    """A tool nobody can ask: every uncertain effect goes to a person."""

    name: ClassVar[str] = "manual"

    @classmethod
    def backing(cls, config: dict[str, Any]) -> Backing:
        return Backing()

    def lookup(self, effect: Effect) -> Lookup:
        return inconclusive("this tool has no lookup; a person must decide")


def secret_variable(config: dict[str, Any], key: str, mode: str) -> str:
    """The environment variable the configuration names for a secret: `<key>_env`, a name or
    a table of names by mode (`{ test = "…", live = "…" }`)."""
    named = config.get(f"{key}_env")
    if isinstance(named, dict):
        named = named.get(mode)
    return named if isinstance(named, str) else ""


def secret(config: dict[str, Any], key: str, mode: str) -> str:
    """The secret's value, read from the environment when it is needed ("" when unset)."""
    variable = secret_variable(config, key, mode)
    return os.environ.get(variable, "") if variable else ""


_client: httpx.Client | None = None


def http_client() -> httpx.Client:
    """One pooled client per process: building one per lookup (TLS context, pool) costs more
    than the lookup. Proxies from the environment are ignored; providers are called directly."""
    global _client
    if _client is None:
        _client = httpx.Client(trust_env=False, limits=httpx.Limits(max_connections=32))
    return _client
