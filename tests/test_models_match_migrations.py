"""Moving modules must not change a migration: the models as they are now are exactly what the
migrations build (`makemigrations --check` finds nothing to write)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_the_models_need_no_new_migration():
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exit_:  # --check exits 1 when a migration would be written
        pytest.fail(f"makemigrations would write a migration ({exit_.code}):\n{out.getvalue()}")
    assert "No changes detected" in out.getvalue()
