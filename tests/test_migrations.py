"""Moving the review queue's model from `reviews` to `ledger` keeps the table and its rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from ledger.models import Effect, Reason, ReviewItem
from ledger.policy import digests
from ledger.rules.reviewqueue import open_review

BEFORE_THE_MOVE = [
    ("ledger", "0004_audit_chain_exports_decisions"),
    ("reviews", "0003_review_resolution"),
]


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


@pytest.mark.django_db(transaction=True)
def test_review_items_written_before_the_move_are_read_by_the_ledger_after_it():
    executor = migrate(BEFORE_THE_MOVE)
    old = executor.loader.project_state(BEFORE_THE_MOVE).apps
    OldItem = old.get_model("reviews", "ReviewItem")
    assert OldItem._meta.db_table == ReviewItem._meta.db_table
    agent = old.get_model("ledger", "Agent").objects.create(name="before-the-move")
    effect = old.get_model("ledger", "Effect").objects.create(
        agent=agent,
        effect_key="run:1",
        run_id="run",
        step_id="1",
        seq=1,
        tool="send_email",
        target="a@example.com",
        request={},
        request_hash=digests.request_hash("send_email", "a@example.com", {}),
        idempotency_key=digests.idempotency_key(agent.id, "run:1"),
        status="unknown",
        max_attempts=3,
    )
    item = OldItem.objects.create(
        effect=effect, reason="no_lookup", due_at=timezone.now() + timedelta(days=7)
    )
    type_before = ContentType.objects.get(app_label="reviews", model="reviewitem")

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    moved = ReviewItem.objects.get(pk=item.pk)
    assert (moved.effect_id, moved.reason, moved.resolved_at) == (effect.id, Reason.NO_LOOKUP, None)
    # The content type moved with the model, so permissions granted on it are kept.
    type_after = ContentType.objects.get_for_model(ReviewItem)
    assert (type_after.pk, type_after.app_label) == (type_before.pk, "ledger")
    assert Permission.objects.filter(content_type=type_after, codename="view_reviewitem").exists()
    assert not ContentType.objects.filter(app_label="reviews", model="reviewitem").exists()
    # The partial unique index still holds one open item per effect.
    assert open_review(Effect.objects.get(pk=effect.pk).id, Reason.STALE) is False
