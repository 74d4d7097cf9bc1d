"""The security page lists each promise with the test that holds it: every test it names
exists, so that a renamed or removed test cannot leave a promise held by nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_test_the_security_page_names_exists():
    page = (ROOT / "docs" / "security.md").read_text()
    named = set(re.findall(r"`(test_\w+)`", page))
    defined = {
        name
        for path in (ROOT / "tests").rglob("test_*.py")
        for name in re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.M)
    }
    assert len(named) > 40
    assert sorted(named - defined) == []
