"""Who gets what from every URL: a role × page matrix walked from `config/urls.py`.

Every URL pattern, admin and API included, needs a row in EXPECTED (a new view cannot ship
without saying who may use it), and each row is requested as each role with GET and POST.
Statuses are listed per role in the order of ROLES. Pages for someone signed in must also never
be stored (`Cache-Control: no-store`). The team dimension (each row naming an effect, item or
incident, as each role, same team and other team) is in `tests/test_teams_matrix.py`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import django_rq
import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rq import Queue

from ledger.models import (
    AllTeamsGrant,
    ApiKey,
    EffectDependency,
    EffectEvent,
    Incident,
    IncidentKind,
    Reason,
    ReviewItem,
    Run,
    StatementImport,
    StatementLine,
    Team,
    Tool,
)
from ledger.policy.roles import ADMIN, grant
from ledger.rules.reviewqueue import open_review
from reviews.models import Identity
from reviews.sso.people import person_of
from tests.helpers import PASSWORD

ROLES = ("anonymous", "no role", "auditor", "operator", "admin")
Statuses = tuple[int, int, int, int, int]

# Statuses per role, in the order of ROLES.
PUBLIC: Statuses = (200, 200, 200, 200, 200)
READERS: Statuses = (302, 403, 200, 200, 200)  # sign in first; any role reads
STAFF: Statuses = (302, 302, 302, 302, 200)  # the admin sends everyone else to its login
STAFF_REFUSED: Statuses = (302, 302, 302, 302, 403)
STAFF_NOT_FOUND: Statuses = (302, 302, 302, 302, 404)
STAFF_WRONG_METHOD: Statuses = (302, 302, 302, 302, 405)
STAFF_CRASH: Statuses = (302, 302, 302, 302, 500)
REDIRECTED: Statuses = (302, 302, 302, 302, 302)
KEY_NEEDED: Statuses = (401, 401, 401, 401, 401)  # a session is no agent key
WRONG_METHOD: Statuses = (405, 405, 405, 405, 405)
NOT_FOUND: Statuses = (404, 404, 404, 404, 404)

# route: (GET, POST). POSTs carry an empty form, so nothing is decided, saved or deleted.
EXPECTED: dict[str, tuple[Statuses, Statuses]] = {
    "login/": ((200, 302, 302, 302, 302), (200, 302, 302, 302, 302)),
    "logout/": (WRONG_METHOD, REDIRECTED),
    # Single sign-on's round trip: not found while it is not configured (as here).
    "oidc/authenticate/": (NOT_FOUND, WRONG_METHOD),
    "oidc/callback/": (NOT_FOUND, WRONG_METHOD),
    # People and their bindings to the identity provider; bindings are made by signing in only
    # and never deleted here (ended by the recorded unbind action, with a reason).
    "admin/reviews/person/": (STAFF, STAFF),
    "admin/reviews/person/add/": (STAFF, STAFF),
    "admin/reviews/person/<path:object_id>/history/": (STAFF, STAFF),
    "admin/reviews/person/<path:object_id>/delete/": (STAFF, STAFF),
    "admin/reviews/person/<path:object_id>/change/": (STAFF, STAFF),
    "admin/reviews/person/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/reviews/identity/": (STAFF, STAFF),
    "admin/reviews/identity/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/reviews/identity/<path:object_id>/history/": (STAFF, STAFF),
    "admin/reviews/identity/<path:object_id>/delete/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/reviews/identity/<path:object_id>/change/": (STAFF, REDIRECTED),
    "admin/reviews/identity/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/": (STAFF, STAFF),
    "admin/login/": ((200, 200, 200, 200, 302), PUBLIC),
    "admin/logout/": (STAFF_WRONG_METHOD, REDIRECTED),
    "admin/password_change/": (STAFF, STAFF),
    "admin/password_change/done/": (STAFF, STAFF_WRONG_METHOD),
    "admin/autocomplete/": (STAFF_REFUSED, STAFF_WRONG_METHOD),
    "admin/jsi18n/": (STAFF, STAFF_WRONG_METHOD),
    "admin/r/<path:content_type_id>/<path:object_id>/": (STAFF_NOT_FOUND, STAFF_NOT_FOUND),
    "admin/auth/group/": (STAFF, STAFF),
    "admin/auth/group/add/": (STAFF, STAFF),
    "admin/auth/group/<path:object_id>/history/": (STAFF, STAFF),
    "admin/auth/group/<path:object_id>/delete/": (STAFF, STAFF),
    "admin/auth/group/<path:object_id>/change/": (STAFF, STAFF),
    "admin/auth/group/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/auth/user/<id>/password/": (STAFF, STAFF),
    "admin/auth/user/": (STAFF, STAFF),
    "admin/auth/user/add/": (STAFF, STAFF),
    "admin/auth/user/<path:object_id>/history/": (STAFF, STAFF),
    "admin/auth/user/<path:object_id>/delete/": (STAFF, STAFF),
    "admin/auth/user/<path:object_id>/change/": (STAFF, STAFF),
    "admin/auth/user/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/django_rq/dashboard/^stats.json/?$": (
        (401, 401, 401, 401, 200),
        (401, 401, 401, 401, 200),
    ),
    "admin/django_rq/dashboard/^stats.json/(?P<token>[\\w]+)?/?$": (REDIRECTED, REDIRECTED),
    # django_rq's queue metrics, there because prometheus_client is installed: staff only.
    "admin/django_rq/dashboard/^metrics/?$": (
        (401, 401, 401, 401, 200),
        (401, 401, 401, 401, 200),
    ),
    "admin/django_rq/dashboard/": (STAFF, STAFF),
    "admin/django_rq/dashboard/queues/<int:queue_index>/": (STAFF, STAFF),
    "admin/django_rq/dashboard/queues/<int:queue_index>/details/": (STAFF, STAFF),
    "admin/django_rq/dashboard/queues/<int:queue_index>/finished/": (STAFF, STAFF),
    "admin/django_rq/dashboard/queues/<int:queue_index>/failed/": (STAFF, STAFF),
    "admin/django_rq/dashboard/queues/<int:queue_index>/failed/clear/": (STAFF, REDIRECTED),
    "admin/django_rq/dashboard/queues/<int:queue_index>/scheduled/": (STAFF, STAFF),
    "admin/django_rq/dashboard/queues/<int:queue_index>/started/": (STAFF, STAFF),
    "admin/django_rq/dashboard/queues/<int:queue_index>/deferred/": (STAFF, STAFF),
    "admin/django_rq/dashboard/queues/<int:queue_index>/empty/": (STAFF, REDIRECTED),
    "admin/django_rq/dashboard/queues/<int:queue_index>/requeue-all/": (STAFF, REDIRECTED),
    "admin/django_rq/dashboard/queues/<int:queue_index>/<str:job_id>/": (STAFF, STAFF),
    "admin/django_rq/dashboard/queues/<int:queue_index>/<str:job_id>/results/<str:result_id>/": (
        STAFF_NOT_FOUND,
        STAFF_NOT_FOUND,
    ),
    "admin/django_rq/dashboard/queues/<int:queue_index>/<str:job_id>/delete/": (STAFF, REDIRECTED),
    # django_rq crashes on a job that has not failed, a worker or scheduler that does not
    # exist, and its placeholder model (no table): staff-only pages of a third party.
    "admin/django_rq/dashboard/queues/<int:queue_index>/<str:job_id>/requeue/": (
        STAFF,
        STAFF_CRASH,
    ),
    "admin/django_rq/dashboard/queues/<int:queue_index>/<str:job_id>/enqueue/": (STAFF, REDIRECTED),
    "admin/django_rq/dashboard/queues/<int:queue_index>/<str:job_id>/stop/": (
        STAFF_WRONG_METHOD,
        REDIRECTED,
    ),
    "admin/django_rq/dashboard/queues/confirm-action/<int:queue_index>/": (REDIRECTED, REDIRECTED),
    "admin/django_rq/dashboard/queues/actions/<int:queue_index>/": (REDIRECTED, REDIRECTED),
    "admin/django_rq/dashboard/workers/<int:queue_index>/": (STAFF, STAFF),
    "admin/django_rq/dashboard/workers/<int:queue_index>/<str:key>/": (STAFF_CRASH, STAFF_CRASH),
    "admin/django_rq/dashboard/schedulers/<int:scheduler_index>/": (STAFF_CRASH, STAFF_CRASH),
    "admin/django_rq/dashboard/cron-schedulers/<int:connection_index>/<str:scheduler_name>/": (
        STAFF_NOT_FOUND,
        STAFF_NOT_FOUND,
    ),
    "admin/django_rq/dashboard/cron-schedulers/<int:connection_index>/<str:scheduler_name>/jobs/"
    "<path:cron_job_name>/": (
        STAFF_NOT_FOUND,
        STAFF_NOT_FOUND,
    ),
    "admin/django_rq/dashboard/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/django_rq/dashboard/<path:object_id>/history/": (STAFF_CRASH, STAFF_CRASH),
    "admin/django_rq/dashboard/<path:object_id>/delete/": (STAFF_CRASH, STAFF_CRASH),
    "admin/django_rq/dashboard/<path:object_id>/change/": (STAFF_CRASH, STAFF_CRASH),
    "admin/django_rq/dashboard/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/django_q/schedule/": (STAFF, STAFF),
    "admin/django_q/schedule/add/": (STAFF, STAFF),
    "admin/django_q/schedule/<path:object_id>/history/": (REDIRECTED, REDIRECTED),
    "admin/django_q/schedule/<path:object_id>/delete/": (REDIRECTED, REDIRECTED),
    "admin/django_q/schedule/<path:object_id>/change/": (REDIRECTED, REDIRECTED),
    "admin/django_q/schedule/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/django_q/success/": (STAFF, STAFF),
    "admin/django_q/success/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/django_q/success/<path:object_id>/history/": (REDIRECTED, REDIRECTED),
    "admin/django_q/success/<path:object_id>/delete/": (REDIRECTED, REDIRECTED),
    "admin/django_q/success/<path:object_id>/change/": (REDIRECTED, REDIRECTED),
    "admin/django_q/success/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/django_q/failure/": (STAFF, STAFF),
    "admin/django_q/failure/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/django_q/failure/<path:object_id>/history/": (REDIRECTED, REDIRECTED),
    "admin/django_q/failure/<path:object_id>/delete/": (REDIRECTED, REDIRECTED),
    "admin/django_q/failure/<path:object_id>/change/": (REDIRECTED, REDIRECTED),
    "admin/django_q/failure/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/django_q/ormq/": (STAFF, STAFF),
    "admin/django_q/ormq/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/django_q/ormq/<path:object_id>/history/": (REDIRECTED, REDIRECTED),
    "admin/django_q/ormq/<path:object_id>/delete/": (REDIRECTED, REDIRECTED),
    "admin/django_q/ormq/<path:object_id>/change/": (REDIRECTED, REDIRECTED),
    "admin/django_q/ormq/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/axes/accessattempt/": (STAFF, STAFF),
    "admin/axes/accessattempt/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/axes/accessattempt/<path:object_id>/history/": (REDIRECTED, REDIRECTED),
    "admin/axes/accessattempt/<path:object_id>/delete/": (REDIRECTED, REDIRECTED),
    "admin/axes/accessattempt/<path:object_id>/change/": (REDIRECTED, REDIRECTED),
    "admin/axes/accessattempt/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/axes/accesslog/": (STAFF, STAFF),
    "admin/axes/accesslog/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/axes/accesslog/<path:object_id>/history/": (REDIRECTED, REDIRECTED),
    "admin/axes/accesslog/<path:object_id>/delete/": (REDIRECTED, REDIRECTED),
    "admin/axes/accesslog/<path:object_id>/change/": (REDIRECTED, REDIRECTED),
    "admin/axes/accesslog/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/axes/accessfailurelog/": (STAFF, STAFF),
    "admin/axes/accessfailurelog/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/axes/accessfailurelog/<path:object_id>/history/": (REDIRECTED, REDIRECTED),
    "admin/axes/accessfailurelog/<path:object_id>/delete/": (REDIRECTED, REDIRECTED),
    "admin/axes/accessfailurelog/<path:object_id>/change/": (REDIRECTED, REDIRECTED),
    "admin/axes/accessfailurelog/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/agent/": (STAFF, STAFF),
    "admin/ledger/agent/add/": (STAFF, STAFF),
    "admin/ledger/agent/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/agent/<path:object_id>/delete/": (STAFF, STAFF),
    "admin/ledger/agent/<path:object_id>/change/": (STAFF, STAFF),
    "admin/ledger/agent/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/apikey/": (STAFF, STAFF),
    "admin/ledger/apikey/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/apikey/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/apikey/<path:object_id>/delete/": (STAFF, STAFF),
    "admin/ledger/apikey/<path:object_id>/change/": (STAFF, REDIRECTED),
    "admin/ledger/apikey/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/tool/": (STAFF, STAFF),
    "admin/ledger/tool/add/": (STAFF, STAFF),
    "admin/ledger/tool/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/tool/<path:object_id>/delete/": (STAFF, STAFF),
    "admin/ledger/tool/<path:object_id>/change/": (STAFF, STAFF),
    "admin/ledger/tool/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/team/": (STAFF, STAFF),
    "admin/ledger/team/add/": (STAFF, STAFF),
    "admin/ledger/team/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/team/<path:object_id>/delete/": (STAFF, STAFF),
    "admin/ledger/team/<path:object_id>/change/": (STAFF, STAFF),
    "admin/ledger/team/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/allteamsgrant/": (STAFF, STAFF),
    "admin/ledger/allteamsgrant/add/": (STAFF, STAFF),
    "admin/ledger/allteamsgrant/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/allteamsgrant/<path:object_id>/delete/": (STAFF, STAFF),
    "admin/ledger/allteamsgrant/<path:object_id>/change/": (STAFF, STAFF),
    "admin/ledger/allteamsgrant/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/effect/": (STAFF, STAFF),
    "admin/ledger/effect/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/effect/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/effect/<path:object_id>/delete/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/effect/<path:object_id>/change/": (STAFF, STAFF_REFUSED),
    "admin/ledger/effect/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/effectevent/": (STAFF, STAFF),
    "admin/ledger/effectevent/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/effectevent/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/effectevent/<path:object_id>/delete/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/effectevent/<path:object_id>/change/": (STAFF, STAFF_REFUSED),
    "admin/ledger/effectevent/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/effectdependency/": (STAFF, STAFF),
    "admin/ledger/effectdependency/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/effectdependency/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/effectdependency/<path:object_id>/delete/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/effectdependency/<path:object_id>/change/": (STAFF, STAFF_REFUSED),
    "admin/ledger/effectdependency/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/run/": (STAFF, STAFF),
    "admin/ledger/run/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/run/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/run/<path:object_id>/delete/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/run/<path:object_id>/change/": (STAFF, STAFF_REFUSED),
    "admin/ledger/run/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/reviewitem/": (STAFF, STAFF),
    "admin/ledger/reviewitem/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/reviewitem/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/reviewitem/<path:object_id>/delete/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/reviewitem/<path:object_id>/change/": (STAFF, REDIRECTED),
    "admin/ledger/reviewitem/<path:object_id>/": (REDIRECTED, REDIRECTED),
    # Provider statements: read-only in the admin (ledger.admin).
    "admin/ledger/statementimport/": (STAFF, STAFF),
    "admin/ledger/statementimport/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/statementimport/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/statementimport/<path:object_id>/delete/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/statementimport/<path:object_id>/change/": (STAFF, STAFF_REFUSED),
    "admin/ledger/statementimport/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/statementline/": (STAFF, STAFF),
    "admin/ledger/statementline/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/statementline/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/statementline/<path:object_id>/delete/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/statementline/<path:object_id>/change/": (STAFF, STAFF_REFUSED),
    "admin/ledger/statementline/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/ledger/incident/": (STAFF, STAFF),
    "admin/ledger/incident/add/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/incident/<path:object_id>/history/": (STAFF, STAFF),
    "admin/ledger/incident/<path:object_id>/delete/": (STAFF_REFUSED, STAFF_REFUSED),
    "admin/ledger/incident/<path:object_id>/change/": (STAFF, STAFF_REFUSED),
    "admin/ledger/incident/<path:object_id>/": (REDIRECTED, REDIRECTED),
    "admin/^(?P<app_label>auth|django_rq|django_q|axes|ledger|reviews)/$": (STAFF, STAFF),
    "admin/(?P<url>.*)$": (STAFF_NOT_FOUND, STAFF_NOT_FOUND),
    "api/v1/openapi.json": (PUBLIC, PUBLIC),
    "api/v1/docs": (PUBLIC, PUBLIC),
    "api/v1/effects": (KEY_NEEDED, KEY_NEEDED),
    "api/v1/effects/<effect_id>/claim": (WRONG_METHOD, KEY_NEEDED),
    "api/v1/effects/<effect_id>/heartbeat": (WRONG_METHOD, KEY_NEEDED),
    "api/v1/effects/<effect_id>/end-lease": (WRONG_METHOD, KEY_NEEDED),
    "api/v1/effects/<effect_id>/outcome": (WRONG_METHOD, KEY_NEEDED),
    "api/v1/effects/<effect_id>/cancel": (WRONG_METHOD, KEY_NEEDED),
    "api/v1/effects/<effect_id>": (KEY_NEEDED, WRONG_METHOD),
    "api/v1/runs/<run_id>/journal": (KEY_NEEDED, WRONG_METHOD),
    "api/v1/effects/<effect_id>/compensate": (WRONG_METHOD, KEY_NEEDED),
    "api/v1/recovery": (WRONG_METHOD, KEY_NEEDED),
    # Signed by the provider, not by a key: a body not sent as JSON is refused as such (415).
    "api/v1/webhooks/<provider>": (WRONG_METHOD, (415, 415, 415, 415, 415)),
    # A provider's own scheme: no tool names sandbox-pay's adapter as one with callbacks.
    "api/v1/callbacks/<provider>": (WRONG_METHOD, NOT_FOUND),
    "api/v1/health": (PUBLIC, WRONG_METHOD),
    # The operator API opens with an operator's token only: a session is none (401).
    "api/v1/operator/queue": (KEY_NEEDED, WRONG_METHOD),
    "api/v1/operator/effects/<effect_id>": (KEY_NEEDED, WRONG_METHOD),
    "api/v1/operator/effects/<effect_id>/decisions": (WRONG_METHOD, KEY_NEEDED),
    # ninja's placeholder at the API's root: nothing is there.
    "api/v1/": (NOT_FOUND, NOT_FOUND),
    "": (READERS, WRONG_METHOD),
    "queue/": (READERS, WRONG_METHOD),
    "queue/<int:item_id>/hold": (WRONG_METHOD, (302, 403, 403, 302, 302)),
    # The hold's address before it had its own word, answered for one release.
    "queue/<int:item_id>/claim": (WRONG_METHOD, (302, 403, 403, 302, 302)),
    "queue/<int:item_id>/assign": (WRONG_METHOD, (302, 403, 403, 400, 400)),
    "queue/bulk": (WRONG_METHOD, (302, 403, 403, 400, 400)),
    # A bulk job is shown only to whoever started it, whatever their role is now.
    "queue/bulk/<int:bulk_id>": ((302, 403, 404, 404, 404), WRONG_METHOD),
    # Saved filters are an operator's: auditors read the queue, they keep nothing in it.
    "queue/filters": (WRONG_METHOD, (302, 403, 403, 400, 400)),
    "queue/filters/<int:filter_id>/delete": (WRONG_METHOD, (302, 403, 403, 404, 404)),
    "queue/<int:item_id>/notes": (WRONG_METHOD, (302, 403, 403, 422, 422)),
    "queue/<int:item_id>/release": (WRONG_METHOD, (302, 403, 403, 409, 409)),
    "effects/<uuid:effect_id>/": (READERS, WRONG_METHOD),
    # Without the state it compares against, a live check is a bad request.
    "effects/<uuid:effect_id>/live": ((302, 403, 400, 400, 400), WRONG_METHOD),
    "runs/": (READERS, WRONG_METHOD),
    "limits/": (READERS, WRONG_METHOD),
    "approvals/": (READERS, WRONG_METHOD),
    "effects/<uuid:effect_id>/decide/<str:action>": (WRONG_METHOD, (302, 403, 403, 422, 422)),
    "audit/exports/": (READERS, WRONG_METHOD),
    "audit/exports/<str:dataset>.<str:fmt>": (READERS, WRONG_METHOD),
    "audit/chain/": (READERS, WRONG_METHOD),
    "halts/": (READERS, WRONG_METHOD),
    # An empty form: no reason, no confirmation.
    "halts/add": (WRONG_METHOD, (302, 403, 403, 422, 422)),
    "halts/<int:halt_id>/resume": (WRONG_METHOD, (302, 403, 403, 422, 422)),
    # Deciding from Slack and email (reviews.remote): Slack's door is signed by Slack, never a
    # session's, and absent while no signing secret is configured (as here); a link names
    # nothing without its signature, behind the sign-in.
    "slack/interactions": (WRONG_METHOD, NOT_FOUND),
    "slack/link/<str:token>": ((302, 404, 404, 404, 404), (302, 404, 404, 404, 404)),
    "links/<str:token>": ((302, 404, 404, 404, 404), WRONG_METHOD),
    # A person's own operator tokens: operators and admins; an empty form makes none.
    "tokens/": ((302, 403, 403, 200, 200), (302, 403, 403, 422, 422)),
    # Another person's token, or none: 404 alike.
    "tokens/<int:token_id>/revoke": (WRONG_METHOD, (302, 403, 403, 404, 404)),
    "statements/": (READERS, WRONG_METHOD),
    # An empty form: no tool, no file, no period.
    "statements/upload": (WRONG_METHOD, (302, 403, 403, 422, 422)),
    "incidents/": (READERS, WRONG_METHOD),
    # An empty form: no note.
    "incidents/<int:incident_id>/acknowledge": (WRONG_METHOD, (302, 403, 403, 422, 422)),
    # Prometheus, with LEDGER_METRICS_TOKEN as a bearer token (set below): a session is none.
    "metrics": (KEY_NEEDED, WRONG_METHOD),
    # The browser's own request: sent on to the static SVG, whoever asks.
    "favicon.ico": (REDIRECTED, WRONG_METHOD),
}


@pytest.fixture(autouse=True)
def _metrics_token(settings) -> None:
    """Configured, so that /metrics exists (without a token it answers 404 to everyone)."""
    settings.LEDGER_METRICS_TOKEN = "metrics-token-of-the-matrix"


def routes() -> list[str]:
    """Every URL pattern of config/urls.py, as its full route (resolvers' prefixes joined)."""

    def walk(patterns: list[Any], prefix: str) -> Iterator[str]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield prefix + str(pattern.pattern)

    return list(dict.fromkeys(walk(get_resolver().url_patterns, "")))


Sample = str | Callable[[], str]


def sample_url(route: str, samples: dict[str, Sample]) -> str:
    """A URL that the route matches: each parameter (route `<conv:name>` or regex `(?P<name>…)`)
    replaced by its sample, regex anchors and optional slashes dropped. An admin object page
    gets a real row of its model where the samples name one."""
    admin_object = re.match(r"admin/(\w+)/(\w+)/<path:object_id>/", route)
    if admin_object:
        samples = {**samples, "object_id": samples.get(".".join(admin_object.groups()), "0")}

    def value(name: str) -> str:
        sample = samples[name]
        return sample if isinstance(sample, str) else sample()

    url = re.sub(r"\(\?P<(\w+)>[^)]*\)\??", lambda m: value(m[1]), route)
    url = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: value(m[1]), url)
    return "/" + url.replace("^", "").replace("$", "").replace("/?", "/")


@pytest.fixture
def ada(db) -> User:
    """An admin: every role, staff and superuser."""
    user = User.objects.create_user("ada", password=PASSWORD)
    grant(user, ADMIN)
    return user


@pytest.fixture
def rq_jobs() -> Iterator[Callable[[], str]]:
    """A fresh job in the rq dashboard's queue for each request that names one (django_rq's
    job pages fail on a missing job, and one request may delete the job it names)."""
    # rq's own queue: django_rq's would hold the job back until the test's transaction commits.
    queue = Queue("default", connection=django_rq.get_connection("default"))
    made: list[str] = []

    def make() -> str:
        # Nothing runs it: the queue is this test's Redis database, with no worker.
        made.append(queue.enqueue("builtins.len", "").id)
        return made[-1]

    yield make
    for job_id in made:
        queue.connection.delete(f"rq:job:{job_id}")
        queue.remove(job_id)


@pytest.fixture
def samples(alice, make_effect, olga, audrey, nemo, ada, rq_jobs) -> dict[str, Sample]:
    """Real rows for the parameters, so that a permitted request reaches the view's own answer."""
    effect = alice.intent(run_id="run-1")
    upstream = make_effect("confirmed")
    EffectDependency.objects.create(downstream=make_effect("planned"), upstream=upstream)
    open_review(effect["id"], Reason.NO_LOOKUP)
    item = ReviewItem.objects.get(effect_id=effect["id"])
    incident = _incident()
    return {
        "incident_id": str(incident.pk),
        "effect_id": effect["id"],
        "item_id": str(item.id),
        "halt_id": "1",
        "bulk_id": "0",
        "filter_id": "0",
        "token_id": "0",
        "action": "confirm",
        "dataset": "effects",
        "fmt": "csv",
        "run_id": "run-1",
        "provider": "sandbox-pay",
        "app_label": "ledger",
        "url": "nowhere/",
        "content_type_id": "0",
        "object_id": "0",
        "id": str(nemo.id),
        "queue_index": "0",
        "scheduler_index": "0",
        "connection_index": "0",
        "job_id": rq_jobs,
        "result_id": "no-such-result",
        "key": "no-such-worker",
        "token": "no-such-token",
        "scheduler_name": "no-such-scheduler",
        "cron_job_name": "no-such-job",
        # Admin change, delete and history pages open a real row of their model.
        "ledger.effect": effect["id"],
        "ledger.reviewitem": str(item.id),
        "ledger.agent": str(alice.agent.id),
        "ledger.apikey": str(ApiKey.objects.get(agent=alice.agent).id),
        "ledger.tool": str(Tool.objects.get(name="charge_card").id),
        "ledger.effectevent": str(EffectEvent.objects.filter(effect_id=effect["id"]).first().id),
        "ledger.effectdependency": str(EffectDependency.objects.get().id),
        "ledger.run": str(Run.objects.first().pk),
        "ledger.statementimport": str(incident.line.statement_id),
        "ledger.statementline": str(incident.line_id),
        "ledger.incident": str(incident.pk),
        # Made only when a route asks: the rest of the matrix runs with no team at all.
        "ledger.team": lambda: str(Team.objects.get_or_create(name="sample", slug="sample")[0].pk),
        "ledger.allteamsgrant": lambda: str(AllTeamsGrant.objects.get_or_create(user=nemo)[0].pk),
        "reviews.person": lambda: str(person_of(nemo).pk),
        "reviews.identity": lambda: str(
            Identity.objects.get_or_create(
                issuer="https://idp.example.com",
                subject="matrix",
                defaults={"user": User.objects.create_user("matrix-sso")},
            )[0].pk
        ),
        "auth.user": str(nemo.id),
        "auth.group": str(olga.groups.get().id),
    }


def _incident() -> Incident:
    """An open incident on a statement line no effect intended, written directly."""
    now = timezone.now()
    made = StatementImport.objects.create(
        tool="charge_card",
        filename="provider.csv",
        sha256="0" * 64,
        period_start=now - timedelta(days=2),
        period_end=now - timedelta(days=1),
        origin="command",
        imported_by="shell:matrix",
    )
    line = StatementLine.objects.create(
        statement=made,
        line_no=2,
        provider_ref="ch_orphan",
        type="charge",
        status="succeeded",
        amount_minor=2500,
        currency="EUR",
        occurred_at=now - timedelta(days=2),
    )
    return Incident.objects.create(
        kind=IncidentKind.ORPHAN, tool="charge_card", line=line, due_at=now + timedelta(days=1)
    )


People = dict[str, tuple[Client, User | None]]


def clients(nemo: User, audrey: User, olga: User, ada: User) -> People:
    people = {"anonymous": None, "no role": nemo, "auditor": audrey, "operator": olga, "admin": ada}
    # A view's crash is a status like any other here (a few third-party admin pages have them).
    return {role: (Client(raise_request_exception=False), p) for role, p in people.items()}


def observe(route: str, samples: dict[str, Sample], people: People) -> dict[str, Statuses]:
    url = sample_url(route, samples)
    seen: dict[str, list[int]] = {"GET": [], "POST": []}
    for method in seen:
        for role in ROLES:
            client, person = people[role]
            if person is not None and "_auth_user_id" not in client.session:
                client.force_login(person)  # again: an earlier sign-out ended it
            # A crashed view may leave a failed statement behind: roll back to before it.
            savepoint = transaction.savepoint()
            response = client.get(url) if method == "GET" else client.post(url, {})
            if response.status_code == 500:
                transaction.savepoint_rollback(savepoint)
            else:
                transaction.savepoint_commit(savepoint)
            seen[method].append(response.status_code)
            # Pages only: agent API answers are refused before a session is even read.
            signed_in = person is not None and "_auth_user_id" in client.session
            if signed_in and not route.startswith("api/"):
                cache = response.get("Cache-Control", "")
                assert "no-store" in cache, f"{method} {url} as {role}: {cache!r}"
    return {method: tuple(statuses) for method, statuses in seen.items()}  # type: ignore[misc]


def test_every_url_pattern_has_a_row_in_the_matrix(db):
    patterns = routes()
    missing = [route for route in patterns if route not in EXPECTED]
    assert missing == [], "URL patterns with no row in EXPECTED (who may use them?)"
    assert [route for route in EXPECTED if route not in patterns] == [], "rows for no pattern"


@pytest.mark.parametrize("route", list(EXPECTED))
def test_each_role_gets_what_the_matrix_says(route, samples, nemo, audrey, olga, ada):
    got = observe(route, samples, clients(nemo, audrey, olga, ada))
    get, post = EXPECTED[route]
    assert got == {"GET": get, "POST": post}
