"""Why a decision is refused (each a `Refused`: 409 with a reason code). Which rule raises which
is `reviews.decisions.offer` and the kinds' own checks (`reviews.decisions.kinds`)."""

from __future__ import annotations

from ledger.errors import Refused


class RetryUnsafe(Refused):
    """A resend could do the effect a second time."""

    code = "retry_unsafe"


class DoesNotApply(Refused):
    """The decision closes another kind of review item than the one open."""

    code = "does_not_apply"


class RecordFound(Refused):
    """A lookup found the effect at the provider: it is not sent again."""

    code = "record_found"


class MismatchOpen(Refused):
    """The provider holds a record that differs from ours: it is not sent again."""

    code = "mismatch_open"


class NoRecord(Refused):
    """Accepting the provider's record needs a record."""

    code = "no_provider_record"


class AlreadyDecided(Refused):
    """Someone else decided (or the effect moved) since the operator looked at it."""

    code = "already_decided"
