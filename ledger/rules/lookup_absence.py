"""When a provider's "not found" proves that a request never arrived.

A not-found proves absence only if the provider could not have the request and still not
show it: the search must be complete, and taken late enough that nothing sent could still be
on its way. Two kinds of tool qualify (docs/concepts.md#recovery):

| tool                                   | a not-found proves absence when it was taken …        |
| -------------------------------------- | ------------------------------------------------------ |
| honours_key                            | after the last dispatch + settle_after, within key_ttl |
| lookup_proves_absence (a list search)  | after the last dispatch + settle_after, within         |
|                                        | lookup_horizon, and the answer was a list              |
| anything else                          | never: a person decides                                |

"The last dispatch" ends when the effect last left `dispatching` (its outcome, or its lease's
end); an effect still `dispatching` is judged by its lease's end, since a client never starts
a call with less than the tool's `call_timeout` left on its lease
(`ledger.effects.transitions.claim`
refuses shorter leases). The age limits are counted from the effect's creation, which is no
later than its first dispatch: the key or the search may have forgotten it past them.

An effect restore mode put in doubt, or that started in doubt, may have been sent on the branch
the database lost, with no event here to show it: its last dispatch ends no earlier than the
restore window's start plus the longest lease (`ledger.rules.reach.lost_dispatch`), and its age
counts from the window's `lost_since` less the longest lease.

An effect sent again on such a proof gets one more lookup once it next resolves
(`tail_check_due`): a first request that landed late after all shows up as a second record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from ledger.models import Effect
from ledger.models.states import Status
from ledger.policy.tools import Policy

# Why a not-found proved absence (the transition's event data says which).
BY_KEY, BY_COMPLETE_LOOKUP = "honours_key", "complete_lookup"


@dataclass(frozen=True)
class Proof:
    """What one not-found proves: `ground` ("" when nothing), else when a later lookup could
    (`not_before`; None when none ever can)."""

    ground: str
    not_before: datetime | None = None
    why_not: str = ""


def settle_after(policy: Policy) -> timedelta:
    return policy.settle_after or timedelta(seconds=settings.LEDGER_SETTLE_AFTER)


def last_dispatch_end(
    effect: Effect, now: datetime, lost: tuple[datetime, datetime] | None = None
) -> datetime:
    """The last moment a request of this effect could have left for the provider. `lost`: when
    a copy of it on a branch the database lost could have been sent (an effect in doubt after
    a restore, `ledger.rules.reach.lost_dispatch`); its end counts as a dispatch's end."""
    if effect.status == Status.DISPATCHING:
        end = effect.lease_expires_at or now
    elif effect.left_dispatch_at is not None or lost is None:
        end = effect.left_dispatch_at or now
    else:
        return lost[1]  # never sent from this database: only the lost branch's copy counts
    return max(end, lost[1]) if lost is not None else end


def not_found_proves(
    effect: Effect,
    policy: Policy,
    *,
    taken_at: datetime,
    listed: bool,
    lost: tuple[datetime, datetime] | None = None,
) -> Proof:
    """Does a not-found answer, asked for at `taken_at` (`listed`: a list search), prove that
    the provider never got this effect's request? Pure: no queries. `lost` (from, until): an
    effect in doubt after a restore may have been sent on the lost branch in that range; its
    age is counted from the range's start when that is earlier than its creation."""
    born = min(effect.created_at, lost[0]) if lost is not None else effect.created_at
    age = taken_at - born
    if policy.honours_key and policy.key_ttl and age < policy.key_ttl:
        ground = BY_KEY
    elif (
        policy.lookup_proves_absence
        and listed
        and policy.lookup_horizon
        and age < policy.lookup_horizon
    ):
        ground = BY_COMPLETE_LOOKUP
    else:
        return Proof("", why_not="the provider's search cannot prove absence for this effect")
    settled = last_dispatch_end(effect, taken_at, lost) + settle_after(policy)
    if taken_at < settled:
        return Proof("", not_before=settled, why_not="a request may still be on its way")
    return Proof(ground)


def tail_check_due(policy: Policy, resolved_at: datetime) -> datetime:
    """When the tail check of an effect retried on a proof of absence looks again: late enough
    that a first request still in flight at the proof would show (settle_after + call_timeout
    after the effect resolved)."""
    return resolved_at + settle_after(policy) + (policy.call_timeout or timedelta(0))
