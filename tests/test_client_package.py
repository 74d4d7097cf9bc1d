"""The client as a package: `pip wheel ./client` builds a wheel named `effect-ledger-client`
holding every module and `py.typed`; the core imports without any framework or OpenTelemetry
installed; and mypy --strict passes on the whole package, adapters included."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import ROOT

CLIENT = ROOT / "client"
FRAMEWORKS = ("langgraph", "langchain", "agents", "pydantic_ai", "mcp", "fastmcp", "dbos")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("client-wheel")
    source = workdir / "client"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(workdir), str(source)],
        check=True,
        capture_output=True,
    )
    [built] = workdir.glob("*.whl")
    return built


def test_the_wheel_holds_every_module_and_the_typing_marker(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {str(p.relative_to(CLIENT)) for p in (CLIENT / "ledger_client").rglob("*.py")} | {
        "ledger_client/py.typed"
    }
    assert sources <= names
    assert wheel.name.startswith("effect_ledger_client-")


def test_the_wheel_names_its_dependencies_and_one_extra_per_framework(wheel):
    archive = zipfile.ZipFile(wheel)
    [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    meta = email.message_from_bytes(archive.read(metadata))
    assert meta["Name"] == "effect-ledger-client"
    assert set(meta.get_all("Provides-Extra")) == {
        "langgraph",
        "openai-agents",
        "pydantic-ai",
        "mcp",
        "dbos",
        "otel",
    }
    plain = [r for r in meta.get_all("Requires-Dist") if "extra ==" not in r]
    assert sorted(r.split(">")[0].split("<")[0] for r in plain) == ["httpx", "pydantic"]


def test_the_langgraph_extra_brings_the_checkpointer_its_example_imports(wheel):
    archive = zipfile.ZipFile(wheel)
    [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    meta = email.message_from_bytes(archive.read(metadata))
    langgraph = [r for r in meta.get_all("Requires-Dist") if 'extra == "langgraph"' in r]
    assert any(r.startswith("langgraph-checkpoint-sqlite") for r in langgraph), langgraph
    example = (ROOT / "examples" / "langgraph" / "agent.py").read_text()
    assert "from langgraph.checkpoint.sqlite import" in example


def test_the_core_imports_with_no_framework_installed(tmp_path, wheel):
    """Unpacked alone, with every framework and OpenTelemetry made unimportable."""
    zipfile.ZipFile(wheel).extractall(tmp_path)
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {(*FRAMEWORKS, 'opentelemetry')!r}:\n"
        "            raise ImportError('not installed: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import ledger_client, ledger_client.tracing\n"
        "assert ledger_client.tracing.trace_headers() == {}\n"
        "print(ledger_client.guarded.__name__)\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + blocker,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "guarded"


def test_mypy_strict_passes_on_the_client():
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "ledger_client"],
        capture_output=True,
        text=True,
        cwd=CLIENT,
    )
    assert done.returncode == 0, done.stdout[-4000:]
