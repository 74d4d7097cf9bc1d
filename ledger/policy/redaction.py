"""Tokenize sensitive values before anything is stored.

Card numbers (Luhn-valid runs of 13–19 digits, also inside longer strings and as JSON numbers),
CVV/CVC codes, fields named like secrets, and per-tool dotted paths are replaced by keyed HMAC
tokens (`ledger.policy.digests.redaction_token`): equal values map to equal tokens, and the raw
value
never reaches the database or a log.

Identifiers (run and step ids, effect keys, tool names) are not tokenized but refused when they
hold a card number, and for them only numbers in the ranges cards are issued in count
(`holds_issued_card`): a Luhn-valid epoch-millisecond timestamp in a run id is not a card.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ledger import jsonenc
from ledger.policy.digests import redaction_token

# Key names (lower-cased, separators removed) whose values are secrets whatever they hold.
_SECRET_NAME = re.compile(
    r"(password|passwd|passphrase|secret|token|apikey|accesskey|privatekey|authorization"
    r"|cvv|cvc|cvn|securitycode|cardnumber)$|^(cvv2|cvc2|csc|pin|pan)$"
)
# A run of digits that may be grouped by what people type between groups ("4111 1111 1111 1111",
# "4111-1111-…", dots, slashes, underscores, tabs, no-break spaces, or two of them), standing
# on its own: a run glued to letters is part of an identifier (a provider's
# "ch_3f41111111111111111a9"), not a card number someone wrote down.
_SEPARATORS = r" \t\u00a0\u2007\u202f._/-"
_GROUP_SEPARATOR = rf"[{_SEPARATORS}]{{1,2}}"
# A card, however grouped, is 13 or more characters of digits and separators in a row: text
# without such a stretch (most references and identifiers) needs no closer look.
_MAYBE_CARD = re.compile(rf"[\d{_SEPARATORS}]{{13,}}")
# A run that follows a hex group and a hyphen continues an identifier, not a card: the
# all-decimal tail of a UUID ("…-444e-9123-456789012345") is not a card number.
_DIGIT_RUN = re.compile(rf"(?<![^\W_])(?<![0-9A-Fa-f]-)\d+(?:{_GROUP_SEPARATOR}\d+)*(?![^\W_])")


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)  # any Unicode decimal digit, not only ASCII
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def issued_card(digits: str) -> bool:
    """Can these digits be a payment card's number (PAN)? 13 to 19 digits, Luhn-valid, in a
    range cards are issued in: ISO/IEC 7812 major industry identifiers 2 to 9 (2-6 hold the
    international brands; 7 fleet cards; 8 and 9 national schemes such as RuPay, UzCard, Troy
    and Humo), and 1 only for 15-digit UATP cards. A number starting with 0, or with 1 at any
    other length, is not a card: epoch timestamps in milliseconds (13 digits), microseconds (16)
    and nanoseconds (19) and most snowflake ids start with 1."""
    if not 13 <= len(digits) <= 19 or not luhn_valid(digits):
        return False
    first = int(digits[0])
    return first >= 2 or (first == 1 and len(digits) == 15)


def holds_issued_card(text: str) -> bool:
    """Does `text` hold a number in a card issuer's range (`issued_card`), however grouped? The
    test for identifiers, which are refused rather than tokenized; `scrub_cards` is broader and
    tokenizes any Luhn-valid run, so that nothing that might be a card is stored."""
    if not _MAYBE_CARD.search(text):
        return False
    for match in _DIGIT_RUN.finditer(text):
        run = match.group()
        if sum(ch.isdigit() for ch in run) >= 13 and any(_card_spans(run, issued_card)):
            return True
    return False


def _luhn_run(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and luhn_valid(digits)


def _card_spans(run: str, is_card: Callable[[str], bool] = _luhn_run) -> Iterable[tuple[int, int]]:
    """Spans within one digit run that hold a card number: the whole run, or consecutive groups."""
    groups = [(m.start(), m.end()) for m in re.finditer(r"\d+", run)]
    found: list[tuple[int, int]] = []
    start = 0
    while start < len(groups):
        hit = None
        digits = ""
        for end in range(start, len(groups)):
            digits += run[groups[end][0] : groups[end][1]]
            if len(digits) > 19:
                break
            if len(digits) >= 13 and is_card(digits):
                hit = end
        if hit is None:
            start += 1
        else:
            found.append((groups[start][0], groups[hit][1]))
            start = hit + 1
    return found


def scrub_cards(text: str) -> str:
    """Replace every card number inside `text` by a token."""
    if not _MAYBE_CARD.search(text):
        return text
    pieces: list[str] = []
    last = 0
    for match in _DIGIT_RUN.finditer(text):
        run = match.group()
        if sum(ch.isdigit() for ch in run) < 13:
            continue
        for start, end in _card_spans(run):
            digits = "".join(str(int(ch)) for ch in run[start:end] if ch.isdecimal())
            pieces.append(text[last : match.start() + start])
            pieces.append(redaction_token("card", digits))
            last = match.start() + end
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


# How much of a refused value an error message shows.
SHOWN = 40


def excerpt(text: str, limit: int = SHOWN) -> str:
    """`text` as an error message may quote it: at most `limit` characters (and an ellipsis),
    card numbers tokenized. Whatever a refused input holds, the answer stays small and holds no
    card. Cards are tokenized before the cut (so that none is cut into a prefix that survives)
    and again after it (a cut can make a longer run of digits into a Luhn-valid one)."""
    # Only the first characters can be shown; a grouped card is at most 55 characters long.
    head = scrub_cards(text[: limit + 60])
    if len(head) <= limit and len(text) <= limit + 60:
        return repr(head)
    return repr(scrub_cards(head[:limit]) + "…")


def _integral_digits(value: int | Decimal) -> str | None:
    """The digits of a whole number (`4.111111111111111E+15` is one), else None."""
    if isinstance(value, Decimal):
        if (
            not value.is_finite()
            or value != value.to_integral_value()
            or abs(value.adjusted()) > 19
        ):
            return None
        value = int(value)
    return str(abs(value))


def _is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(re.sub(r"[^a-z0-9]", "", name.lower())))


def _path_matches(pattern: Sequence[str], path: Sequence[str]) -> bool:
    return len(pattern) == len(path) and all(
        p in ("*", q) for p, q in zip(pattern, path, strict=True)
    )


@dataclass(frozen=True)
class Redactor:
    """Redaction rules for one tool."""

    card_scan_allow: frozenset[str] = frozenset()
    paths: tuple[tuple[str, ...], ...] = field(default_factory=tuple)

    @classmethod
    def for_tool(
        cls, card_scan_allow: Iterable[str] = (), redact_paths: Iterable[str] = ()
    ) -> Redactor:
        return cls(
            card_scan_allow=frozenset(card_scan_allow),
            paths=tuple(tuple(p.split(".")) for p in redact_paths),
        )

    def __call__(self, value: Any) -> Any:
        return self._walk(value, ())

    def text(self, value: str) -> str:
        return scrub_cards(value)

    def _tokenize(self, value: Any) -> str:
        raw = value if isinstance(value, str) else jsonenc.dumps(value, canonical=True)
        return redaction_token("secret", raw)

    def _walk(self, value: Any, path: tuple[str, ...]) -> Any:
        if path and any(_path_matches(p, path) for p in self.paths):
            return self._tokenize(value)
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                child = (*path, str(key))
                stored_key = scrub_cards(str(key))
                if _is_secret_name(str(key)) and item is not None and not isinstance(item, bool):
                    out[stored_key] = self._tokenize(item)
                else:
                    out[stored_key] = self._walk(item, child)
            return out
        if isinstance(value, list):
            return [self._walk(item, (*path, str(i))) for i, item in enumerate(value)]
        exempt = bool(path) and (
            path[-1] in self.card_scan_allow or ".".join(path) in self.card_scan_allow
        )
        if exempt:
            return value
        if isinstance(value, str):
            return scrub_cards(value)
        if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
            digits = _integral_digits(value)
            if digits and 13 <= len(digits) <= 19 and luhn_valid(digits):
                return redaction_token("card", digits)
        return value
