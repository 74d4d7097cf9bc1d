"""The server ships no harness: `devstack` (the stack runner, the embedded servers, the sandbox
providers, the crash test, the fault drills) is not in the server's wheel, no module of the
server imports it, and the server, installed from its wheel alone, starts without it.

The wheel is built as a release would build it (`pip wheel --no-deps`, in a copy of the
checkout's packages so that no `build/` of an earlier build can leak into it): about five
seconds.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import ROOT

SERVER = ("config", "ledger", "reconcilers", "reviews")
HARNESS = "devstack"
# Where the harness lived before it moved: none of it may come back under the server's names.
FORMER_HOMES = (
    "config/stack.py",
    "config/embedded.py",
    "config/supervisor.py",
    "config/web.py",
    "reconcilers/harness.py",
    "reconcilers/sandbox/",
    "reconcilers/crashtest/",
    "reconcilers/drills/",
    "reconcilers/management/commands/crashtest.py",
    "reconcilers/management/commands/faultdrill.py",
    "reconcilers/management/commands/sandbox.py",
)


def harness_imports(root: Path = ROOT) -> list[str]:
    """Every import of the harness in the server's modules, at the top or inside a function."""
    found = []
    for package in SERVER:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                else:
                    continue
                found += [
                    f"{path.relative_to(root)}:{node.lineno} imports {name}"
                    for name in names
                    if name.split(".")[0] == HARNESS
                ]
    return found


def test_no_module_of_the_server_imports_the_harness():
    assert harness_imports() == []


def test_the_walk_finds_an_import_of_the_harness_wherever_it_stands(tmp_path):
    for package in SERVER:
        (tmp_path / package).mkdir()
    (tmp_path / "config" / "fine.py").write_text("import ledger.models\nHARNESS = 'devstack'\n")
    (tmp_path / "reviews" / "late.py").write_text(
        "def f():\n    from devstack.stack import run\n    import devstack.sandbox.payments\n"
    )
    assert harness_imports(tmp_path) == [
        "reviews/late.py:2 imports devstack.stack",
        "reviews/late.py:3 imports devstack.sandbox.payments",
    ]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The server's wheel, built from a copy of the checkout's packages."""
    workdir = tmp_path_factory.mktemp("wheel")
    source = workdir / "source"
    source.mkdir()
    for path in ROOT.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            shutil.copytree(path, source / path.name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(workdir), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = workdir.glob("effect_ledger-*.whl")
    return built


def test_the_wheel_holds_the_server_and_no_harness(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}

    assert tops == set(SERVER)
    assert [name for name in names if name.startswith(FORMER_HOMES)] == []
    assert "ledger/sql/halts.sql" in names  # package data still ships


# Run from the unpacked wheel, outside the checkout: `devstack` cannot be found there, and the
# editable install of the checkout maps only the server's packages.
_SERVE_WITHOUT_HARNESS = """
import importlib, importlib.util, pkgutil, sys
from pathlib import Path

site = Path(sys.argv[1])
assert importlib.util.find_spec("devstack") is None, "devstack is importable here"
import django
django.setup()
from django.conf import settings
from django.core.management import call_command
assert "devstack" not in settings.INSTALLED_APPS, settings.INSTALLED_APPS
imported = 0
for package in ("config", "ledger", "reconcilers", "reviews"):
    module = importlib.import_module(package)
    assert Path(module.__file__).is_relative_to(site), module.__file__
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
            imported += 1
assert not any(name.split(".")[0] == "devstack" for name in sys.modules)
call_command("check")
print("imported", imported, "modules")
"""


def test_the_server_installed_from_its_wheel_runs_without_the_harness(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    done = subprocess.run(
        [sys.executable, "-c", _SERVE_WITHOUT_HARNESS, str(site)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site), "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imported" in done.stdout
