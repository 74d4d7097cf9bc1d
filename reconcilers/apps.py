from django.apps import AppConfig, apps
from django.core import checks
from django.db.models.signals import post_migrate


def _ensure_schedules(**kwargs: object) -> None:
    from reconcilers.schedules import ensure_schedules

    ensure_schedules()


class ReconcilersConfig(AppConfig):
    name = "reconcilers"
    verbose_name = "Reconcilers"

    def ready(self) -> None:
        # Schedules live in code; every migrate makes the database agree (idempotently). The
        # signal is sent per app with models: hang it on django_q, which owns the table.
        post_migrate.connect(_ensure_schedules, sender=apps.get_app_config("django_q"))
        # Schedules and rq jobs name tasks (config.tasks); a process that starts checks them.
        from reconcilers.schedules import tasks_are_registered

        checks.register(tasks_are_registered, "tasks")
        # The ledger announces effects that are due; this app turns that into rq jobs.
        from ledger.effects.wakeups import checks_due
        from reconcilers.jobqueue import on_checks_due

        checks_due.connect(on_checks_due, dispatch_uid="reconcilers.jobqueue.on_checks_due")
        # What loadtools cannot know without the adapters.
        from ledger.policy.toolfile import ADAPTER_CHECKS
        from reconcilers.providers import register_reports
        from reconcilers.providers.checks import check_tool

        if check_tool not in ADAPTER_CHECKS:
            ADAPTER_CHECKS.append(check_tool)
        # The providers' own report formats, for statements a tool reads in one.
        register_reports()
