import django.db.models.deletion
import django.db.models.functions.datetime
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0007_people"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="identity",
            name="email_verified",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.CreateModel(
            name="SlackIdentity",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("team_id", models.CharField(max_length=32)),
                ("slack_user", models.CharField(max_length=32)),
                ("linked_by", models.CharField(max_length=200)),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="slack_identities",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "Slack identities",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("team_id", "slack_user"), name="slackidentity_team_user_uniq"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="UsedLink",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("nonce", models.CharField(max_length=64, unique=True)),
                ("purpose", models.CharField(max_length=16)),
                (
                    "used_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "used_by",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
    ]
