"""Reading a statement file: CSV or JSON Lines (by the file's extension), one validated row
per line, streamed (the file is never held in memory whole).

Columns, after the tool's `statement_columns` map (our name → the file's):
`provider_ref,reference,amount,currency,status,occurred_at`, and optionally `type` (charge,
refund, capture, reversal or fee; default charge). `status` goes through the tool's
`statement_status` map (provider status → succeeded|failed|pending); our own three words pass
as they are. `amount` is in the tool's `amount_unit`: major ("12.50" EUR → 1250) or minor
(1250), always turned into integer minor units by the currency's ISO 4217 exponent, never
rounded. `occurred_at` is ISO 8601 with a UTC offset and must lie in the statement's period.

Any fault refuses the whole file with a `StatementError` naming the line and the column; it
quotes at most a few dozen characters of the value (`ledger.policy.redaction.excerpt`), so that a
refused file of any size gets a short answer. JSON Lines are read with `ledger.jsonenc`: depth
bounded, and numbers refused by their size before anything converts or formats them.

Card numbers in `provider_ref` and `reference` are tokenized as the line is read, with the
same keyed token the outcome and webhook paths give a provider ref, so that a statement line
still matches the effect whose ref held the same card, and no raw card is staged or stored.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import IO, Any

from ledger import jsonenc
from ledger.models import LineStatus, LineType, Tool
from ledger.policy.iso4217 import EXPONENTS
from ledger.policy.redaction import excerpt, scrub_cards
from ledger.statements.formats import ReportFormat

COLUMNS = ("provider_ref", "reference", "amount", "currency", "status", "occurred_at")
OPTIONAL = ("type",)
FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
_TYPES = frozenset(LineType.values)
_STATUSES = frozenset(LineStatus.values)
# Types whose amounts a provider may write with a minus sign (money going back); stored as
# magnitudes, like every other line.
_SIGNED = frozenset({LineType.REFUND, LineType.REVERSAL, LineType.FEE})
_MAJOR = re.compile(r"(-?)(\d{1,18})(?:\.(\d{1,18}))?")
_MINOR = re.compile(r"(-?)(\d{1,18})")
_LONGEST = 500  # provider_ref and reference, card numbers tokenized
# A JSON Lines line longer than this is refused unread: a line of six short values is a few
# hundred characters, and a line is held in memory whole while it is parsed.
_LONGEST_LINE = 1 << 20
# An amount (as a JSON number) is refused beyond these before it is formatted: formatting
# 1e20000000 writes twenty million digits. 18 digits each side is what the patterns allow.
_AMOUNT_EXPONENT = 18
_AMOUNT_DIGITS = 36
_DIGITS = re.compile(r"\d{1,18}", re.ASCII)
# A status the tool does not map, when it is one of our own words (any case).
_OWN_STATUS = {word: word for word in LineStatus.values} | {
    word.upper(): word for word in LineStatus.values
}


class StatementError(ValueError):
    """A statement the ledger refuses, with a sentence saying what is wrong and where."""


# One staged row: line_no, provider_ref, reference, type, status, amount_minor, currency,
# occurred_at (the order of `STAGE_COLUMNS`).
Row = tuple[int, str, str, str, str, int, str, datetime]
STAGE_COLUMNS = (
    "line_no, provider_ref, reference, type, status, amount_minor, currency, occurred_at"
)


def file_format(filename: str) -> str:
    for suffix, name in FORMATS.items():
        if filename.lower().endswith(suffix):
            return name
    raise StatementError(
        f"{excerpt(filename)}: a statement is a .csv or .jsonl file (the extension says which)."
    )


class HashingReader(io.RawIOBase):
    """A binary stream read through, keeping the SHA-256 of every byte that passed."""

    def __init__(self, source: IO[bytes]) -> None:
        self.source = source
        self.sha256 = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self.source.read(len(buffer))
        if not chunk:
            return 0
        n = len(chunk)
        buffer[:n] = chunk
        self.sha256.update(chunk)
        self.size += n
        return n

    def drain(self) -> None:
        """Read what is left (the digest is of the whole file, even past its last line)."""
        while self.read(1 << 16):
            pass


@dataclass(frozen=True)
class Period:
    start: datetime
    end: datetime


class LineReader:
    """Validates one line's values into a `Row`; knows the tool's maps and amount unit."""

    def __init__(self, tool: Tool, period: Period, *, amount_unit: str = "") -> None:
        self.period = period
        # The file's unit: a provider's report says its own (`ledger.statements.formats`).
        self.minor_unit = (amount_unit or tool.amount_unit) == "minor"
        self.statuses = {str(k): str(v) for k, v in (tool.statement_status or {}).items()}
        self.names = {c: str((tool.statement_columns or {}).get(c, c)) for c in COLUMNS + OPTIONAL}

    def fail(self, line: int, column: str, problem: str) -> StatementError:
        shown = self.names.get(column, column)
        where = f"column {shown!r}" if shown == column else f"column {shown!r} ({column})"
        return StatementError(f"line {line}, {where}: {problem}")

    def row(self, line: int, values: list[Any]) -> Row:
        """`values` in COLUMNS + OPTIONAL order (type None when the file has no such column).

        The common line (short strings, a plain amount, a known status) is read inline, in a
        few microseconds; anything else goes through `checked_row`, which reads the same
        values one check at a time and names the one that fails."""
        try:
            ref, reference, amount, code, status, at, kind = (
                values[0].strip(), values[1].strip(), values[2].strip(),
                values[3].strip().upper(), values[4].strip(), values[5].strip(),
                (values[6] or "").strip() or "charge",
            )  # fmt: skip
            whole, dot, fraction = amount.partition(".")
            places = EXPONENTS[code]
            moment = datetime.fromisoformat(at)
            mapped = self.statuses.get(status) or _OWN_STATUS[status]
        except (AttributeError, KeyError, ValueError):
            return self.checked_row(line, values)
        if (
            not ref
            or len(ref) > _LONGEST
            or len(reference) > _LONGEST
            or "\x00" in ref
            or "\x00" in reference
            or kind not in _TYPES
            or places is None
            or not (whole.isascii() and whole.isdigit() and len(whole) <= 18)
            or (dot and (self.minor_unit or not _DIGITS.fullmatch(fraction)))
            or moment.tzinfo is None
            or not self.period.start <= moment < self.period.end
        ):
            return self.checked_row(line, values)
        ref, reference = scrub_cards(ref), scrub_cards(reference)
        if len(ref) > _LONGEST or len(reference) > _LONGEST:
            return self.checked_row(line, values)
        if self.minor_unit:
            return (line, ref, reference, kind, mapped, int(whole), code, moment)
        fraction = fraction.rstrip("0")
        if len(fraction) > places:
            return self.checked_row(line, values)
        minor = int(whole) * 10**places + (int(fraction.ljust(places, "0")) if fraction else 0)
        return (line, ref, reference, kind, mapped, minor, code, moment)

    def checked_row(self, line: int, values: list[Any]) -> Row:
        provider_ref, reference, amount, currency, status, occurred_at, kind = values
        provider_ref = self.tokenized(line, "provider_ref", provider_ref)
        if not provider_ref:
            raise self.fail(line, "provider_ref", "is empty")
        reference = self.tokenized(line, "reference", reference)
        kind = LineType.CHARGE.value if kind in (None, "") else self.text(line, "type", kind)
        if kind not in _TYPES:
            raise self.fail(line, "type", f"{excerpt(kind)} is not one of {sorted(_TYPES)}")
        code = self.text(line, "currency", currency).upper()
        places = EXPONENTS.get(code, -1)
        if places == -1:
            raise self.fail(line, "currency", f"{excerpt(code)} is not an active ISO 4217 currency")
        if places is None:
            raise self.fail(line, "currency", f"{excerpt(code)} has no minor unit (ISO 4217: N.A.)")
        minor = self.amount(line, amount, places, kind)
        mapped = self.status(line, status)
        moment = self.moment(line, occurred_at)
        return (line, provider_ref, reference, kind, mapped, minor, code, moment)

    def tokenized(self, line: int, column: str, value: Any) -> str:
        """A provider ref or reference, its card numbers tokenized (and then no longer than
        the column holds)."""
        text = scrub_cards(self.text(line, column, value))
        if len(text) > _LONGEST:
            raise self.fail(
                line,
                column,
                f"is longer than {_LONGEST} characters once card numbers are tokenized",
            )
        return text

    def text(self, line: int, column: str, value: Any) -> str:
        if value is None:
            return ""
        if not isinstance(value, str):
            if isinstance(value, bool) or not isinstance(value, int | Decimal):
                raise self.fail(line, column, "must be a string")
            # A Decimal's str() is in scientific notation past its digits: short whatever it is.
            value = str(value)
        value = value.strip()
        if len(value) > _LONGEST:
            raise self.fail(line, column, f"is longer than {_LONGEST} characters")
        if "\x00" in value:
            raise self.fail(line, column, "holds a NUL character")
        return value

    def amount(self, line: int, value: Any, places: int, kind: str) -> int:
        if isinstance(value, bool) or value is None:
            raise self.fail(line, "amount", "is missing")
        if isinstance(value, jsonenc.OversizedNumber):
            raise self.fail(line, "amount", f"is not an amount ({value.problem})")
        if isinstance(value, Decimal) and (
            not value.is_finite()
            or abs(value.adjusted()) > _AMOUNT_EXPONENT
            or len(value.as_tuple().digits) > _AMOUNT_DIGITS
        ):
            # Refused by its size, never formatted: 1e20000000 is twenty million digits.
            raise self.fail(line, "amount", "is not an amount (number out of range)")
        text = format(value, "f") if isinstance(value, Decimal) else str(value).strip()
        found = (_MINOR if self.minor_unit else _MAJOR).fullmatch(text)
        if not found:
            shape = "a whole number of minor units" if self.minor_unit else "an amount like 12.50"
            raise self.fail(line, "amount", f"{excerpt(text)} is not {shape}")
        if found[1] and kind not in _SIGNED:
            raise self.fail(line, "amount", f"{excerpt(text)} is negative on a {kind} line")
        if self.minor_unit:
            return int(found[2])
        fraction = (found[3] or "").rstrip("0")
        if len(fraction) > places:
            raise self.fail(
                line,
                "amount",
                f"{excerpt(text)} has more decimal places than the currency ({places})",
            )
        return int(found[2]) * 10**places + (int(fraction.ljust(places, "0")) if fraction else 0)

    def status(self, line: int, value: Any) -> str:
        raw = self.text(line, "status", value)
        mapped = self.statuses.get(raw) or self.statuses.get(raw.lower())
        if mapped is None and raw.lower() in _STATUSES:
            mapped = raw.lower()
        if mapped not in _STATUSES:
            raise self.fail(
                line,
                "status",
                f"{excerpt(raw)} is neither mapped by the tool nor one of {sorted(_STATUSES)}",
            )
        return mapped

    def moment(self, line: int, value: Any) -> datetime:
        raw = self.text(line, "occurred_at", value)
        try:
            moment = datetime.fromisoformat(raw)
        except ValueError:
            raise self.fail(
                line, "occurred_at", f"{excerpt(raw)} is not an ISO 8601 time"
            ) from None
        if moment.tzinfo is None:
            raise self.fail(line, "occurred_at", f"{excerpt(raw)} has no UTC offset")
        if not self.period.start <= moment < self.period.end:
            raise self.fail(
                line,
                "occurred_at",
                f"{excerpt(raw)} lies outside the statement's period "
                f"[{self.period.start.isoformat()}, {self.period.end.isoformat()})",
            )
        return moment


def rows(
    stream: IO[bytes], fmt: str, reader: LineReader, report: ReportFormat | None = None
) -> Iterator[Row]:
    """The file's rows, validated, in file order: in the ledger's own columns, or in a
    provider's report format."""
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    read = report.rows if report else _csv_rows if fmt == "csv" else _jsonl_rows
    try:
        yield from read(text, reader)
    except UnicodeDecodeError as exc:
        raise StatementError(f"the file is not UTF-8 text ({exc.reason})") from None
    finally:
        text.detach()


def _csv_rows(text: IO[str], reader: LineReader) -> Iterator[Row]:
    lines = csv.reader(text, strict=True)
    try:
        header = next(lines)
    except StopIteration:
        raise StatementError(
            "line 1: the file is empty (a CSV statement starts with a header)"
        ) from None
    except csv.Error as exc:
        raise StatementError(f"line 1: not CSV ({exc})") from None
    header = [h.strip() for h in header]
    missing = [c for c in COLUMNS if reader.names[c] not in header]
    if missing:
        shown = ", ".join(
            repr(reader.names[c]) + ("" if reader.names[c] == c else f" ({c})") for c in missing
        )
        found = excerpt(",".join(header), 120)
        raise StatementError(f"line 1: missing column(s) {shown}; the header is {found}")
    index = [header.index(reader.names[c]) for c in COLUMNS]
    kind_at = header.index(reader.names["type"]) if reader.names["type"] in header else None
    width = len(header)
    while True:
        try:
            values = next(lines)
        except StopIteration:
            return
        except csv.Error as exc:
            raise StatementError(f"line {lines.line_num}: not CSV ({exc})") from None
        line = lines.line_num
        if not values:
            continue  # a blank line
        if len(values) != width:
            raise StatementError(f"line {line}: {len(values)} values where the header has {width}")
        picked = [values[i] for i in index]
        picked.append(values[kind_at] if kind_at is not None else None)
        yield reader.row(line, picked)


def _jsonl_rows(text: IO[str], reader: LineReader) -> Iterator[Row]:
    names = [reader.names[c] for c in COLUMNS]
    kind_name = reader.names["type"]
    line = 0
    while raw := text.readline(_LONGEST_LINE + 1):
        line += 1
        if len(raw) > _LONGEST_LINE:
            raise StatementError(f"line {line}: longer than {_LONGEST_LINE} characters")
        if not raw.strip():
            continue
        try:
            record = jsonenc.loads(raw)
        except jsonenc.MalformedJSON as exc:
            raise StatementError(f"line {line}: not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise StatementError(f"line {line}: not a JSON object")
        missing = [c for c, n in zip(COLUMNS, names, strict=True) if n not in record]
        if missing:
            raise reader.fail(line, missing[0], "is missing")
        picked = [record[n] for n in names]
        picked.append(record.get(kind_name))
        yield reader.row(line, picked)
