"""The keyboard's shortcuts as the pages declare them: `{% decision_shortcuts as keys %}` for the
`?` help (base.html), whose entries static/app.js reads to know which letter opens which
decision, and `{{ action|decision_key }}` for a control's `aria-keyshortcuts`. Each decision's
letter is its kind's declaration (`DecisionKind.key`); the keys that are not a decision's are
named here once, so the help, the attributes and docs/operators.md say the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from django import template

from reviews.decisions.kinds import KINDS, kind_of

register = template.Library()

# The queue's own keys, and the help's (a decision's letter is never one of them).
MOVE_DOWN, MOVE_UP, OPEN, HELP = "j", "k", "o", "?"
PAGE_KEYS = frozenset({MOVE_DOWN, MOVE_UP, OPEN, HELP})
# Sends the decision form the focus is in (it still asks to confirm): Ctrl+Enter, or
# Cmd+Enter on a Mac. As `aria-keyshortcuts` spells it (Meta is the Command key).
SUBMIT = "Control+Enter Meta+Enter"
# "?" is typed with Shift on most keyboards; `aria-keyshortcuts` names the keys pressed.
HELP_SHORTCUT = "Shift+?"


@dataclass(frozen=True)
class Shortcut:
    key: str
    action: str
    label: str


@register.simple_tag
def decision_shortcuts() -> list[Shortcut]:
    """Every decision's key, in the order the page offers the decisions."""
    return [Shortcut(kind.key, str(action), kind.label) for action, kind in KINDS.items()]


@register.filter
def decision_key(action: str) -> str:
    """The key that opens `action`, or "" for a word that names no decision."""
    kind = kind_of(str(action))
    return kind.key if kind is not None else ""


@register.simple_tag
def submit_shortcut() -> str:
    return SUBMIT


@register.simple_tag
def help_shortcut() -> str:
    return HELP_SHORTCUT
