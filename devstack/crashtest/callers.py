"""The crash test against a real provider's API: the workers call it through its official SDK,
against its fake, and the ledger asks it through its adapter.

Each provider with a fake has a caller, `devstack.providers.<name>.caller`, that says how:

- `TOOL`: the tools.toml table of the run's tool ("{provider_url}" where the fake's URL goes);
- `send(url, effect, request, fault)`: the call for a claimed effect, carrying its identity,
  with `fault` ("", "hang=1" or "drop") applied by the fake to this one call; it returns the
  outcome to report (a lost answer is `unknown`, never `failed`);
- `records(url)`: how many records the provider holds per idempotency key;
- optional: `FAKE` (the launcher's name of the fake, when it is not the provider's name),
  `ENV` (variables the run's processes need, a test key say), `MACHINE_ONLY` (whether the
  adapter settles every crash without a person; by default, whether the tool proves absence)
  and `request_for(workflow)` (the effect's request; by default a payment's);
- optional, for the suite's crash test (tests/providers/test_provider_crashes.py), which forks
  an agent per effect and runs the ledger in its own process: `warm(url)` (load what `send`
  needs, the SDK and its client, without calling the provider, so that an agent forked
  afterwards calls at once), `fake_args(ledger_url)` (the fake's flags for a ledger answering at
  `ledger_url`: where it delivers its signed callbacks, say), `callback_secret(url)` (what the
  ledger verifies the running fake's callbacks with: its `webhook_provider` entry of
  LEDGER_WEBHOOK_SECRETS) and `FAKE_TIMING` (`search_lag` and `settle_after` in seconds where
  the fake's listing is consistent at once and the provider's is not: set on the declared tool
  past what a tools file may say; `make crashtest` keeps the tool as declared).

The verdict compares counts per idempotency key (`devstack.crashtest.report.compare_counts`):
a provider without keys cannot tell one workflow's records from another's otherwise.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

PROVIDERS_DIR = Path(__file__).resolve().parents[1] / "providers"
TOOL_NAME = "crash_tool"


def names() -> list[str]:
    """The real providers the crash test can run against: those with a caller."""
    return sorted(path.parent.name for path in PROVIDERS_DIR.glob("*/caller.py"))


def load(name: str) -> ModuleType:
    return importlib.import_module(f"devstack.providers.{name}.caller")


def fake_of(caller: ModuleType, name: str) -> str:
    return str(getattr(caller, "FAKE", name))


def machine_only(caller: ModuleType) -> bool:
    if hasattr(caller, "MACHINE_ONLY"):
        return bool(caller.MACHINE_ONLY)
    return bool(caller.TOOL.get("lookup_proves_absence"))


def _toml(value: Any) -> str:
    """A value as TOML writes it inline (strings, numbers, booleans, lists and tables)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))


def _placed(value: Any, provider_url: str) -> Any:
    if isinstance(value, str):
        return value.replace("{provider_url}", provider_url)
    if isinstance(value, dict):
        return {k: _placed(v, provider_url) for k, v in value.items()}
    if isinstance(value, list):
        return [_placed(v, provider_url) for v in value]
    return value


def tool_table(name: str, table: dict[str, Any], provider_url: str) -> str:
    """`table` as the tools.toml table `[tools.<name>]`, "{provider_url}" in its values replaced
    by `provider_url`; a key set to None is left out."""
    placed = _placed(table, provider_url)
    lines = [f"{key} = {_toml(value)}" for key, value in placed.items() if value is not None]
    return f"[tools.{name}]\n" + "\n".join(lines) + "\n"


def tool_file(workdir: Path, caller: ModuleType, provider_url: str) -> Path:
    """A tools file declaring the caller's tool against this run's fake."""
    path = workdir / "tools.toml"
    path.write_text(tool_table(TOOL_NAME, caller.TOOL, provider_url))
    return path


def request_for(caller: ModuleType, workflow: dict[str, Any]) -> dict[str, Any]:
    """What the effect asks the provider to do: the caller's own, or a payment's."""
    if hasattr(caller, "request_for"):
        return dict(caller.request_for(workflow))
    return {"amount": workflow["amount"], "currency": "EUR", "account": workflow["account"]}


def warm(caller: ModuleType, provider_url: str) -> None:
    """Load what the caller's `send` needs before processes are forked to call it."""
    if hasattr(caller, "warm"):
        caller.warm(provider_url)


def fake_args(caller: ModuleType, ledger_url: str) -> tuple[str, ...]:
    """The flags the caller's fake starts with for a ledger at `ledger_url` (none by default)."""
    if hasattr(caller, "fake_args"):
        return tuple(caller.fake_args(ledger_url))
    return ()


def callback_secret(caller: ModuleType, provider_url: str) -> str | None:
    """The secret of the running fake's signed callbacks, or None when it sends none."""
    return str(caller.callback_secret(provider_url)) if hasattr(caller, "callback_secret") else None


def fake_timing(caller: ModuleType) -> dict[str, float]:
    """The tool's `search_lag` / `settle_after` (seconds) that hold against the fake only."""
    return {str(k): float(v) for k, v in dict(getattr(caller, "FAKE_TIMING", {})).items()}
