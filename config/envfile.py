"""`NAME=value` files: `var/run.env`, which settings read as defaults, and `var/secrets.env`.

Settings import this before Django is configured, so it imports nothing of the project.
"""

from __future__ import annotations

import os
from pathlib import Path


def read_env_file(path: Path) -> dict[str, str]:
    """The `NAME=value` lines of `path` (none when it does not exist); `#` lines are comments."""
    values: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            name, sep, value = line.partition("=")
            if sep and not line.lstrip().startswith("#"):
                values[name.strip()] = value.strip()
    return values


def write_env_file(path: Path, values: dict[str, str], header: str) -> None:
    """Write atomically, readable by the owner only: these files hold secrets."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"# {header}\n")
        handle.writelines(f"{name}={value}\n" for name, value in values.items())
    os.replace(tmp, path)
