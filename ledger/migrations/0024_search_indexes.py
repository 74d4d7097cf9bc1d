"""Indexes for the review queue's exact-match search (reviews.queue.search_effects): an
effect's provider reference, target and run. The id and the idempotency key were indexed
already (the primary key, effect_idem_key_idx).

Written to run while the ledger serves traffic, like 0015: `atomic = False`, and each index is
built with CREATE INDEX CONCURRENTLY (SHARE UPDATE EXCLUSIVE on the effects table), so agents
keep writing effects while it builds. A build that fails part-way leaves an INVALID index:
drop it with `DROP INDEX CONCURRENTLY <name>` before running the migration again.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models
from django.db.models import Q


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0023_review_claims"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="effect",
            index=models.Index(
                fields=["provider_ref"],
                name="effect_provider_ref_idx",
                condition=~Q(provider_ref=""),
            ),
        ),
        AddIndexConcurrently(
            model_name="effect",
            index=models.Index(fields=["target"], name="effect_target_idx"),
        ),
        AddIndexConcurrently(
            model_name="effect",
            index=models.Index(fields=["run_id"], name="effect_run_idx"),
        ),
    ]
