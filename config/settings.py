"""Settings, all read from the environment.

`var/run.env` (written by `make run` for the embedded servers) fills in variables that the real
environment does not set, so `manage.py` commands work in a second shell.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from config.database import database_settings
from config.env import (
    env_bool,
    env_duration,
    env_int,
    env_keyring,
    env_list,
    env_str,
)
from config.envfile import read_env_file

BASE_DIR = Path(__file__).resolve().parent.parent


def _load_env_file(path: Path) -> None:
    """The file's values as defaults: the real environment wins."""
    for name, value in read_env_file(path).items():
        os.environ.setdefault(name, value)


_load_env_file(Path(os.environ.get("LEDGER_ENV_FILE", BASE_DIR / "var" / "run.env")))

SECRET_KEY = env_str("SECRET_KEY")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "pgtrigger",
    "django_rq",
    "django_q",
    "django_htmx",
    "template_partials",
    "django_filters",
    "axes",
    "csp",
    # Only so that ninja renders the API docs from templates/ninja/swagger.html (its local
    # Swagger UI) instead of its page that loads Swagger UI from a CDN.
    "ninja",
    "ledger",
    "reconcilers",
    "reviews",
]
# The development stack and its harnesses (`manage.py crashtest`, `faultdrill`, `sandbox`):
# there in a checkout, absent from the server's wheel, which then runs without them.
if importlib.util.find_spec("devstack") is not None:
    INSTALLED_APPS.append("devstack")

MIDDLEWARE = [
    # Outermost, so that every response carries X-Request-ID and every log line its context.
    "ledger.observability.logcontext.RequestIdMiddleware",
    "ledger.api.middleware.ApiBoundaryMiddleware",
    # The caller's W3C `traceparent`: its trace id goes into the events the call writes.
    "ledger.observability.tracing.TraceContextMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # PAGE_MIDDLEWARE, for everything but agent calls under /api/.
    "config.pagemiddleware.PagesOnly",
    "reviews.access.middleware.no_store_when_signed_in",
    "axes.middleware.AxesMiddleware",
]

# Run by config.pagemiddleware.PagesOnly, in this order, for every path but agent calls.
PAGE_MIDDLEWARE = [
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
]
# The admin's checks look for these three in MIDDLEWARE itself; PagesOnly runs them.
SILENCED_SYSTEM_CHECKS = ["admin.E408", "admin.E409", "admin.E410"]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "reviews.views.context.roles",
                "reviews.views.context.halts",
                "reviews.restore_banner.restore",
            ],
        },
    },
]

# One host, or several as libpq takes them (`postgres://u@h1:5432,h2:5432/db`): each new
# connection goes to whichever of them is primary (config/database.py, ADR 0011).
DATABASES = {
    "default": database_settings(
        env_str("DATABASE_URL"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 600, minimum=0),
        # Off by default: it costs a round trip per request, and a dead connection is found by
        # the request's first query anyway (503, then a fresh connection).
        conn_health_checks=env_bool("DATABASE_HEALTH_CHECKS", False),
    )
}
DATABASES["default"].setdefault("OPTIONS", {})
# Short enough that a request meeting an unreachable database answers 503 well within 5 s
# (a stopped server refuses at once; a host that drops packets takes the whole timeout).
DATABASES["default"]["OPTIONS"].setdefault(
    "connect_timeout", env_int("DATABASE_CONNECT_TIMEOUT", 3, minimum=1)
)
# psycopg prepares a statement on a connection once it has run this many times there; the
# agent API's statements (ledger.effects.hotpath) run on cursors that can be prepared. "off" for a
# pooler without prepared-statement support (PgBouncer before 1.21, or without
# max_prepared_statements): see the README's deployment notes.
_prepare = env_str("DATABASE_PREPARE_THRESHOLD", "2")
DATABASES["default"]["OPTIONS"].setdefault(
    "prepare_threshold", None if _prepare == "off" else int(_prepare)
)
# The long poll's LISTEN connection (ledger.api.longpoll): DATABASE_URL unless set. Behind a
# transaction pooler, point it at PostgreSQL itself: LISTEN holds a session.
LEDGER_LISTEN_URL = env_str("LEDGER_LISTEN_URL", "-").removeprefix("-")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
REDIS_SOCKET_TIMEOUT = env_int("REDIS_SOCKET_TIMEOUT", 2, minimum=1)
# django-rq builds URL connections with `from_url` alone, so the timeouts travel in the URL:
# a Redis outage must fail fast, never hang a request whose write already committed.
_sep = "&" if "?" in REDIS_URL else "?"
RQ_QUEUES = {
    "default": {
        "URL": f"{REDIS_URL}{_sep}socket_timeout={REDIS_SOCKET_TIMEOUT}"
        f"&socket_connect_timeout={REDIS_SOCKET_TIMEOUT}",
        "DEFAULT_TIMEOUT": 300,
    },
}

# django-q2 runs the schedules only; the ORM broker keeps them in PostgreSQL.
Q_CLUSTER = {
    "name": "effect-ledger",
    "orm": "default",
    "workers": env_int("Q_WORKERS", 1, minimum=1),
    "timeout": 60,
    "retry": 120,
    "catch_up": False,
    "save_limit": 250,
    "poll": 2,
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # Django's ModelBackend, refusing accounts linked to the identity provider (reviews.sso).
    "reviews.sso.backends.LocalPasswordBackend",
    # Single sign-on (OpenID Connect); inert while LEDGER_OIDC_* is unset.
    "reviews.sso.backends.ProviderBackend",
]
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = 1  # hours
# Either limit locks: failures against one account from one address, or failures from one
# address against any accounts (a flat list means "or"; a nested list means "and"). Never one
# account at every address: knowing a user name would be enough to lock its owner out.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
# One account guessed at from many addresses (reviews.access.signin): past this many failures
# within the window (seconds), it is refused from every address it has not signed in from before.
AXES_HANDLER = "reviews.access.signin.LockoutHandler"
LEDGER_LOGIN_ACCOUNT_LIMIT = env_int("LEDGER_LOGIN_ACCOUNT_LIMIT", 20, minimum=1)
LEDGER_LOGIN_ACCOUNT_WINDOW = env_int("LEDGER_LOGIN_ACCOUNT_WINDOW", 900, minimum=60)
# Off: a success resets every attempt matching *any* lockout parameter, so with "ip_address" in
# the list an insider signing in to their own account from their desk would wipe the count for
# that address, including their guesses at a colleague's account. Failures expire with the
# cool-off instead.
AXES_RESET_ON_SUCCESS = False
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# Where collectstatic puts the pages' files and WhiteNoise serves them from.
STATIC_ROOT = Path(env_str("LEDGER_STATIC_ROOT", str(BASE_DIR / "var" / "staticfiles")))
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# Every page runs under this policy, the API docs too: their Swagger UI is a local copy started
# from a file (templates/ninja/swagger.html), so no page needs an exception.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

# --- The ledger -------------------------------------------------------------------------------

# Keyed HMACs for idempotency keys, request hashes and redaction tokens. Versioned, so a key can
# be rotated: new hashes use the highest version, stored hashes name the version they used.
LEDGER_KEYS = env_keyring("LEDGER_KEYS")
LEDGER_MAX_BODY_BYTES = env_int("LEDGER_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
# Our limit is enforced (413) by ledger.api.middleware; Django's own must not be lower.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(LEDGER_MAX_BODY_BYTES, 2_621_440)
# The longest lease the agent API grants (claims, intents with a claim, heartbeats; the schema's
# own bound is 3600). Restore mode reaches back this far before the loss
# (ledger.rules.restore_state).
LEDGER_MAX_LEASE_SECONDS = env_int("LEDGER_MAX_LEASE_SECONDS", 3600, minimum=1, maximum=3600)
LEDGER_DEFAULT_LEASE_SECONDS = env_int("LEDGER_DEFAULT_LEASE_SECONDS", 60, minimum=1)
if LEDGER_DEFAULT_LEASE_SECONDS > LEDGER_MAX_LEASE_SECONDS:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"LEDGER_DEFAULT_LEASE_SECONDS ({LEDGER_DEFAULT_LEASE_SECONDS}) must not be above "
        f"LEDGER_MAX_LEASE_SECONDS ({LEDGER_MAX_LEASE_SECONDS})."
    )
LEDGER_DEFAULT_MAX_ATTEMPTS = env_int("LEDGER_DEFAULT_MAX_ATTEMPTS", 3, minimum=1)
LEDGER_ESCALATE_AFTER = env_duration("LEDGER_ESCALATE_AFTER", "24h")
LEDGER_BACKOFFICE_WINDOW = env_duration("LEDGER_BACKOFFICE_WINDOW", "7d")
LEDGER_RETENTION = env_duration("LEDGER_RETENTION", "30d")
LEDGER_RECOVERY_LIMIT = env_int("LEDGER_RECOVERY_LIMIT", 1000, minimum=1)
# Reconciliation: how long a checker holds an effect, how long "not found" must wait after the
# last dispatch to count as proof (tools may set their own settle_after), the backoff between
# inconclusive lookups, and how many inconclusive lookups before a person is asked.
LEDGER_CHECK_LEASE = env_int("LEDGER_CHECK_LEASE", 60, minimum=1)
LEDGER_SETTLE_AFTER = env_duration("LEDGER_SETTLE_AFTER", "2m")
LEDGER_BACKOFF_BASE = env_int("LEDGER_BACKOFF_BASE", 5, minimum=1)
LEDGER_BACKOFF_CAP = env_int("LEDGER_BACKOFF_CAP", 900, minimum=1)
LEDGER_MAX_CHECKS = env_int("LEDGER_MAX_CHECKS", 6, minimum=1)
LEDGER_SWEEP_MINUTES = env_int("LEDGER_SWEEP_MINUTES", 1, minimum=1)
# Webhook signing secrets per provider: "sandbox-pay:secret,other:secret". During a rotation a
# provider may be named twice, "sandbox-pay:old,sandbox-pay:new": both are accepted until the
# old one is removed. LEDGER_WEBHOOK_SECRETS holds the last one named, the other one
# LEDGER_WEBHOOK_OLD_SECRETS (ledger.api.webhooks.verify accepts either).
LEDGER_WEBHOOK_SECRETS: dict[str, str] = {}
LEDGER_WEBHOOK_OLD_SECRETS: dict[str, str] = {}
for _item in env_list("LEDGER_WEBHOOK_SECRETS", []):
    _provider, _, _secret = _item.partition(":")
    if not _provider or not _secret or _provider in LEDGER_WEBHOOK_OLD_SECRETS:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "LEDGER_WEBHOOK_SECRETS must look like 'provider:secret,…', with at most two "
            "secrets per provider (the old and the new one during a rotation)."
        )
    if _provider in LEDGER_WEBHOOK_SECRETS:
        LEDGER_WEBHOOK_OLD_SECRETS[_provider] = LEDGER_WEBHOOK_SECRETS[_provider]
    LEDGER_WEBHOOK_SECRETS[_provider] = _secret
LEDGER_WEBHOOK_TOLERANCE = env_int("LEDGER_WEBHOOK_TOLERANCE", 300, minimum=1)
# The audit chain: how long an event may stay unsealed before the verifier reports it (and
# before the sealer stops looking below it), and where the chain head is exported to.
LEDGER_SEAL_GRACE = env_duration("LEDGER_SEAL_GRACE", "5m")
LEDGER_CHAIN_HEAD_FILE = env_str(
    "LEDGER_CHAIN_HEAD_FILE", str(BASE_DIR / "var" / "chain-heads.jsonl")
)
# The witness (`ledger.audit.witness`): a file on other storage than the database, rewritten
# every minute, that lets the ledger notice its database went back in time (a restore, a
# failover that lost commits). Empty: no witness, and restore mode only by hand.
LEDGER_WITNESS_PATH = env_str("LEDGER_WITNESS_PATH", "")

# --- Alerts (reviews.alerts, ledger.rules.outbox) -------------------------------------------
# How long a review item may stay open before it is overdue (tools may set resolve_within);
# alerts go out at 75% of it and when it passes.
LEDGER_RESOLVE_WITHIN = env_duration("LEDGER_RESOLVE_WITHIN", "24h")
# Email goes through Django's mail backends: the console by default, SMTP with the EMAIL_* below.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
# A hung mail server must not hold the sender past its lease.
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
LEDGER_ALERT_EMAILS = env_list("LEDGER_ALERT_EMAILS", [])
LEDGER_ALERT_FROM = env_str("LEDGER_ALERT_FROM", "effect-ledger@localhost")
LEDGER_ALERT_WEBHOOK_URL = env_str("LEDGER_ALERT_WEBHOOK_URL", "")
LEDGER_ALERT_WEBHOOK_SECRET = env_str("LEDGER_ALERT_WEBHOOK_SECRET", "")
LEDGER_ALERT_WEBHOOK_FORMAT = env_str("LEDGER_ALERT_WEBHOOK_FORMAT", "json")
# Where the links in alerts point: the address operators open the pages at.
LEDGER_ALERT_LINK_BASE = env_str("LEDGER_ALERT_LINK_BASE", "http://127.0.0.1:8000")
if LEDGER_ALERT_WEBHOOK_FORMAT not in ("json", "slack") or (
    LEDGER_ALERT_WEBHOOK_URL
    and (
        not LEDGER_ALERT_WEBHOOK_URL.startswith(("https://", "http://"))
        # A Slack URL is its own secret; a receiver of the JSON form checks our signature.
        or (LEDGER_ALERT_WEBHOOK_FORMAT == "json" and len(LEDGER_ALERT_WEBHOOK_SECRET) < 16)
    )
):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "LEDGER_ALERT_WEBHOOK_FORMAT must be json or slack, LEDGER_ALERT_WEBHOOK_URL an http(s) "
        "URL, and with the json format LEDGER_ALERT_WEBHOOK_SECRET must have 16+ characters."
    )

# --- Deciding from Slack and from email (reviews.remote, ADR 0020) ---------------------------
# Slack's interactivity: with the Slack app's signing secret set, alerts posted to Slack carry
# decision buttons and POST /slack/interactions takes their presses (docs/operations/slack-app.md).
# During a rotation the old secret is LEDGER_SLACK_OLD_SIGNING_SECRET; either verifies.
LEDGER_SLACK_SIGNING_SECRET = env_str("LEDGER_SLACK_SIGNING_SECRET", "")
LEDGER_SLACK_OLD_SIGNING_SECRET = env_str("LEDGER_SLACK_OLD_SIGNING_SECRET", "")
# The app's bot token: opens the modals that ask for a reason (views.open) and, in a workspace
# trusted for it, reads a Slack user's email (users.info).
LEDGER_SLACK_BOT_TOKEN = env_str("LEDGER_SLACK_BOT_TOKEN", "")
# Where Slack's Web API is, and the only address response_urls may point at.
LEDGER_SLACK_API_URL = env_str("LEDGER_SLACK_API_URL", "https://slack.com/api/")
LEDGER_SLACK_RESPONSE_URL = env_str("LEDGER_SLACK_RESPONSE_URL", "https://hooks.slack.com/")
# Workspaces (team ids) whose users may be mapped to an account by the email Slack holds for
# them, when it is an SSO account's email the identity provider verified; elsewhere only an
# explicit link maps a Slack user.
LEDGER_SLACK_EMAIL_TRUSTED_TEAMS = env_list("LEDGER_SLACK_EMAIL_TRUSTED_TEAMS", [])
# Slack waits three seconds for an answer: each call to its Web API gets this long.
LEDGER_SLACK_TIMEOUT = env_int("LEDGER_SLACK_TIMEOUT", 2, minimum=1)
# How long the link that lets a Slack user link their account stays valid.
LEDGER_SLACK_LINK_MAX_AGE = env_duration("LEDGER_SLACK_LINK_MAX_AGE", "15m")
# Alert emails carry a signed, single-use link per decision offered, valid this long.
LEDGER_EMAIL_LINKS = env_bool("LEDGER_EMAIL_LINKS", True)
LEDGER_EMAIL_LINK_MAX_AGE = env_duration("LEDGER_EMAIL_LINK_MAX_AGE", "24h")
if LEDGER_SLACK_SIGNING_SECRET and len(LEDGER_SLACK_SIGNING_SECRET) < 16:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("LEDGER_SLACK_SIGNING_SECRET must have 16+ characters.")

# --- Agent notifications (ledger.api.longpoll, ledger.api.notifications) ---------------------
# Long polls (GET /effects/{id}?wait=N) waiting at once in one process; the rest are answered at
# once with Retry-After. Each waiter holds one of the worker's threads (gunicorn gthread), so
# the default leaves half of GUNICORN_THREADS to every other request.
LEDGER_MAX_WAITERS = env_int(
    "LEDGER_MAX_WAITERS", max(1, env_int("GUNICORN_THREADS", 4, minimum=1) // 2), minimum=1
)
# How many of those places one agent may hold at once (ledger.api.longpoll.agent_share); 0: half of
# LEDGER_MAX_WAITERS, at least one. The rest of that agent's long polls are answered at once.
LEDGER_WAITERS_PER_AGENT = env_int("LEDGER_WAITERS_PER_AGENT", 0, minimum=0)


# Where an intent's callback_url may point (ledger.api.callbacktargets): origins
# (`https://hooks.example.com:8443`) and URL prefixes (`https://hooks.example.com/agents/`);
# none: every callback_url is refused. The old LEDGER_CALLBACK_HOSTS (bare host names, which
# let a callback reach any port and path of the host) still works for one release, narrowed to
# each host's default http and https ports, with a warning; both at once is refused. Then the
# secret that signs each callback (X-Ledger-Signature, as ledger.api.webhooks.sign).
def _callback_allow() -> list[str]:
    import logging

    from django.core.exceptions import ImproperlyConfigured

    from ledger.api.callbacktargets import CallbackRefused, allow_list, legacy_entries

    entries = env_list("LEDGER_CALLBACK_ALLOW", [])
    hosts = env_list("LEDGER_CALLBACK_HOSTS", [])
    if entries and hosts:
        raise ImproperlyConfigured(
            "Set LEDGER_CALLBACK_ALLOW only: LEDGER_CALLBACK_HOSTS is its deprecated old form."
        )
    if hosts:
        entries = legacy_entries(hosts)
        logging.getLogger("config.settings").warning(
            "LEDGER_CALLBACK_HOSTS is deprecated and will be refused in the next release; it "
            "now allows only the default ports, as LEDGER_CALLBACK_ALLOW=%s would",
            ",".join(entries),
        )
    try:
        allow_list(entries)
    except CallbackRefused as exc:
        raise ImproperlyConfigured(
            f"LEDGER_CALLBACK_ALLOW: {exc} (use https://host[:port] or https://host/path/)"
        ) from None
    return entries


LEDGER_CALLBACK_ALLOW = _callback_allow()
LEDGER_CALLBACK_SECRET = env_str("LEDGER_CALLBACK_SECRET", "")
if LEDGER_CALLBACK_ALLOW and len(LEDGER_CALLBACK_SECRET) < 16:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "LEDGER_CALLBACK_SECRET must have 16+ characters when LEDGER_CALLBACK_ALLOW is set."
    )

# --- Metrics and logs (ledger.observability: metrics, summary, jsonlog) ----------------------
# The bearer token a Prometheus scraper sends to /metrics; unset, /metrics answers 404.
LEDGER_METRICS_TOKEN = env_str("LEDGER_METRICS_TOKEN", "-").removeprefix("-")
# How old the summary behind the gauges may get before a scrape reads it again (per process).
LEDGER_METRICS_REFRESH = env_int("LEDGER_METRICS_REFRESH", 10, minimum=1)
# json: one JSON object per line (ledger.observability.jsonlog); plain: for reading in a terminal.
LOG_FORMAT = env_str("LOG_FORMAT", "json")
if LOG_FORMAT not in ("json", "plain"):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("LOG_FORMAT must be json or plain.")

# ledger.observability.jsonlog.configure also routes Python warnings into these handlers.
LOGGING_CONFIG = "ledger.observability.jsonlog.configure"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "ledger.observability.jsonlog.JsonFormatter"},
        "plain": {
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s "
            "[request=%(request_id)s agent=%(agent)s effect=%(effect_id)s run=%(run_id)s]"
        },
    },
    "filters": {"context": {"()": "ledger.observability.logcontext.ContextFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.request": {"level": "ERROR"},
        "axes": {"level": "WARNING"},
    },
}

# --- Single sign-on: OpenID Connect (reviews.sso, ADR 0013) ----------------------------------
# Off while no LEDGER_OIDC_* variable is set: the pages sign in with local accounts only.
# reviews.sso.config.django_settings checks every value (a mistake stops the process here) and
# sets LEDGER_SSO, LEDGER_LOCAL_LOGIN and mozilla-django-oidc's OIDC_* settings.
from reviews.sso.config import django_settings as _sso_settings  # noqa: E402

globals().update(_sso_settings(os.environ))
# Innermost of the pages' middleware: it renews SSO sessions past LEDGER_OIDC_REFRESH_SECONDS,
# and its answer still gets the CSP header.
PAGE_MIDDLEWARE.append("reviews.sso.middleware.SsoSessions")

# --- Partitioned history: PostgreSQL only; where `manage.py archive` writes -------------------
# The events table is partitioned by month with PostgreSQL's declarative partitioning (ADR
# 0016): no other backend can hold it, so any other one stops the process here.
if DATABASES["default"].get("ENGINE") != "django.db.backends.postgresql":
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        f"The ledger runs on PostgreSQL only (django.db.backends.postgresql), not on "
        f"{DATABASES['default'].get('ENGINE')!r}: its event log is partitioned by month."
    )
# Where `manage.py archive` writes a month's export (`--to` overrides it).
LEDGER_ARCHIVE_DIR = env_str("LEDGER_ARCHIVE_DIR", str(BASE_DIR / "var" / "archive"))
