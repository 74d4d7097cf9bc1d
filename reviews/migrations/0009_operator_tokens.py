import django.contrib.postgres.fields
import django.db.models.deletion
import django.db.models.functions.datetime
import pgtrigger.compiler
import pgtrigger.migrations
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0036_tool_statement_format"),
        ("reviews", "0008_slack_identities_used_links"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="OperatorToken",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100)),
                ("prefix", models.CharField(max_length=12, unique=True)),
                ("digest", models.CharField(max_length=64)),
                (
                    "scopes",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(
                            choices=[("read", "read"), ("decide", "decide")], max_length=10
                        ),
                        size=None,
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("expires_at", models.DateTimeField()),
                ("last_used_at", models.DateTimeField(blank=True, null=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                ("teams", models.ManyToManyField(blank=True, related_name="+", to="ledger.team")),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="operator_tokens",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
        migrations.CreateModel(
            name="OperatorTokenUse",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("at", models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ("method", models.CharField(max_length=10)),
                ("path", models.CharField(max_length=300)),
                ("outcome", models.CharField(max_length=40)),
                (
                    "token",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="uses",
                        to="reviews.operatortoken",
                    ),
                ),
            ],
        ),
        migrations.AddConstraint(
            model_name="operatortoken",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("scopes__len__gt", 0), ("scopes__contained_by", ["read", "decide"])
                ),
                name="optoken_scopes_known",
            ),
        ),
        migrations.AddConstraint(
            model_name="operatortoken",
            constraint=models.CheckConstraint(
                condition=models.Q(("expires_at__gt", models.F("created_at"))),
                name="optoken_expires_after",
            ),
        ),
        migrations.AddIndex(
            model_name="operatortokenuse",
            index=models.Index(fields=["token", "id"], name="optokenuse_token_idx"),
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="operatortokenuse",
            trigger=pgtrigger.compiler.Trigger(
                name="optokenuse_append_only",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="RAISE EXCEPTION 'pgtrigger: Cannot update or delete rows from % table', TG_TABLE_NAME;",
                    hash="68708160af50a15246286df4509dc777052448c2",
                    operation="UPDATE OR DELETE",
                    pgid="pgtrigger_optokenuse_append_only_5ef59",
                    table="reviews_operatortokenuse",
                    when="BEFORE",
                ),
            ),
        ),
    ]
