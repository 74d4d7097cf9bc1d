"""A decision checks the deciding person's teams itself, whoever calls it, and a background bulk
job checks again before every item everything that person's own decision checks: their role,
their teams as they are now, four-eyes on the effect as it is now. Beta owns charge_card; Alpha
owns create_ticket; send_email is no team's. olga is an operator in Beta; ada is an admin.
Real PostgreSQL, real Redis, a real rq worker."""

from __future__ import annotations

import threading
import time

import django_rq
import pytest
import rq
from django.contrib.auth.models import User
from django.db import connection

from ledger.models import Effect, Reason, RetryProposal, ReviewItem, Team, Tool
from ledger.models.states import Kind
from ledger.policy.roles import ADMIN, OPERATOR, grant
from ledger.policy.teams import add_member, remove_member, scope_of
from reconcilers.worker import LedgerWorker
from reviews.access.counts import forget
from reviews.decisions.decide import Ask, OutsideTeams, decide
from reviews.models import BulkJob
from reviews.queue.bulk import FOUR_EYES, INLINE_LIMIT
from reviews.sso.people import link
from tests.factories import in_review, signed_in

ITEMS = INLINE_LIMIT + 10
NOT_IN_TEAM = "olga is not in the team this effect belongs to"


@pytest.fixture
def queue():
    """The project's rq queue (on this run's Redis database), empty before and after."""
    q = django_rq.get_queue("default")
    q.empty()
    yield q
    q.empty()


@pytest.fixture
def beta(olga, tools) -> Team:
    """Beta owns charge_card (every effect of make_effect's default tool), olga is in it;
    Alpha owns create_ticket."""
    team = Team.objects.create(name="Beta", slug="beta")
    alpha = Team.objects.create(name="Alpha", slug="alpha")
    Tool.objects.filter(name="charge_card").update(team=team)
    Tool.objects.filter(name="create_ticket").update(team=alpha)
    add_member(olga, team)
    forget()
    return team


@pytest.fixture
def ada(db) -> User:
    user = User.objects.create_user("ada")
    grant(user, ADMIN)
    return user


def _start(person: User, items: list[ReviewItem], action: str = "cancel", **form) -> BulkJob:
    data = {"items": [str(i.pk) for i in items], "confirmed": "1", **form}
    response = signed_in(person).post("/queue/bulk", {**data, "action": action, "reason": "Stale"})
    assert response.status_code == 302
    return BulkJob.objects.get()


def _work(queue: rq.Queue) -> None:
    LedgerWorker([queue], connection=queue.connection).work(burst=True)
    assert queue.count == 0 and queue.failed_job_registry.count == 0


def _decided(effects: list[Effect]) -> int:
    return Effect.objects.filter(parent__in=effects, kind=Kind.DECISION).count()


# --- A bulk job across a team change ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # a job starts with a fresh database connection
def test_a_job_whose_creator_left_the_team_decides_none_of_its_items_and_says_why(
    olga, make_effect, queue, beta
):
    betas = [make_effect("planned") for _ in range(ITEMS)]
    nobodys = [make_effect("planned", tool="send_email") for _ in range(3)]
    job = _start(olga, [in_review(e) for e in betas + nobodys])
    remove_member(User.objects.get(pk=olga.pk), beta)  # after the request, before the worker

    _work(queue)

    job.refresh_from_db()
    assert job.state == "done" and job.error == ""
    assert [(r["done"], r["why"]) for r in job.results[:ITEMS]] == [
        (False, f"not decided: {NOT_IN_TEAM}")
    ] * ITEMS
    assert all(r["done"] for r in job.results[ITEMS:])  # no team's: still olga's to decide
    assert _decided(betas) == 0
    assert not Effect.objects.filter(pk__in=[e.pk for e in betas], status="cancelled").exists()
    assert Effect.objects.filter(pk__in=[e.pk for e in nobodys], status="cancelled").count() == 3
    page = signed_in(olga).get(f"/queue/bulk/{job.pk}").content.decode()
    assert f"3 done, {ITEMS} skipped" in page and NOT_IN_TEAM in page


class Removal(threading.Thread):
    """From a connection of its own, once the job has recorded `after` items: olga is taken out
    of Beta. Notes the database time it committed."""

    def __init__(self, job: BulkJob, team: Team, after: int) -> None:
        super().__init__(daemon=True)
        self.job, self.team, self.after = job, team, after
        self.at = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 30
            while len(BulkJob.objects.get(pk=self.job.pk).results) < self.after:
                assert time.monotonic() < deadline
                time.sleep(0.002)
            remove_member(User.objects.get(username="olga"), self.team)
            with connection.cursor() as cursor:
                cursor.execute("SELECT clock_timestamp()")
                self.at = cursor.fetchone()[0]
        finally:
            connection.close()


@pytest.mark.django_db(transaction=True)
def test_a_creator_taken_out_of_the_team_mid_run_decides_nothing_of_it_afterwards(
    olga, make_effect, queue, beta
):
    betas = [make_effect("planned") for _ in range(ITEMS)]
    job = _start(olga, [in_review(e) for e in betas])
    removal = Removal(job, beta, after=3)
    removal.start()

    _work(queue)
    removal.join(10)

    assert removal.at is not None, "the job ended before the removal"
    job.refresh_from_db()
    assert job.state == "done" and len(job.results) == ITEMS
    done = [r["done"] for r in job.results]
    cut = done.index(False)
    assert 3 <= cut < ITEMS and not any(done[cut:])
    # Skipped by the job's own re-check, or (the item in flight) refused by `decide` itself.
    assert all(NOT_IN_TEAM in r["why"] for r in job.results[cut:])
    assert Effect.objects.filter(pk__in=[e.pk for e in betas], status="cancelled").count() == cut
    late = Effect.objects.filter(kind=Kind.DECISION, created_at__gt=removal.at)
    assert late.count() <= 1  # at most the item in flight as the membership went


@pytest.mark.django_db(transaction=True)  # a job starts with a fresh database connection
def test_an_admin_still_decides_every_teams_items_in_a_job(ada, make_effect, queue, beta):
    effects = [make_effect("planned") for _ in range(ITEMS - 20)]
    effects += [make_effect("planned", tool="create_ticket") for _ in range(10)]
    effects += [make_effect("planned", tool="send_email") for _ in range(10)]
    job = _start(ada, [in_review(e) for e in effects])

    _work(queue)

    job.refresh_from_db()
    assert job.state == "done" and all(r["done"] for r in job.results), job.results[:3]
    assert Effect.objects.filter(pk__in=[e.pk for e in effects], status="cancelled").count() == (
        ITEMS
    )


# --- decide() itself -------------------------------------------------------------------------


def _fail(effect: Effect) -> Ask:
    return Ask(
        action="fail", reason="Declined", evidence="Ticket 7", expected_version=effect.version
    )


def test_decide_refuses_an_effect_of_a_team_the_person_is_not_in(olga, make_effect, beta):
    theirs = in_review(make_effect("unknown", attempt=1, tool="create_ticket")).effect

    with pytest.raises(OutsideTeams) as refused:
        decide(theirs.pk, _fail(theirs), user=olga)

    assert (refused.value.status, refused.value.code) == (403, "outside_teams")
    assert Effect.objects.get(pk=theirs.pk).status == "unknown" and _decided([theirs]) == 0
    assert ReviewItem.objects.get(effect=theirs).resolved_at is None


def test_decide_reads_the_persons_teams_afresh_not_what_the_request_remembered(
    olga, make_effect, beta
):
    ours = in_review(make_effect("unknown", attempt=1)).effect
    assert scope_of(olga) == frozenset({beta.pk})  # remembered on this user object
    remove_member(User.objects.get(pk=olga.pk), beta)  # another object: olga's is not told

    with pytest.raises(OutsideTeams):
        decide(ours.pk, _fail(ours), user=olga)
    assert _decided([ours]) == 0
    # The page answers another team's effect as a missing one, before it decides anything.
    page = signed_in(olga).post(f"/effects/{ours.pk}/decide/fail", {"reason": "x"})
    assert page.status_code == 404


def test_an_admin_and_a_member_decide_through_decide(olga, ada, make_effect, beta):
    ours = in_review(make_effect("unknown", attempt=1)).effect
    theirs = in_review(make_effect("unknown", attempt=1, tool="create_ticket")).effect
    decide(ours.pk, _fail(ours), user=olga)
    decide(theirs.pk, _fail(theirs), user=ada)
    assert {Effect.objects.get(pk=e.pk).status for e in (ours, theirs)} == {"failed"}


# --- Four-eyes, per item ---------------------------------------------------------------------


def _propose_retry(effect: Effect, user: User) -> None:
    ask = Ask(
        action="retry",
        reason="Never arrived",
        evidence="mail log: nothing sent",
        verified_absent=True,
        expected_version=Effect.objects.get(pk=effect.pk).version,
    )
    decide(effect.pk, ask, user=user)


@pytest.mark.django_db(transaction=True)  # a job starts with a fresh database connection
def test_a_job_skips_items_that_came_to_wait_for_a_second_operator(olga, otto, make_effect, queue):
    emails = [make_effect("unknown", tool="send_email", attempt=1) for _ in range(ITEMS)]
    job = _start(olga, [in_review(e, Reason.NO_LOOKUP) for e in emails], "fail", evidence="Bounced")
    # After the job was started: olga, signed in through another account of hers (one person),
    # proposes a retry of one; otto proposes a retry of another.
    other_olga = User.objects.create_user("olga.sso")
    grant(other_olga, OPERATOR)  # an SSO account gets its role from the claim as olga's did
    link(olga, other_olga)
    _propose_retry(emails[5], other_olga)
    _propose_retry(emails[7], otto)

    _work(queue)

    job.refresh_from_db()
    outcomes = [(r["done"], r["why"]) for r in job.results]
    assert outcomes[5] == (False, f"{FOUR_EYES}: olga asked for it, another operator decides it")
    assert outcomes[7] == (False, FOUR_EYES)
    assert all(done for i, (done, _) in enumerate(outcomes) if i not in (5, 7))
    for i in (5, 7):
        assert Effect.objects.get(pk=emails[i].pk).status == "unknown"
        assert RetryProposal.objects.get(effect=emails[i]).decided_at is None
