"""Why a decision is refused (each a `Refused`: 409 with a reason code, except `OutsideTeams` and
`NotAnOperator`: a 403). Which rule raises which is `reviews.decisions.offer` and the kinds' own
checks (`reviews.decisions.kinds`); `OutsideTeams` and `NotAnOperator` are
`reviews.decisions.decide` itself."""

from __future__ import annotations

from ledger.errors import Forbidden, Refused


class OutsideTeams(Forbidden):
    """The effect belongs to a team the person is not in (ADR 0014), as the database has their
    teams at the moment of deciding. The pages answer another team's effect with a 404 before
    deciding; this is what every other caller meets (a bulk job, a shell, a future API)."""

    code = "outside_teams"


class NotAnOperator(Forbidden):
    """The person deciding is deactivated, or no longer an operator (nor an admin), as the
    database has them at the moment of deciding: a page opened before the role was taken away,
    a bulk job queued before, a token made before, a command naming them."""

    code = "not_an_operator"


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
