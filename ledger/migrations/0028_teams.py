"""Teams (ADR 0014): `Team` with its alert channels, people's memberships (with their
source: the identity provider's claim or an admin), the "all teams" grant, and a nullable
`team` on agents and tools. Changes to the teams table move the configuration version, by
which every process knows whether any team exists without asking on each request.

Adding a nullable column with no default to the agents and tools tables changes the catalogue
only; it takes their ACCESS EXCLUSIVE lock for an instant, which every effect insert (its
foreign key to the agent) would queue behind. A short `lock_timeout` makes it fail fast behind
a long transaction, to be run again, as 0017's statements do. The effects and events tables are
not touched.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
import pgtrigger.compiler
import pgtrigger.migrations
from django.conf import settings
from django.db import migrations, models

LOCK_TIMEOUT = "SET LOCAL lock_timeout = '3s'"


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0027_key_fields"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunSQL(LOCK_TIMEOUT, migrations.RunSQL.noop),
        migrations.CreateModel(
            name="Team",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100, unique=True)),
                ("slug", models.SlugField(max_length=100, unique=True)),
                (
                    "alert_webhook_url",
                    models.URLField(blank=True, db_default="", default="", max_length=500),
                ),
                (
                    "alert_slack_url",
                    models.URLField(blank=True, db_default="", default="", max_length=500),
                ),
                (
                    "alert_email",
                    models.EmailField(blank=True, db_default="", default="", max_length=254),
                ),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
            ],
            options={
                "ordering": ["name"],
            },
        ),
        pgtrigger.migrations.AddTrigger(
            model_name="team",
            trigger=pgtrigger.compiler.Trigger(
                name="team_bumps_config",
                sql=pgtrigger.compiler.UpsertTriggerSql(
                    func="INSERT INTO ledger_configversion (id, version, changed_at) VALUES (1, nextval('ledger_configversion_seq'), now()) ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, changed_at = EXCLUDED.changed_at; RETURN NULL;",
                    hash="a4ccb526be46fac4137910ef834d779bd8d0d572",
                    level="STATEMENT",
                    operation="INSERT OR UPDATE OR DELETE OR TRUNCATE",
                    pgid="pgtrigger_team_bumps_config_b834b",
                    table="ledger_team",
                    when="AFTER",
                ),
            ),
        ),
        migrations.CreateModel(
            name="AllTeamsGrant",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "granted_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="all_teams_grant",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="agent",
            name="team",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="agents",
                to="ledger.team",
            ),
        ),
        migrations.AddField(
            model_name="tool",
            name="team",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="tools",
                to="ledger.team",
            ),
        ),
        migrations.CreateModel(
            name="TeamMembership",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("claim", "identity provider claim"),
                            ("admin", "set by an admin"),
                        ],
                        default="admin",
                        max_length=5,
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to="ledger.team",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="team_memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="team",
            name="members",
            field=models.ManyToManyField(
                blank=True,
                related_name="ledger_teams",
                through="ledger.TeamMembership",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddConstraint(
            model_name="teammembership",
            constraint=models.UniqueConstraint(
                fields=("user", "team", "source"), name="teammembership_once_per_source"
            ),
        ),
    ]
