"""Review items carry their effect's tool, agent, run and creation time, so that the queue
filters and sorts without the effects: copied by a trigger onto every new item, whichever
process inserts it, and filled in by migration 0016 for items that existed before it."""

from __future__ import annotations

import importlib
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from ledger.models import Effect, Reason, ReviewItem
from ledger.policy import digests
from ledger.rules.reviewqueue import open_review
from reviews.alerts.escalation import escalate

BEFORE_THE_COPIES = [("ledger", "0015_event_created_at_index")]
THE_COPIES = importlib.import_module("ledger.migrations.0016_review_item_copies")


def copies(item: ReviewItem) -> tuple[Any, ...]:
    return item.tool, item.agent_id, item.run_id, item.effect_created_at


def test_an_item_opened_for_an_effect_carries_its_tool_agent_and_run(make_effect):
    effect = make_effect("unknown", tool="send_email", run_id="run-7")
    assert open_review(effect.id, Reason.NO_LOOKUP)
    item = ReviewItem.objects.get(effect=effect)
    assert copies(item) == ("send_email", effect.agent_id, "run-7", effect.created_at)


def test_an_item_inserted_by_a_process_that_knows_no_copies_gets_them(make_effect):
    """As an old process would open one during a rolling deploy: a plain INSERT."""
    effect = make_effect("unknown", tool="send_email", run_id="run-9")
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {ReviewItem._meta.db_table} (effect_id, reason, opened_at, due_at, "
            "resolution) VALUES (%s, %s, now(), now() + interval '1 day', '')",
            [effect.id, Reason.NO_LOOKUP.value],
        )
    item = ReviewItem.objects.get(effect=effect)
    assert copies(item) == ("send_email", effect.agent_id, "run-9", effect.created_at)


def test_items_opened_by_the_escalation_sweep_carry_them_too(make_effect):
    effect = make_effect("unknown", tool="create_ticket", run_id="run-8")
    created = effect.created_at - timedelta(days=2)
    Effect.objects.filter(pk=effect.pk).update(created_at=created)
    assert escalate() == 1
    item = ReviewItem.objects.get(effect=effect)
    assert copies(item) == ("create_ticket", effect.agent_id, "run-8", created)


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_in_the_copies_of_existing_items_batch_by_batch(monkeypatch):
    monkeypatch.setattr(THE_COPIES, "BATCH", 2)
    executor = migrate(BEFORE_THE_COPIES)
    old = executor.loader.project_state(BEFORE_THE_COPIES).apps
    agent = old.get_model("ledger", "Agent").objects.create(name="before-the-copies")
    OldEffect, OldItem = old.get_model("ledger", "Effect"), old.get_model("ledger", "ReviewItem")
    items = []
    for n, tool in enumerate(["send_email", "charge_card", "create_ticket", "send_email", "x"]):
        key = f"run-{n}:1"
        effect = OldEffect.objects.create(
            agent=agent,
            effect_key=key,
            run_id=f"run-{n}",
            step_id="1",
            seq=1,
            tool=tool,
            target="t",
            request={},
            request_hash=digests.request_hash(tool, "t", {}),
            idempotency_key=digests.idempotency_key(agent.id, key),
            status="unknown",
            max_attempts=3,
        )
        items.append(
            OldItem.objects.create(
                effect=effect,
                reason="no_lookup",
                due_at=timezone.now() + timedelta(days=1),
                resolved_at=timezone.now() if n == 0 else None,
            )
        )

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    for n, old_item in enumerate(items):
        item = ReviewItem.objects.get(pk=old_item.pk)
        effect = item.effect
        assert copies(item) == (effect.tool, agent.id, f"run-{n}", effect.created_at)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'reviews_reviewitem' "
            "AND indexname LIKE 'review_open_%%'"
        )
        indexes = {name for (name,) in cursor.fetchall()}
    assert {f"review_open_{name}_idx" for name in ("tool", "agent", "run", "effect_age")} <= indexes
