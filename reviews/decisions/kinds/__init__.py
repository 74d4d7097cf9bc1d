"""The decision kinds, one declaration each (`reviews.decisions.declaration.DecisionKind`: its
statuses, label and past tense, keyboard letter, form fields, preview, danger, the items it
closes, and the effect it carries out), by family:

- `settle`: confirm, mark failed, cancel;
- `resend`: retry, one more attempt;
- `four_eyes`: approve, reject;
- `compensate`: compensate;
- `close`: not a duplicate, the provider's record accepted.

`KINDS` holds them in the order the page offers them. A new kind is an `Action`, one
declaration here (in its family's module or a new one) and its test; the decision, the form,
the preview, the bulk actions and the effect page read everything else from it.

Every reason a review item opens for has a decision that closes it, and where nothing needs
doing at the provider that decision does nothing there:

| open item's reason                       | closes it without a side effect                |
| ---------------------------------------- | ---------------------------------------------- |
| duplicate                                | not_duplicate: one charge after all; no move   |
| provider_mismatch, amount_mismatch,      | accept_record: the provider's record stands;   |
| statement_contradicts_record,            |   an effect still unknown or awaiting takes    |
| statement_line_removed,                  |   the record's outcome (confirmed with its ref, |
| compensation_failed                      |   or failed), a settled one stays as it is     |
| attempts_exhausted                       | extra_attempt (one more, back to planned, only |
|                                          |   where a retry cannot do it twice), or cancel |
| manual_execution                         | confirm (done by hand, with the ref)           |
| approval_required                        | approve or reject (four-eyes)                  |
| the others (the effect's outcome unknown, | confirm / fail with evidence, retry if safe    |
| restored_gap included)                   |                                                |

No retry (nor extra attempt) once a lookup has found the effect at the provider, or while a
mismatch is open: the provider holds it, so sending it again would do it a second time
(`reviews.decisions.offer`).
"""

from __future__ import annotations

from reviews.decisions.declaration import Action, DecisionKind
from reviews.decisions.kinds.close import ACCEPT_RECORD, NOT_DUPLICATE
from reviews.decisions.kinds.compensate import COMPENSATE
from reviews.decisions.kinds.four_eyes import APPROVE, REJECT
from reviews.decisions.kinds.resend import EXTRA_ATTEMPT, RETRY
from reviews.decisions.kinds.settle import CANCEL, CONFIRM, FAIL

# Every kind, in the order the page offers them.
KINDS: dict[Action, DecisionKind] = {
    kind.action: kind
    for kind in (
        CONFIRM,
        FAIL,
        RETRY,
        COMPENSATE,
        CANCEL,
        APPROVE,
        REJECT,
        NOT_DUPLICATE,
        ACCEPT_RECORD,
        EXTRA_ATTEMPT,
    )
}
ACTIONS = tuple(KINDS)

__all__ = ["ACTIONS", "KINDS", "Action", "DecisionKind", "kind_of"]


def kind_of(action: str) -> DecisionKind | None:
    """The kind an action names (a string from a URL or a stored decision), or None."""
    return KINDS.get(action)
