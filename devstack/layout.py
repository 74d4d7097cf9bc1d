"""Where a development stack lives: its directory and its ports, so that `make run`,
`make examples` and `make drills` can run on one machine at once.

    STACK_DIR               the stack's files (default var/): secrets.env, run.env, the embedded
                            PostgreSQL (pg/) and Redis (redis/), the sandboxes' stores
                            (sandbox/), the counters (prometheus/), tools.toml when rewritten
    PORT                    where nginx serves the ledger (8000)
    SANDBOX_PAYMENTS_PORT   the card payments sandbox (8101)
    SANDBOX_MESSAGING_PORT  the messaging sandbox (8102)

`make run` takes the defaults; `make examples` runs its stack under var/examples with free
ports where none is given (`free_layout`); the drills take free ports and temporary
directories of their own. `tools.toml` points the card tools at 127.0.0.1:8101: a stack whose
payments sandbox listens elsewhere declares them from a copy pointing at its own
(`tools_file`).

Like `devstack.embedded`, this module imports nothing of Django.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR = ROOT / "var"
DEFAULT_PORTS = {"PORT": 8000, "SANDBOX_PAYMENTS_PORT": 8101, "SANDBOX_MESSAGING_PORT": 8102}
TOOLS_FILE = ROOT / "tools.toml"
# The payments sandbox's address as tools.toml spells it.
TOOLS_PAYMENTS_URL = f"http://127.0.0.1:{DEFAULT_PORTS['SANDBOX_PAYMENTS_PORT']}"


def stack_dir(environ: Mapping[str, str]) -> Path:
    """STACK_DIR (relative to the checkout when relative), or var/."""
    raw = environ.get("STACK_DIR") or ""
    return (ROOT / raw).resolve() if raw else VAR


def _port(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name) or ""
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}.") from None
    if not 0 < port < 65536:
        raise ValueError(f"{name} must be a port (1-65535), got {port}.")
    return port


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports the kernel reports free now (all held open while choosing, so
    none is handed out twice)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


@dataclass(frozen=True)
class StackLayout:
    directory: Path
    port: int
    payments_port: int
    messaging_port: int

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> StackLayout:
        """The variables above, `make run`'s defaults where unset; ValueError names a bad one."""
        ports = {name: _port(environ, name, default) for name, default in DEFAULT_PORTS.items()}
        layout = cls(stack_dir(environ), *ports.values())
        if len(set(ports.values())) < len(ports):
            raise ValueError(f"The stack's ports must differ: {layout.describe_ports()}.")
        return layout

    @property
    def secrets_file(self) -> Path:
        return self.directory / "secrets.env"

    @property
    def run_env_file(self) -> Path:
        return self.directory / "run.env"

    @property
    def metrics_dir(self) -> Path:
        return self.directory / "prometheus"

    def store(self, provider: str) -> Path:
        return self.directory / "sandbox" / f"{provider}.sqlite3"

    def sandbox_url(self, provider: str) -> str:
        port = self.payments_port if provider == "payments" else self.messaging_port
        return f"http://127.0.0.1:{port}"

    def ports(self) -> dict[str, int]:
        return {
            "PORT": self.port,
            "SANDBOX_PAYMENTS_PORT": self.payments_port,
            "SANDBOX_MESSAGING_PORT": self.messaging_port,
        }

    def as_env(self) -> dict[str, str]:
        """The variables that give a child stack this layout."""
        return {"STACK_DIR": str(self.directory), **{k: str(v) for k, v in self.ports().items()}}

    def describe_ports(self) -> str:
        return ", ".join(f"{name}={port}" for name, port in self.ports().items())


def free_layout(directory: Path, environ: Mapping[str, str]) -> StackLayout:
    """A layout under `directory` with the ports `environ` gives, free ones for the rest
    (`make examples`: beside a `make run` on the default ports)."""
    chosen = free_ports(len(DEFAULT_PORTS))
    given = {name: str(environ.get(name) or chosen[i]) for i, name in enumerate(DEFAULT_PORTS)}
    return StackLayout.from_env({**given, "STACK_DIR": str(directory)})


def tools_file(layout: StackLayout) -> Path:
    """tools.toml, or a copy in the stack's directory with the card tools pointed at the
    stack's own payments sandbox when it does not listen where tools.toml says."""
    url = layout.sandbox_url("payments")
    if url == TOOLS_PAYMENTS_URL:
        return TOOLS_FILE
    text = TOOLS_FILE.read_text()
    if f'"{TOOLS_PAYMENTS_URL}"' not in text:
        raise RuntimeError(f"{TOOLS_FILE.name} no longer names {TOOLS_PAYMENTS_URL}.")
    copy = layout.directory / "tools.toml"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(
        f"# tools.toml with the payments sandbox at {url}, written by the stack.\n"
        + text.replace(f'"{TOOLS_PAYMENTS_URL}"', f'"{url}"')
    )
    return copy
