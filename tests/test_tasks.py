"""Background work known by name (`config.tasks`, ADR 0022): each app registers its tasks in its
own `tasks.py`; django-q2's schedule rows and rq's jobs store the dispatcher and a name, run here
through the real django-q2 scheduler and worker and a real rq worker on Redis."""

from __future__ import annotations

import logging
import os
import pydoc
import subprocess
import sys
import textwrap
from datetime import timedelta
from multiprocessing import Value

import pytest
import rq
from django.db import connection
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.models import Schedule, Task
from django_q.monitor import monitor
from django_q.queues import Queue
from django_q.scheduler import scheduler
from django_q.signing import SignedPackage
from django_q.worker import worker

from config.tasks import DISPATCHER, REGISTRY, DuplicateTask, Registry, UnknownTask
from devstack.provision import database_url
from ledger.audit import seal
from ledger.models import EventSeal
from reconcilers.jobqueue import enqueue
from reconcilers.schedules import SCHEDULES, ensure_schedules, tasks_are_registered
from reconcilers.worker import LedgerWorker
from tests.factories import add_event
from tests.helpers import ROOT

QUEUED = {"check-effects", "drain-checks", "execute-compensation", "run-bulk-job"}


def test_every_schedule_names_a_registered_task_and_nothing_else_is_registered():
    assert set(REGISTRY.tasks()) == set(SCHEDULES) | QUEUED
    assert tasks_are_registered() == []


@pytest.mark.parametrize("name", sorted(set(SCHEDULES) | QUEUED))
def test_every_task_is_importable_where_it_is_defined(name):
    func = REGISTRY.lookup(name)
    assert pydoc.locate(f"{func.__module__}.{func.__qualname__}") is func


def test_a_name_registered_twice_is_refused_with_both_functions_named():
    registry = Registry()
    registry.register("seal-events", seal.seal_all)
    with pytest.raises(DuplicateTask) as refused:
        registry.register("seal-events", seal.export_head)
    assert str(refused.value) == (
        "The task name 'seal-events' is registered twice: for ledger.audit.seal.seal_all "
        "and for ledger.audit.seal.export_head."
    )


def test_a_process_whose_apps_register_a_name_twice_does_not_start(tmp_path):
    """What every worker and `migrate` run first: the system checks."""
    (tmp_path / "second_sealer").mkdir()
    (tmp_path / "second_sealer" / "__init__.py").write_text("")
    (tmp_path / "second_sealer" / "tasks.py").write_text(
        "from config.tasks import register\nfrom ledger.audit import seal\n\n"
        'register("seal-events", seal.export_head)\n'
    )
    (tmp_path / "twice_settings.py").write_text(
        textwrap.dedent("""\
            from config.settings import *  # noqa: F403

            INSTALLED_APPS = [*INSTALLED_APPS, "second_sealer"]  # noqa: F405
        """)
    )
    env = {
        **os.environ,
        "DATABASE_URL": database_url(os.environ["DATABASE_URL"], connection.settings_dict["NAME"]),
        "DJANGO_SETTINGS_MODULE": "twice_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }
    argv = [sys.executable, "manage.py", "check"]
    started = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    assert started.returncode != 0
    assert "reconcilers.E001" in started.stderr
    assert "'seal-events' is registered twice: for ledger.audit.seal.seal_all" in started.stderr


def test_a_schedule_no_task_answers_to_fails_the_check(monkeypatch):
    monkeypatch.setitem(SCHEDULES, "nobodys-sweep", 5)
    [error] = tasks_are_registered()
    assert (error.id, error.msg) == (
        "reconcilers.E002",
        "The schedule 'nobodys-sweep' names no registered task.",
    )


# --- rq on Redis -----------------------------------------------------------------------------


def work(queue: rq.Queue) -> None:
    LedgerWorker([queue], connection=queue.connection).work(burst=True)


def test_a_job_queued_under_a_name_stores_the_name_and_runs_its_function(
    make_effect, rq_queue, django_capture_on_commit_callbacks
):
    effect = make_effect()
    add_event(effect, "to seal")
    with django_capture_on_commit_callbacks(execute=True):
        assert enqueue("seal-events", [()])
    [job] = rq_queue.get_jobs()
    assert (job.func_name, job.args) == (DISPATCHER, ("seal-events",))

    work(rq_queue)

    assert rq_queue.failed_job_registry.count == 0
    assert EventSeal.objects.filter(event__effect=effect).count() == effect.events.count() > 0


def test_an_unknown_name_is_refused_where_it_is_queued(rq_queue):
    with pytest.raises(UnknownTask, match="No task is registered under the name 'seal-event'"):
        enqueue("seal-event", [()])
    assert rq_queue.count == 0


def test_a_queued_job_for_a_name_nobody_registered_fails_and_says_which(rq_queue, caplog):
    # As a job queued by a release that had the name, run by one that has not.
    job = rq_queue.enqueue(DISPATCHER, "retired-task", 1)

    with caplog.at_level(logging.ERROR, logger="config.tasks"):
        work(rq_queue)

    assert job.id in rq_queue.failed_job_registry.get_job_ids()
    job.refresh()
    assert "UnknownTask: No task is registered under the name 'retired-task'" in job.exc_info
    assert "no task is registered under the name 'retired-task'" in caplog.text


# --- django-q2 -------------------------------------------------------------------------------


def run_as_a_cluster() -> None:
    """What a django-q2 cluster does with the due schedules, its parts called in this process:
    the scheduler puts each due schedule's task in the broker (a row in PostgreSQL), a worker
    runs it, the monitor records its result. Each closes the connections it finds old, so the
    tests that call it commit (`transaction=True`)."""
    broker = get_broker()
    scheduler(broker=broker)
    taken, results = Queue(), Queue()
    while packs := broker.dequeue():
        for ack_id, pack in packs:
            taken.put(SignedPackage.loads(pack))
            broker.acknowledge(ack_id)
    taken.put("STOP")
    worker(taken, results, Value("f", -1))
    results.put("STOP")
    monitor(results)


def due_only(name: str) -> None:
    later = timezone.now() + timedelta(hours=1)
    Schedule.objects.exclude(name=name).update(next_run=later)
    Schedule.objects.filter(name=name).update(next_run=timezone.now() - timedelta(minutes=1))


@pytest.mark.django_db(transaction=True)
def test_a_schedule_stored_by_dotted_path_is_rewritten_and_runs_its_task(make_effect):
    # The row a release before this one stored: the function's old module path.
    Schedule.objects.update_or_create(
        name="seal-events", defaults={"func": "ledger.seal.seal_all", "minutes": 1}
    )
    effect = make_effect()
    add_event(effect, "to seal")

    ensure_schedules()
    due_only("seal-events")
    run_as_a_cluster()

    row = Schedule.objects.get(name="seal-events")
    assert (row.func, row.args) == (DISPATCHER, "'seal-events'")
    task = Task.objects.get(group="seal-events")
    assert (task.func, task.args, task.success) == (DISPATCHER, ("seal-events",), True)
    events = effect.events.count()
    assert task.result >= events > 0
    assert EventSeal.objects.filter(event__effect=effect).count() == events


@pytest.mark.django_db(transaction=True)
def test_a_schedule_for_a_name_nobody_registered_fails_visibly(caplog):
    Schedule.objects.create(
        name="retired-sweep", func=DISPATCHER, args="'retired-sweep'", minutes=5
    )
    due_only("retired-sweep")

    with caplog.at_level(logging.ERROR, logger="config.tasks"):
        run_as_a_cluster()

    task = Task.objects.get(group="retired-sweep")
    assert task.success is False
    assert "No task is registered under the name 'retired-sweep'" in task.result
    assert "no task is registered under the name 'retired-sweep'" in caplog.text
