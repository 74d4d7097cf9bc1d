"""The reviews app's modules moved into subpackages and kept their logger names, on which log
pipelines filter. (Schedules and queued jobs name tasks, not modules: tests/test_tasks.py.)"""

from __future__ import annotations

import logging

from reviews.alerts import sender
from reviews.queue import bulk


def test_moved_modules_log_under_their_old_names():
    assert sender.log is logging.getLogger("reviews.alerts")
    assert bulk.log is logging.getLogger("reviews.bulk")
