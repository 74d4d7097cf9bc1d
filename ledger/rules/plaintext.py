"""Text an agent chose, made safe to put on one line of something people read.

Run ids, effect keys, tool names and reasons reach email subjects, message bodies, webhook
summaries and logs. A line break in one would end a header early (Django refuses such a subject
outright, which once stopped the alert sender) or forge a line of its own; a bidirectional
override would make the line read otherwise than it is. Each such character is shown as an
escape instead (`\\n`, `\\x01`, `\\u202e`), so what the agent sent stays visible and nothing
of it acts.
"""

from __future__ import annotations

import unicodedata

# Control, format (bidirectional overrides, zero-width characters), line and paragraph
# separators, unassigned and surrogate code points.
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cn", "Cs", "Co"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def one_line(value: object) -> str:
    """`value` as text with every character that could break or disguise a line escaped."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(
        _escape(c) if unicodedata.category(c) in _HIDDEN or (c.isspace() and c != " ") else c
        for c in text
    )
