"""Retention's index, and the four-place currencies in the claim trigger's exponents.

- `effect_retention_idx`: terminal effects not yet redacted, by `resolved_at`. The hourly
  retention run reads what is due from it instead of scanning every effect; redacted effects
  leave it. Built with CREATE INDEX CONCURRENTLY (`atomic = False`), which lets agents write
  effects while it builds.
- `ledger_currency_exponent`: the frozen copy of ISO 4217's exponents that the claim trigger
  reads (migration 0014) gains the two four-place units, CLF and UYW, which it treated as two
  places; `ledger.limits.EXPONENTS` is now read from `ledger.iso4217`, the one table, and
  tests/test_limits_trigger.py compares the two. Replacing a function locks no table.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

# Frozen with this migration: ISO 4217 exponents that differ from 2.
EXPONENTS = {
    "BHD": 3, "BIF": 0, "CLF": 4, "CLP": 0, "DJF": 0, "GNF": 0, "IQD": 3, "ISK": 0, "JOD": 3,
    "JPY": 0, "KMF": 0, "KRW": 0, "KWD": 3, "LYD": 3, "OMR": 3, "PYG": 0, "RWF": 0, "TND": 3,
    "UGX": 0, "UYI": 0, "UYW": 4, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
}  # fmt: skip
# As migration 0014 left it, for the way back.
BEFORE = {code: places for code, places in EXPONENTS.items() if code not in ("CLF", "UYW")}


def _exponent_function(exponents: dict[str, int]) -> str:
    cases = " ".join(f"WHEN '{code}' THEN {places}" for code, places in sorted(exponents.items()))
    return (
        "CREATE OR REPLACE FUNCTION ledger_currency_exponent(p_code text) RETURNS int "
        f"LANGUAGE sql IMMUTABLE AS $$ SELECT CASE p_code {cases} ELSE 2 END $$"
    )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0020_retention"),
    ]

    operations = [
        migrations.RunSQL(_exponent_function(EXPONENTS), _exponent_function(BEFORE)),
        AddIndexConcurrently(
            model_name="effect",
            index=models.Index(
                condition=models.Q(
                    ("status__in", ["cancelled", "compensated", "confirmed", "failed"]),
                    models.Q(("target", "redacted"), _negated=True),
                ),
                fields=["resolved_at", "id"],
                name="effect_retention_idx",
            ),
        ),
    ]
