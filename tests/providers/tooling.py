"""A provider caller's tool declared in a test through loadtools, as an operator declares it:
its tools.toml table (`devstack.providers.<name>.caller.TOOL`) written out by the crash test's
own `devstack.crashtest.callers.tool_table`, against the fake the test started."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from devstack.crashtest.callers import tool_table
from ledger.models import Tool
from ledger.policy.toolfile import load


def declare(directory: Path, caller: ModuleType, url: str, name: str, **changes: Any) -> Tool:
    """`caller`'s tool table declared as `name`, "{provider_url}" in it the fake's `url`; a
    change to None leaves the key out, `config` adds to the reconciler_config."""
    config = {**changes.pop("reconciler_config", caller.TOOL["reconciler_config"])}
    config.update(changes.pop("config", {}))
    table = {**caller.TOOL, **changes, "reconciler_config": config}
    path = directory / f"{name}.toml"
    path.write_text(tool_table(name, table, url))
    load(path)
    return Tool.objects.get(name=name)
