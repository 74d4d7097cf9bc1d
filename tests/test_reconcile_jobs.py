"""Reconciliation as background work: rq wake-ups sent on commit, the sweeps that re-drive what
Redis lost, real rq workers draining the queue, and checkers racing over one backlog.

Tests that need `on_commit` hooks or several database connections use `transaction=True`:
hooks only run on real commits, and other connections only see committed rows.
"""

from __future__ import annotations

import threading

import pytest
import rq
from django.conf import settings as django_settings
from django.db import connection, transaction

from config.tasks import DISPATCHER
from ledger.effects.wakeups import wake
from ledger.models import Effect, EffectEvent
from reconcilers.jobqueue import enqueue
from reconcilers.jobs import check_effects
from reconcilers.reconcile import process_next
from reconcilers.schedules import SCHEDULES, ensure_schedules, queue_expired_leases, sweep
from reconcilers.worker import LedgerWorker
from tests.factories import SETTLED, charge_at, checks_of, reviews_of, stored
from tests.helpers import expire_lease

# Redis outage, realistically: nothing listens there, and the client gives up within a second.
REDIS_DOWN = "redis://127.0.0.1:1/0?socket_timeout=1&socket_connect_timeout=1"


class RedisSwitch:
    """Takes Redis away from the app, and gives it back, by pointing the queue elsewhere."""

    def __init__(self, settings) -> None:
        self.settings = settings
        self.up_config = settings.RQ_QUEUES

    def down(self) -> None:
        self.settings.RQ_QUEUES = {"default": {**self.up_config["default"], "URL": REDIS_DOWN}}

    def up(self) -> None:
        self.settings.RQ_QUEUES = self.up_config


@pytest.fixture
def redis(settings, rq_queue) -> RedisSwitch:
    return RedisSwitch(settings)


def work(queue: rq.Queue) -> None:
    """A real rq worker, in this process, until the queue is empty; no job may fail."""
    LedgerWorker([queue], connection=queue.connection).work(burst=True)
    assert queue.count == 0
    assert queue.failed_job_registry.count == 0


def _lost_wake_ups(caplog) -> int:
    return sum("could not enqueue" in r.getMessage() for r in caplog.records)


def lease_ran_out_ago(effect_id: str, seconds: int) -> None:
    """The lease expired `seconds` ago; nothing has queued the effect for a check yet."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET lease_expires_at = now() - make_interval(secs => %s) "
            "WHERE id = %s",
            [seconds, effect_id],
        )


# --- Wake-ups on commit ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_unknown_outcome_wakes_a_worker_that_confirms_the_effect(alice, provider, rq_queue):
    effect = alice.intent(claim=True)
    charge = charge_at(provider, effect).json()
    alice.outcome(effect["id"], effect["lease_token"], "unknown")

    [job] = rq_queue.get_jobs()
    assert (job.func_name, job.args) == (DISPATCHER, ("check-effects", [effect["id"]]))

    work(rq_queue)

    after = stored(effect)
    assert (after.status, after.provider_ref) == ("confirmed", charge["id"])
    assert len(checks_of(effect)) == 1


@pytest.mark.django_db(transaction=True)
def test_recovery_of_a_lost_lookup_effect_wakes_a_worker_that_confirms_it(
    alice, provider, rq_queue
):
    effect = alice.intent(claim=True)
    charge = charge_at(provider, effect).json()
    expire_lease(effect["id"])

    item = alice.post("/recovery", {}).json()["effects"][0]
    assert item["action"] == "reconcile"
    assert rq_queue.count == 1

    work(rq_queue)

    assert (stored(effect).status, stored(effect).provider_ref) == ("confirmed", charge["id"])


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_write_sends_no_wake_up(alice, provider, rq_queue):
    effect = alice.intent(claim=True)
    with pytest.raises(RuntimeError), transaction.atomic():
        wake([effect["id"]])
        raise RuntimeError("the write failed")

    assert rq_queue.count == 0


@pytest.mark.django_db(transaction=True)
def test_a_drain_job_checks_the_most_overdue_effects_up_to_its_limit(alice, provider, rq_queue):
    effects = [alice.intent(step_id=f"s{n}", claim=True) for n in range(3)]
    for age, effect in zip((30, 20, 10), effects, strict=True):
        charge_at(provider, effect)
        lease_ran_out_ago(effect["id"], age)
    queue_expired_leases()
    assert enqueue("drain-checks", [(2,)])

    work(rq_queue)

    assert [stored(e).status for e in effects] == ["confirmed", "confirmed", "dispatching"]


# --- Redis outages ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_effects_recorded_while_redis_is_down_are_all_reconciled_once_it_is_back(
    alice, provider, redis, rq_queue, caplog
):
    redis.down()
    # The API answers as usual: every write commits, only the wake-ups are lost.
    charged_unknown = alice.intent(step_id="charged-unknown", claim=True)
    charge_a = charge_at(provider, charged_unknown).json()
    alice.outcome(charged_unknown["id"], charged_unknown["lease_token"], "unknown")
    charged_lost = alice.intent(step_id="charged-lost", claim=True)
    charge_b = charge_at(provider, charged_lost).json()
    never_sent = alice.intent(step_id="never-sent", claim=True)
    email = alice.intent(step_id="email", tool="send_email", request={"to": "x"}, claim=True)
    alice.outcome(email["id"], email["lease_token"], "unknown")
    for lost in (charged_lost, never_sent):
        lease_ran_out_ago(lost["id"], SETTLED)
    recovery = alice.post("/recovery", {"dry_run": True})
    assert recovery.status_code == 200
    # The scheduled sweep runs during the outage too: it marks the work and survives.
    assert sweep() == {"expired_leases": 2, "redriven": 4, "executions": 0}
    assert _lost_wake_ups(caplog) == 3  # two unknown outcomes, one sweep
    assert [stored(e).status for e in (charged_unknown, charged_lost, never_sent, email)] == [
        "unknown",
        "dispatching",
        "dispatching",
        "unknown",
    ]

    redis.up()
    assert rq_queue.count == 0
    assert sweep() == {"expired_leases": 0, "redriven": 4, "executions": 0}
    work(rq_queue)

    assert (stored(charged_unknown).status, stored(charged_unknown).provider_ref) == (
        "confirmed",
        charge_a["id"],
    )
    assert (stored(charged_lost).status, stored(charged_lost).provider_ref) == (
        "confirmed",
        charge_b["id"],
    )
    assert stored(never_sent).status == "planned"
    assert stored(email).status == "unknown"
    assert reviews_of(email) == [("no_lookup", True)]
    # Nothing is left for the next sweep, and the ledger itself never charged anyone.
    assert sweep()["redriven"] == 0
    assert len(provider.transactions()) == 2


@pytest.mark.django_db(transaction=True)
def test_an_unknown_outcome_is_recorded_while_redis_is_down(alice, provider, redis, caplog):
    effect = alice.intent(claim=True)
    redis.down()

    body = alice.outcome(effect["id"], effect["lease_token"], "unknown")

    assert _lost_wake_ups(caplog) == 1

    assert body["status"] == "unknown"
    assert stored(effect).status == "unknown"
    assert stored(effect).next_check_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_wake_up_delivered_twice_checks_the_effect_once(alice, provider, rq_queue):
    effect = alice.intent(claim=True)
    charge_at(provider, effect)
    alice.outcome(effect["id"], effect["lease_token"], "unknown")
    sweep()  # a second wake-up for the same effect, as after a lost acknowledgement
    assert rq_queue.count == 2

    work(rq_queue)

    assert stored(effect).status == "confirmed"
    assert len(checks_of(effect)) == 1


# --- Two checkers, one backlog ---------------------------------------------------------------


def _by_sweep(ids: list[str]) -> int:
    """A checker that takes whatever is most overdue, until nothing is due."""
    count = 0
    while process_next():
        count += 1
    return count


def _by_wake_ups(ids: list[str]) -> int:
    """An rq job naming every effect, as when each worker got the same wake-ups."""
    return check_effects(ids)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("drain", [_by_sweep, _by_wake_ups], ids=["process_next", "rq_job"])
def test_two_workers_on_one_backlog_reconcile_each_effect_exactly_once(alice, provider, drain):
    effects = [alice.intent(step_id=f"s{n}", claim=True) for n in range(40)]
    committed = effects[::2]
    for effect in committed:
        charge_at(provider, effect)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET lease_expires_at = now() - make_interval(secs => %s)",
            [SETTLED],
        )
    assert queue_expired_leases() == 40

    start = threading.Barrier(2)
    done: list[int] = []
    errors: list[BaseException] = []

    def checker() -> None:
        try:
            start.wait()
            done.append(drain([e["id"] for e in effects]))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=checker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert sum(done) == 40
    charges = {t["idempotency_key"]: t["id"] for t in provider.transactions()}
    for effect in effects:
        assert len(checks_of(effect)) == 1, effect["step_id"]
        departures = EffectEvent.objects.filter(
            effect_id=effect["id"], kind="transition", from_status="dispatching"
        )
        assert departures.count() == 1, effect["step_id"]
    for effect in committed:
        after = stored(effect)
        assert (after.status, after.provider_ref) == (
            "confirmed",
            charges[effect["idempotency_key"]],
        )
    assert Effect.objects.filter(status="confirmed").count() == 20
    assert Effect.objects.filter(status="planned").count() == 20
    assert len(charges) == 20


# --- Sweeps and schedules --------------------------------------------------------------------


def test_queue_expired_leases_marks_exactly_the_dispatching_effects_whose_lease_ran_out(
    alice, provider
):
    expired = alice.intent(step_id="expired", claim=True)
    lease_ran_out_ago(expired["id"], 30)
    live = alice.intent(step_id="live", claim=True)
    planned = alice.intent(step_id="planned")
    unknown = alice.intent(step_id="unknown", claim=True)
    alice.outcome(unknown["id"], unknown["lease_token"], "unknown")
    unknown_due = stored(unknown).next_check_at
    done = alice.intent(step_id="done", claim=True)
    alice.outcome(done["id"], done["lease_token"])

    assert queue_expired_leases() == 1

    marked = stored(expired)
    # Due from the moment its lease ran out: the oldest work is taken first.
    assert marked.next_check_at == marked.lease_expires_at
    assert stored(live).next_check_at is None
    assert stored(planned).next_check_at is None
    assert stored(done).next_check_at is None
    assert stored(unknown).next_check_at == unknown_due
    # Once marked, a second sweep leaves it (and its place in the queue) alone.
    assert queue_expired_leases() == 0
    assert stored(expired).next_check_at == marked.next_check_at
    # Marking is not a transition: the effect waits, dispatching, for its check.
    assert stored(expired).status == "dispatching"


def test_an_effect_marked_by_the_sweep_is_the_next_one_checked(alice, provider):
    later = alice.intent(step_id="later", claim=True)
    lease_ran_out_ago(later["id"], 10)
    earlier = alice.intent(step_id="earlier", claim=True)
    lease_ran_out_ago(earlier["id"], 20)
    charge_at(provider, earlier)
    charge_at(provider, later)
    queue_expired_leases()

    assert process_next() is True
    assert (stored(earlier).status, stored(later).status) == ("confirmed", "dispatching")
    assert process_next() is True
    assert stored(later).status == "confirmed"
    assert process_next() is False


def test_ensure_schedules_leaves_exactly_the_declared_schedules_however_often_it_runs(db):
    from django_q.models import Schedule

    # Rows that releases before named tasks stored: each named its function's dotted path, old
    # module paths among them (`ledger.seal`, `reviews.escalation`, …). Each is rewritten by its
    # name, whatever function it named and whatever period it had.
    old_form = {
        "seal-events": "ledger.seal.seal_all",
        "retention": "ledger.retention.redact_expired",
        "escalation": "reviews.escalation.escalate",
        "bulk-jobs": "reviews.bulk.redrive_lost",
        "review-alerts": "reviews.alerts.sweep",
        "export-chain-head": "ledger.audit.seal.export_head",
    }
    for name, func in old_form.items():
        Schedule.objects.update_or_create(name=name, defaults={"func": func, "minutes": 7})
    # A task this release no longer schedules, and a schedule someone else added.
    Schedule.objects.create(name="retired-sweep", func=DISPATCHER, args="'retired-sweep'")
    Schedule.objects.create(name="someone-elses", func="billing.tasks.invoice", minutes=5)

    ensure_schedules()
    ensure_schedules()

    rows = Schedule.objects.exclude(name="someone-elses")
    assert sorted(
        (s.name, s.func, s.args, s.schedule_type, s.minutes, s.repeats) for s in rows
    ) == sorted(
        (name, DISPATCHER, repr(name), Schedule.MINUTES, minutes, -1)
        for name, minutes in SCHEDULES.items()
    )
    assert set(SCHEDULES) == {
        "reconciliation-sweep",
        "repeated-requests",
        "tail-checks",
        "retention",
        "fetch-statements",
        "escalation",
        "bulk-jobs",
        "review-alerts",
        "alert-sender",
        "seal-events",
        "fold-effect-counts",
        "statement-held-lines",
        "export-chain-head",
        "event-partitions",
        "restore-witness",
        "restore-gap-sweep",
    }
    assert Schedule.objects.get(name="someone-elses").func == "billing.tasks.invoice"
    # A cluster that was down does not replay every missed sweep, and a task is killed
    # before django-q2 would hand it to a second worker.
    assert django_settings.Q_CLUSTER["catch_up"] is False
    assert django_settings.Q_CLUSTER["timeout"] < django_settings.Q_CLUSTER["retry"]
