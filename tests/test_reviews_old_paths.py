"""The reviews app's dotted paths that live outside the code keep working for one release: the
django-q2 schedules stored in the database and the rq jobs queued in Redis name the modules the
app had before its subpackages, and log pipelines filter on the old logger names."""

from __future__ import annotations

import logging
import pydoc

import pytest
from rq.utils import import_attribute

from reconcilers.schedules import SCHEDULES
from reviews.alerts import due, escalation, sender
from reviews.queue import bulk

# Old path (as stored) → the function it names now.
OLD_PATHS = {
    "reviews.alerts.sweep": due.sweep,
    "reviews.alerts.send_due": sender.send_due,
    "reviews.escalation.escalate": escalation.escalate,
    "reviews.bulk.redrive_lost": bulk.redrive_lost,
    "reviews.bulk.run_job": bulk.run_job,
}


@pytest.mark.parametrize(("old", "function"), OLD_PATHS.items())
def test_an_old_path_still_names_the_same_function(old, function):
    # django-q2 finds a schedule's function with pydoc.locate, rq a job's with import_attribute.
    assert pydoc.locate(old) is function
    assert import_attribute(old) is function


def test_the_schedules_name_the_new_paths():
    funcs = {spec["func"] for spec in SCHEDULES.values() if spec["func"].startswith("reviews.")}
    assert funcs == {
        "reviews.alerts.due.sweep",
        "reviews.alerts.sender.send_due",
        "reviews.alerts.escalation.escalate",
        "reviews.queue.bulk.redrive_lost",
    }
    for func in funcs:
        assert callable(pydoc.locate(func)), func
    assert bulk.JOB == "reviews.queue.bulk.run_job"
    assert import_attribute(bulk.JOB) is bulk.run_job


def test_moved_modules_log_under_their_old_names():
    assert sender.log is logging.getLogger("reviews.alerts")
    assert bulk.log is logging.getLogger("reviews.bulk")
