"""Exact JSON: the fast writer (the standard library's C encoder, Decimals put back exactly)
writes what the module's own writer writes, for every value the ledger hands it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import jsonenc

_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.uuids()
    | st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=2))]))
)
_values = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(_values)
def test_the_fast_writer_writes_what_the_exact_writer_writes(value):
    assert jsonenc.dumps(value) == jsonenc.slow_dumps(value)


@pytest.mark.parametrize(
    "value",
    [
        Decimal("10.10"), Decimal("-0.00"), Decimal("1E+3"), Decimal("1.0E-7"),
        {"amount": Decimal("12.50"), "nested": [Decimal("0.1"), "\\u0000 text", 1.5]},
        {"id": uuid.UUID(int=7), "at": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)},
        "a string that looks like a marker: \\u00001\\u0000",
        ["\x001\x00", Decimal("2.50")],  # a real NUL beside a Decimal: written the slow way
        {"nul": "\x00", "amount": Decimal("1.10")},
    ],
)  # fmt: skip
def test_decimals_stay_exact_and_lookalike_strings_stay_strings(value):
    assert jsonenc.dumps(value) == jsonenc.slow_dumps(value)
    assert jsonenc.loads(jsonenc.dumps(value)) == jsonenc.loads(jsonenc.slow_dumps(value))


@pytest.mark.parametrize("bad", [float("nan"), Decimal("Infinity"), Decimal("NaN"), object()])
def test_what_json_cannot_hold_is_refused_alike(bad):
    with pytest.raises((ValueError, TypeError)) as fast:
        jsonenc.dumps({"x": bad})
    with pytest.raises((ValueError, TypeError)) as slow:
        jsonenc.slow_dumps({"x": bad})
    assert type(fast.value) is type(slow.value)
