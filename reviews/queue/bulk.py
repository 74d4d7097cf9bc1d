"""Many review items at once: one assignment, or one decision kind, applied to each item that
allows it.

Each item is its own decision (`reviews.decisions.decide.decide`), in its own transaction, with its
own audited decision effect: a bulk action is a loop over the single-item path, never a
set-based UPDATE of statuses, so every rule of a single decision (the version check, the state
machine, four-eyes, a lost race) holds for each item. Items that cannot take the decision are
skipped with the reason, never forced:

- an item already resolved;
- an effect that waits for a second operator (awaiting approval above its tool's threshold, a
  retry proposal pending: `reviews.decisions.approvals.waits_for_second_pair`), or an item
  opened for approval: four-eyes is one person per decision, which a bulk action cannot be;
- a kind `allowed_actions` does not offer for the effect's state;
- a confirm without a provider reference the evidence suggests (`reviews.decisions.suggest`): a bulk
  confirm never invents one;
- whatever the domain refuses (`Refused`, `ValidationFailed`), with its message.

Up to `INLINE_LIMIT` items run in the request. More run as a `BulkJob` on the rq queue (the
reviews app's background work, like the reconcilers' wake-ups): the job writes each item's
outcome and a heartbeat to its row as it goes. The row, not Redis, is the job's truth: a job
lost from the queue (Redis flushed, a worker killed) is driven again by a sweep once its
heartbeat is older than `LOST_AFTER` (`redrive_lost`, a django-q2 schedule), and resumes after
the last item it recorded; an item it decided but did not record is skipped as already resolved
(each decision carries the version it saw). After `REDRIVES` re-drives it is marked failed and
the page says which items it did not reach.

A job decides as the person who started it, after the request that checked them has ended, so
before each item it checks again everything that person's own decision would, as the database
has it at that moment:

- the person (`Creator`): once they are deactivated or hold no role that may decide, the job
  stops; the items left are recorded as skipped with the reason, the job fails with it, and the
  progress page shows both;
- their teams (ADR 0014): an item whose effect is no longer of their teams (or of no team) is
  skipped with the reason, neither assigned nor decided (`decide` refuses it too);
- four-eyes, on the effect as it is now: an item that came to wait for a second operator is
  skipped, saying so when the creator is the person who asked for it (another account of
  theirs included).

Nothing here is read once for the whole run: a person taken out of a team, or an effect that
came to need a second pair of eyes, while the job runs counts from the next item on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.http import Http404

from ledger.errors import Forbidden, Refused, ValidationFailed
from ledger.models import Reason, ReviewItem
from reconcilers.jobqueue import enqueue, fresh_connection
from reviews.access.checks import can_act
from reviews.access.teams import decides_on, scoped, visible_items
from reviews.decisions.approvals import is_asker, waits_for_second_pair
from reviews.decisions.decide import decide
from reviews.decisions.declaration import Action, Ask
from reviews.decisions.kinds import KINDS as DECLARED
from reviews.decisions.offer import allowed_actions
from reviews.decisions.refusals import NotAnOperator
from reviews.decisions.suggest import Suggestion, suggest_for_rows
from reviews.models import BulkJob, BulkJobState
from reviews.queue.holds import assign_item
from reviews.queue.pages import COUNT_CAP

# The module's name before it moved into reviews/queue/: log pipelines filter on it.
log = logging.getLogger("reviews.bulk")

ASSIGN = "assign"
# Decision kinds a bulk action may apply (`DecisionKind.in_bulk`): those that settle an item on
# evidence an operator states once for all. Not compensate (it moves money, one refund at a
# time) nor approve and reject (four-eyes).
KINDS = tuple(action for action, kind in DECLARED.items() if kind.in_bulk)
INLINE_LIMIT = 100
# A running job writes its heartbeat with every item; this long without one, it is lost.
LOST_AFTER = timedelta(minutes=5)
# A job lost this many times is not driven again: something stops it, and a person must look.
REDRIVES = 3
# The rq job's task name (reviews/tasks.py registers `run_job` under it).
JOB = "run-bulk-job"
NO_REF = "no provider reference suggested to confirm with"
FOUR_EYES = "needs four-eyes: decide it on its own page"


@dataclass(frozen=True)
class Outcome:
    """What one item came to: done, or skipped and why."""

    item: int
    effect: str
    done: bool
    why: str = ""


@dataclass(frozen=True)
class Request:
    """What the operator asked of every selected item."""

    action: str  # ASSIGN or one of KINDS
    reason: str = ""
    evidence: str = ""
    assignee: User | None = None


def problems(ask: Request) -> dict[str, str]:
    """What is missing or wrong in the request as a whole (a 400 before anything runs)."""
    found: dict[str, str] = {}
    if ask.action == ASSIGN:
        if ask.assignee is None:
            found["assignee"] = "choose an operator to assign"
        return found
    if ask.action not in KINDS:
        found["action"] = f"assign, or one of {', '.join(KINDS)}"
        return found
    if not ask.reason.strip():
        found["reason"] = "every decision needs a reason"
    if "evidence" in DECLARED[ask.action].required and not ask.evidence.strip():
        found["evidence"] = "what shows it (a provider record, a support reply)"
    return found


def apply(item_ids: Sequence[int], ask: Request, user: User) -> list[Outcome]:
    """Apply `ask` to each item in turn; each decision commits on its own."""
    return list(_each(item_ids, ask, user))


def _each(
    item_ids: Sequence[int], ask: Request, user: User, creator: Creator | None = None
) -> Iterable[Outcome]:
    """Each item's outcome, decided as it is reached. A job's `creator` is read again before
    each item and that reading decides it; once they may not decide at all, that item and
    every one after it are skipped with the reason."""
    by_id = ReviewItem.objects.select_related("effect", "effect__agent").in_bulk(item_ids)
    items = [by_id[pk] for pk in item_ids if pk in by_id]
    suggestions = suggest_for_rows(items) if ask.action == Action.CONFIRM else {}
    for pk in item_ids:
        item = by_id.get(pk)
        person = creator.now() if creator is not None else user
        if person is None:
            why = creator.stopped if creator is not None else ""
            yield Outcome(pk, str(item.effect_id) if item else "", False, why)
        elif item is None:
            yield Outcome(pk, "", False, "no such review item")
        else:
            try:
                yield _one(item, ask, person, suggestions.get(pk))
            except NotAnOperator as exc:
                # The role went between the reading above and the decision's own: the job
                # stops here, as if the reading had seen it.
                stopped = creator is not None and creator.now() is None
                why = creator.stopped if stopped and creator is not None else exc.detail
                yield Outcome(pk, str(item.effect_id), False, why)


@dataclass
class Creator:
    """Who started a job, read afresh whenever the job asks: may they still decide?"""

    user_id: int
    name: str
    stopped: str = ""  # why not, once they may not: it stays so for the rest of the run

    def now(self) -> User | None:
        """The creator as the database has them now (their roles and teams not yet read), or
        None once they are deactivated or hold no role that may decide."""
        if not self.stopped:
            user = User.objects.filter(pk=self.user_id).first()
            if user is None or not user.is_active:
                self.stopped = f"Stopped: {self.name} is no longer active"
            elif not can_act(user):
                self.stopped = f"Stopped: {self.name} no longer holds a role that may decide"
            else:
                return user
        return None


def recheck(item: ReviewItem, ask: Request, user: User) -> str:
    """Why `user` may not take `ask` on the item now, read afresh (not from the rows the run
    began with): another team's effect, an item resolved meanwhile, an effect that waits for a
    second operator. "" when nothing stands in the way of the decision's own checks."""
    if not decides_on(user, item.effect_id):
        return f"not decided: {user.get_username()} is not in the team this effect belongs to"
    fresh = ReviewItem.objects.select_related("effect").filter(pk=item.pk).first()
    if fresh is None or fresh.resolved_at is not None:
        return "already resolved"
    if ask.action == ASSIGN:
        return ""
    waits, asker = waits_for_second_pair(fresh.effect)
    if not waits and fresh.reason != Reason.APPROVAL_REQUIRED:
        return ""
    if is_asker(asker, user):
        return f"{FOUR_EYES}: {user.get_username()} asked for it, another operator decides it"
    return FOUR_EYES


def _one(item: ReviewItem, ask: Request, user: User, suggested: Suggestion | None) -> Outcome:
    effect = str(item.effect_id)
    if why := recheck(item, ask, user):
        return Outcome(item.pk, effect, False, why)
    if ask.action == ASSIGN:
        if assign_item(item, ask.assignee):
            return Outcome(item.pk, effect, True)
        return Outcome(item.pk, effect, False, "resolved meanwhile")
    target = item.effect
    if ask.action not in allowed_actions(target, user):
        return Outcome(item.pk, effect, False, f"not offered for an effect in {target.status}")
    provider_ref, evidence = "", ask.evidence
    if ask.action == Action.CONFIRM:
        # Only where the evidence itself suggests confirming, with the reference it found; the
        # item's own evidence (which lookup found it) goes on record beside the operator's.
        confirm = suggested if suggested and suggested.action == Action.CONFIRM else None
        provider_ref = str(confirm.initial.get("provider_ref") or "") if confirm else ""
        if confirm is None or not provider_ref:
            return Outcome(item.pk, effect, False, NO_REF)
        if found := confirm.initial.get("evidence"):
            evidence = f"{evidence} ({found})"
    try:
        decide(
            target.pk,
            Ask(
                action=ask.action,
                reason=ask.reason,
                expected_version=target.version,
                provider_ref=provider_ref,
                evidence=evidence,
            ),
            user=user,
        )
    except ValidationFailed as exc:
        fields = "; ".join(f"{k}: {v}" for k, v in exc.extra.get("fields", {}).items())
        return Outcome(item.pk, effect, False, f"{exc.detail} {fields}".strip())
    except NotAnOperator:
        raise  # the person, not this item: `_each` decides what it means for the rest
    except (Refused, Forbidden) as exc:  # Forbidden: `OutsideTeams`, teams changed meanwhile
        return Outcome(item.pk, effect, False, exc.detail)
    return Outcome(item.pk, effect, True)


def matching_items(filters: Any) -> list[int]:
    """The ids of the items a queue filter (`reviews.queue.filters.queue_filter`) matches, up to
    the queue's count cap: "every item the filter matches"."""
    return list(filters.qs.values_list("id", flat=True)[:COUNT_CAP])


def check_named(user: Any, item_ids: Sequence[int]) -> None:
    """A 404 when the ids name an item of another team's effect, as naming a missing one would
    be if the existence of either could be told apart (ADR 0014)."""
    if not scoped(user):
        return
    seen = set(visible_items(user).filter(pk__in=item_ids).values_list("id", flat=True))
    unseen = set(item_ids) - seen
    if unseen and ReviewItem.objects.filter(pk__in=unseen).exists():
        raise Http404("No such review item.")


def job_of(user: Any, job_id: int) -> BulkJob:
    """The person's own bulk job; anyone else's is a 404, as a missing one."""
    job = BulkJob.objects.filter(pk=job_id, created_by=user).first()
    if job is None:
        raise Http404("No such bulk job.")
    return job


def start_job(item_ids: Sequence[int], ask: Request, user: User) -> BulkJob:
    """Record the job and queue it once the row is committed (a worker must find it)."""
    with transaction.atomic():
        job = BulkJob.objects.create(
            created_by=user,
            action=ask.action,
            assignee=ask.assignee,
            reason=ask.reason,
            evidence=ask.evidence,
            item_ids=list(item_ids),
        )
        transaction.on_commit(lambda: _queue(job.pk), robust=True)
    return job


def _queue(job_id: int) -> None:
    """Hand the job to the queue. Redis being unreachable loses nothing: the job stays queued
    and the sweep drives it again once its heartbeat is old enough."""
    if not enqueue(JOB, [(job_id,)]):
        log.warning("bulk job %s not queued: the sweep drives it again", job_id)


def run_job(job_id: int) -> None:
    """The rq job. Taking the row from queued to running is a conditional UPDATE, so a job
    delivered twice runs once."""
    fresh_connection()
    if not BulkJob.objects.filter(pk=job_id, state=BulkJobState.QUEUED).update(
        state=BulkJobState.RUNNING, heartbeat_at=Now()
    ):
        return
    job = BulkJob.objects.select_related("created_by", "assignee").get(pk=job_id)
    ask = Request(job.action, job.reason, job.evidence, job.assignee)
    creator = Creator(job.created_by_id, job.created_by.get_username())
    # Driven again after it was lost: it resumes after the last item it recorded.
    results: list[dict[str, Any]] = list(job.results)
    try:
        pending = job.item_ids[len(results) :]
        for outcome in _each(pending, ask, job.created_by, creator):
            results.append(asdict(outcome))
            # Only while still running: a job marked lost stays failed.
            if not BulkJob.objects.filter(pk=job_id, state=BulkJobState.RUNNING).update(
                results=results, heartbeat_at=Now()
            ):
                return
    except Exception as exc:
        log.exception("bulk job %s stopped", job_id)
        BulkJob.objects.filter(pk=job_id, state=BulkJobState.RUNNING).update(
            state=BulkJobState.FAILED, error=f"Stopped by an error: {exc}"[:2000], finished_at=Now()
        )
        raise
    stopped = creator.stopped
    BulkJob.objects.filter(pk=job_id, state=BulkJobState.RUNNING).update(
        state=BulkJobState.FAILED if stopped else BulkJobState.DONE,
        error=f"{stopped}. The items from there on were skipped, unchanged." if stopped else "",
        finished_at=Now(),
    )


def redrive_lost() -> dict[str, int]:
    """The sweep: jobs queued or running whose heartbeat is older than `LOST_AFTER` (by the
    database clock) are queued again, each by a conditional UPDATE (a worker that was only slow
    finds its job no longer running and stops); those already driven `REDRIVES` times fail."""
    lost = Q(
        state__in=(BulkJobState.QUEUED, BulkJobState.RUNNING),
        heartbeat_at__lt=Now() - LOST_AFTER,
    )
    failed = BulkJob.objects.filter(lost, redriven__gte=REDRIVES).update(
        state=BulkJobState.FAILED,
        error=(
            f"Lost {REDRIVES + 1} times (no progress for "
            f"{int(LOST_AFTER.total_seconds() // 60)} minutes each): not driven again. The "
            "items it did not reach are unchanged: select them again."
        ),
        finished_at=Now(),
    )
    redriven = 0
    for job_id in BulkJob.objects.filter(lost).values_list("pk", flat=True):
        if BulkJob.objects.filter(lost, pk=job_id).update(
            state=BulkJobState.QUEUED, heartbeat_at=Now(), redriven=F("redriven") + 1
        ):
            _queue(job_id)
            redriven += 1
    if failed or redriven:
        log.info("bulk jobs: %s driven again, %s failed", redriven, failed)
    return {"redriven": redriven, "failed": failed}
