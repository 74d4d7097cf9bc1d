"""The review-queue table joins the ledger app (it was `reviews.ReviewItem`).

Only Django's picture of the models changes: the table `reviews_reviewitem`, its rows, indexes
and constraints stay as they are. `reviews.0004` drops the model from the reviews app's state
after this migration has added it here, and the content type (with its permissions) is renamed
so that groups keep what they were granted.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models

REASONS = [
    ("no_lookup", "No lookup possible"),
    ("attempts_exhausted", "Attempts exhausted"),
    ("reconciliation_inconclusive", "Reconciliation inconclusive"),
    ("unresolved_past_window", "Unresolved past the window"),
    ("possible_duplicate", "Possible duplicate"),
    ("provider_mismatch", "Provider record differs from the request"),
    ("not_found_unproven", "Not found, but the provider ignores keys"),
    ("compensation_failed", "Compensation failed"),
    ("compensation_unknown", "Compensation outcome unknown"),
    ("manual_execution", "To be carried out by hand"),
]


def move_content_type(apps, schema_editor, old="reviews", new="ledger"):
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label=new, model="reviewitem").exists():
        ContentType.objects.filter(app_label=old, model="reviewitem").update(app_label=new)


def restore_content_type(apps, schema_editor):
    move_content_type(apps, schema_editor, old="ledger", new="reviews")


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0004_audit_chain_exports_decisions"),
        ("reviews", "0003_review_resolution"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ReviewItem",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("reason", models.CharField(choices=REASONS, max_length=64)),
                        (
                            "opened_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("due_at", models.DateTimeField()),
                        ("resolved_at", models.DateTimeField(blank=True, null=True)),
                        ("resolution", models.CharField(blank=True, max_length=2000)),
                        (
                            "assignee",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "effect",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="reviews",
                                to="ledger.effect",
                            ),
                        ),
                        (
                            "decision",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to="ledger.effect",
                            ),
                        ),
                        (
                            "resolved_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "reviews_reviewitem",
                        "indexes": [
                            models.Index(
                                condition=models.Q(("resolved_at__isnull", True)),
                                fields=["opened_at"],
                                name="review_open_idx",
                            ),
                            models.Index(
                                condition=models.Q(("resolved_at__isnull", True)),
                                fields=["due_at"],
                                name="review_open_due_idx",
                            ),
                            models.Index(
                                condition=models.Q(("resolved_at__isnull", True)),
                                fields=["assignee", "opened_at"],
                                name="review_open_assignee_idx",
                            ),
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                condition=models.Q(("resolved_at__isnull", True)),
                                fields=("effect",),
                                name="review_one_open_uniq",
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_type, restore_content_type),
    ]
