"""How an effect's identity travels in a GitHub issue: GitHub keeps no idempotency key, so the
issue's body carries a marker, an HTML comment that GitHub's Markdown renders as nothing:

    <!-- effect-ledger key=el_3kq… effect=5f0c…-…-… -->

`marked_body` appends it, on a line of its own, to the body the agent wrote, after defusing any
marker-like text in that body (`<!--` before `effect-ledger` becomes `&lt;!--`, which GitHub
shows as the literal text), so that an agent cannot make its issue pass for another effect's.
`markers` reads every well-formed marker of a body as GitHub returns it.

Standard library only: the agent's side builds bodies with it without loading the ledger.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

# The characters an idempotency key may have to travel in a marker: what the ledger's keys are
# made of (`el_` and base32), and the separators other key schemes use. No `--` (it would end
# an HTML comment early) and no space (it would end the field).
KEY = re.compile(r"[A-Za-z0-9_.:=+/-]{1,64}")
_MARKER = re.compile(
    r"<!-- effect-ledger key=(?P<key>[A-Za-z0-9_.:=+/-]{1,64}) "
    r"effect=(?P<effect>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) -->"
)
# What an agent's text might use to pass for a marker: any comment opening that names us,
# with any spacing or case.
_LOOKALIKE = re.compile(r"<!--(?=\s*effect-ledger)", re.IGNORECASE)
# GitHub refuses an issue body longer than 65,536 characters.
MAX_BODY = 65_536


@dataclass(frozen=True)
class Marker:
    key: str
    effect: str


def marker(idempotency_key: str, effect_id: str | uuid.UUID) -> str:
    """The marker of one effect; ValueError for a key that cannot travel in one."""
    if not KEY.fullmatch(idempotency_key) or "--" in idempotency_key:
        raise ValueError("this idempotency key cannot travel in an issue body marker")
    effect = str(uuid.UUID(str(effect_id)))
    return f"<!-- effect-ledger key={idempotency_key} effect={effect} -->"


def defuse(text: str) -> str:
    """The agent's text with every marker-like comment opening shown as text instead."""
    return _LOOKALIKE.sub("&lt;!--", text)


def marked_body(body: str | None, idempotency_key: str, effect_id: str | uuid.UUID) -> str:
    """The body to send: the agent's text, defused, then the effect's marker on a line of its
    own. ValueError when the result would be longer than GitHub takes."""
    tag = marker(idempotency_key, effect_id)
    text = defuse(body or "").rstrip()
    result = f"{text}\n\n{tag}" if text else tag
    if len(result) > MAX_BODY:
        raise ValueError(f"the issue body with its marker is longer than {MAX_BODY} characters")
    return result


def markers(body: object) -> list[Marker]:
    """Every well-formed marker in an issue body (none for a body that is not a string)."""
    if not isinstance(body, str):
        return []
    return [Marker(m["key"], m["effect"]) for m in _MARKER.finditer(body)]
