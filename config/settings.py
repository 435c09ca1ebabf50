"""Settings, 12-factor: everything that differs between machines comes from the environment."""

import json
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def every(seconds: int, task: str) -> dict[str, object]:
    """A Celery beat entry: run `task` every `seconds`."""
    return {"task": task, "schedule": timedelta(seconds=seconds)}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def running_demo_env() -> dict[str, str]:
    """The settings of the demo running from this checkout (scripts/demo writes them to
    .demo/runtime.env and holds .demo/lock while it runs), so that `manage.py createsuperuser`
    and the other commands run here reach the demo's database. Only when DATABASE_URL is unset,
    and only while the demo runs: a file a killed demo left behind is ignored."""
    import fcntl
    import sys

    runtime = BASE_DIR / ".demo" / "runtime.env"
    if os.environ.get("DATABASE_URL") or not runtime.exists():
        return {}
    try:
        with open(BASE_DIR / ".demo" / "lock", "rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)  # granted: no demo holds it
            return {}
    except BlockingIOError:
        pass  # the demo holds it
    except OSError:
        return {}
    values = dict(line.split("=", 1) for line in runtime.read_text().splitlines() if "=" in line)
    print(
        f"config.settings: DATABASE_URL is unset; using the running demo's ({runtime})",
        file=sys.stderr,
    )
    return values


# what the environment sets wins; the demo's file only fills in (its names are in docs/settings.md)
os.environ.update({**running_demo_env(), **os.environ})

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and not os.environ.get("INTENTLEDGER_ALLOW_INSECURE_KEY"):
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    SECRET_KEY = "insecure-local-only-key-do-not-use-in-production"  # noqa: S105
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
    if h.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",  # trigram indexes for the dashboard search
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "runs",
    "tools",
    "dashboard",  # the dashboard's shell: people, roles, the audit log pages, what every page shares
    "review",  # the desk: the review queue, its items, resolutions, escalations, approvals
    "celery_agents",  # the generic Celery runner for agents (the task agents.run_agent)
    "support_agent",  # the demo's support agent, registered with celery_agents
    "audit",
    "console",
    "sso",  # sign-in through the company's identity provider (OpenID Connect)
    "demo",  # scripts/demo's management commands (demo_seed, demo_story); no models
    "traces",  # the journal as OpenTelemetry traces (docs/traces.md)
    "teams",  # who owns each row; row-level security keyed on the transaction's teams
    "config.apps.DeploymentConfig",  # settings a deployment left out, named at start (no models)
]

MIDDLEWARE = [
    # /healthz and /readyz: answered before the host check and the HTTPS redirect (config/probes.py)
    "config.probes.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "runs.middleware.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # the person's teams: what every query of the request may see (teams/, docs/teams.md)
    "teams.middleware.TeamScopeMiddleware",
    "config.routers.ReplicaReadsMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "console.logs.RunLogContextMiddleware",
]

if os.environ.get("LEDGER_ASGI") == "1":
    # config/asgi.py (the long polls): only async-capable middleware, so a waiter holds no thread
    MIDDLEWARE.remove("whitenoise.middleware.WhiteNoiseMiddleware")

# a person's permissions come from the roles they hold per team (teams.Membership)
AUTHENTICATION_BACKENDS = ["teams.backends.TeamRoleBackend"]

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
                "django.template.context_processors.csp",
                "dashboard.context_processors.replica_lag",
                "dashboard.context_processors.polling",
                "dashboard.context_processors.teams",
            ],
        },
    },
]

DATABASE_URL = os.environ.get("DATABASE_URL", "postgres://root@127.0.0.1:5432/test")
if not DATABASE_URL.startswith(("postgres://", "postgresql://")):
    raise ImproperlyConfigured(
        "DATABASE_URL must be a postgres:// URL: PostgreSQL is the only database."
    )
# How long a process keeps a database connection between requests (seconds; 0 closes it after
# each request, as the test suite's servers do so that many of them fit in a shared server)
DATABASE_CONN_MAX_AGE = int(os.environ.get("DATABASE_CONN_MAX_AGE", "600"))
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=DATABASE_CONN_MAX_AGE, conn_health_checks=True
    )
}
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("TEST_DATABASE_NAME", "test_intentledger")}
# Behind PgBouncer in transaction pooling mode (DATABASE_POOLER=pgbouncer) a client's statements
# may run on different server connections, so nothing may live in a session: no server-side
# cursors (a WITH HOLD cursor outlives its transaction); everything else the ledger does is
# transaction-scoped already (one statement per hot call, SET LOCAL, xact advisory locks) and no
# statement is prepared server-side (psycopg binds on the client). See README, "Scale".
DATABASE_POOLER = os.environ.get("DATABASE_POOLER", "")
if DATABASE_POOLER not in ("", "pgbouncer"):
    raise ImproperlyConfigured("DATABASE_POOLER is 'pgbouncer' or unset.")
if DATABASE_POOLER == "pgbouncer":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# LISTEN is session state: the ?wait= waiters' listener (runs/waiting.py) connects here, a direct
# connection to the primary, when DATABASE_URL goes through a transaction pooler (which would hand
# its notifications to whichever client holds that server connection next, or to nobody).
DATABASE_LISTEN_URL = os.environ.get("DATABASE_LISTEN_URL", "")
# A hot standby for what only shows things (dashboard pages, exports): config/routers.py.
DATABASE_REPLICA_URL = os.environ.get("DATABASE_REPLICA_URL", "")
if DATABASE_REPLICA_URL:
    DATABASES["replica"] = dj_database_url.parse(
        DATABASE_REPLICA_URL, conn_max_age=DATABASE_CONN_MAX_AGE, conn_health_checks=True
    )
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
    if DATABASE_POOLER == "pgbouncer":
        DATABASES["replica"]["DISABLE_SERVER_SIDE_CURSORS"] = True
DATABASE_ROUTERS = ["config.routers.ReplicaRouter"]
# pages read from the replica say so when it is further behind than this
LEDGER_REPLICA_LAG_WARN_SECONDS = float(os.environ.get("LEDGER_REPLICA_LAG_WARN_SECONDS", "5"))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Password hashers, first one hashes (dotted paths, comma-separated). Unset: Django's own list
# (PBKDF2, 1.5 million iterations: a second or so a hash on a small machine). Only the test
# harness sets it (tests/conftest.py: a fast hasher for itself and the servers it starts); a
# deployment leaves it unset.
if os.environ.get("PASSWORD_HASHERS", "").strip():
    PASSWORD_HASHERS = [h.strip() for h in os.environ["PASSWORD_HASHERS"].split(",") if h.strip()]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 8 * 3600)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = not DEBUG and env_bool("SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
# HTTPS in production, from the environment (off by default: the demo and tests speak plain HTTP).
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
if env_bool("SECURE_PROXY_SSL_HEADER", False):  # behind a proxy that sets X-Forwarded-Proto
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]
# a refused form says what to set (plain HTTP with secure cookies, an unknown origin)
CSRF_FAILURE_VIEW = "config.csrf.csrf_failure"
# Content-Security-Policy (Django's built-in middleware): scripts only from our own origin or
# with the per-request nonce, never inline; inline style *attributes* (budget bar widths) allowed.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.NONCE],
    "style-src-attr": [CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = os.environ.get("STATIC_ROOT") or None
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["runs.authentication.WorkerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["runs.authentication.IsWorker"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["runs.api_errors.StrictJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "runs.api_errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agent Ledger worker API",
    "DESCRIPTION": "Durable journals for agent runs, fenced leases, budgets and enforced idempotency keys.",
    # the software's version, the SDK's and the server's (one file: sdk/VERSION); the API's own
    # version is its path, /api/v1/
    "VERSION": (BASE_DIR / "sdk" / "VERSION").read_text(encoding="utf-8").strip(),
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    # the rendered docs page serves Swagger UI from our own static files (no CDN; works offline)
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",  # the default
        "runs.schema.request_line_too_long",
    ],
}

# How often the dashboard's open pages ask the server for changes, in seconds: the review queue,
# the runs list and an open review item; a live run's page. The test suite sets both short, so its
# browser tests see a change within a fraction of a second instead of waiting out the interval.
DASHBOARD_POLL_SECONDS = float(os.environ.get("DASHBOARD_POLL_SECONDS", "5"))
DASHBOARD_LIVE_RUN_POLL_SECONDS = float(os.environ.get("DASHBOARD_LIVE_RUN_POLL_SECONDS", "3"))

# Request bodies over this size are refused with 413 before they are parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("LEDGER_MAX_BODY_BYTES", 1024 * 1024)
# A request line (method, path and query string) longer than this is refused with 414 before
# Django sees it (config.wsgi.RequestLineLimit; the contract documents it on every operation)
LEDGER_MAX_REQUEST_LINE = env_int("LEDGER_MAX_REQUEST_LINE", 4094)

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600)
}
if CELERY_BROKER_URL.startswith("filesystem://"):
    # the demo's no-install broker: Kombu's filesystem transport, folders shared by every process
    # on the machine (scripts/demo creates them)
    _broker_dir = Path(os.environ.get("CELERY_FILESYSTEM_BROKER_DIR") or BASE_DIR / ".demo/broker")
    CELERY_BROKER_TRANSPORT_OPTIONS |= {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "control_folder": str(_broker_dir / "control"),
    }
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Escalation webhooks are delivered from a queue of their own, so a slow receiver never holds
# the worker processes agent runs wait for: start a worker for it (`celery -A config worker
# -Q webhooks`), or add it to a worker's queues (`-Q celery,webhooks`).
WEBHOOK_QUEUE = os.environ.get("WEBHOOK_QUEUE", "webhooks")
CELERY_TASK_ROUTES = {"review.tasks.deliver_webhook": {"queue": WEBHOOK_QUEUE}}
# One delivery attempt, connect to the end of the answer, takes at most this long.
WEBHOOK_DELIVERY_SECONDS = float(os.environ.get("WEBHOOK_DELIVERY_SECONDS", "10"))
# Webhooks may not target private, loopback or link-local addresses (169.254.169.254, the
# database's port) unless this is set: the tests and the demo, whose receivers are local.
WEBHOOK_ALLOW_PRIVATE = os.environ.get("WEBHOOK_ALLOW_PRIVATE", "") in ("1", "true", "yes")
LEDGER_REAPER_INTERVAL_SECONDS = env_int("LEDGER_REAPER_INTERVAL_SECONDS", 5)
# a live run nobody has touched for this long is dispatched again (its task may have been lost)
LEDGER_REDISPATCH_IDLE_SECONDS = env_int("LEDGER_REDISPATCH_IDLE_SECONDS", 300)
CELERY_BEAT_SCHEDULE = {
    "reap-expired-leases": every(LEDGER_REAPER_INTERVAL_SECONDS, "runs.tasks.reap_expired_leases"),
    "enforce-deadlines": every(LEDGER_REAPER_INTERVAL_SECONDS, "runs.tasks.enforce_deadlines"),
    # runs whose task a broker lost (never leased, or a lost re-dispatch) are offered again
    "redispatch-idle-runs": every(
        max(LEDGER_REDISPATCH_IDLE_SECONDS // 4, 5), "runs.tasks.redispatch_idle_runs"
    ),
    # steps nobody approved before their rule's expiry become denied (action "expire")
    "expire-approvals": every(LEDGER_REAPER_INTERVAL_SECONDS, "runs.tasks.expire_approvals"),
    "prune-idempotency-keys": every(60 * 60, "tools.tasks.prune_idempotency_keys"),
}

# Review dashboard (issue 5): an item waiting longer than the SLA mails the supervisors once;
# a claim keeps other supervisors off an item for REVIEW_CLAIM_SECONDS; login lockout.
REVIEW_SLA_SECONDS = env_int("REVIEW_SLA_SECONDS", 15 * 60)
REVIEW_CLAIM_SECONDS = env_int("REVIEW_CLAIM_SECONDS", 15 * 60)
LOGIN_MAX_FAILURES = env_int("LOGIN_MAX_FAILURES", 5)
LOGIN_LOCKOUT_SECONDS = env_int("LOGIN_LOCKOUT_SECONDS", 15 * 60)
# Single sign-on through the company's identity provider (issue 39, sso/, docs/sso.md): OpenID
# Connect's authorization-code flow with PKCE, the provider found through
# {OIDC_ISSUER}/.well-known/openid-configuration. Unset OIDC_ISSUER: no single sign-on.
OIDC_ISSUER = os.environ.get("OIDC_ISSUER", "").strip().rstrip("/")
OIDC_CLIENT_ID = os.environ.get("OIDC_CLIENT_ID", "")
OIDC_CLIENT_SECRET = os.environ.get("OIDC_CLIENT_SECRET", "")
# the claim whose values map onto the dashboard's groups ("claim-value=group,…")
OIDC_ROLES_CLAIM = os.environ.get("OIDC_ROLES_CLAIM", "groups")
OIDC_ROLE_MAP = os.environ.get("OIDC_ROLE_MAP", "")
OIDC_PROVIDER_NAME = os.environ.get("OIDC_PROVIDER_NAME", "")
OIDC_SCOPES = os.environ.get("OIDC_SCOPES", "openid email profile")
OIDC_SIGN_ALGORITHMS = [
    a.strip() for a in os.environ.get("OIDC_SIGN_ALGORITHMS", "RS256").split(",") if a.strip()
]
OIDC_TIMEOUT_SECONDS = float(os.environ.get("OIDC_TIMEOUT_SECONDS", "5"))
# LOCAL_LOGIN=0: no password sign-in (the login page hides it and refuses its POST; the Django
# admin's login is the same page), only the identity provider
LOCAL_LOGIN = env_bool("LOCAL_LOGIN", True)
# The console's overview reads past days from a rollup that beat recomputes (console.rollup)
CONSOLE_ROLLUP_DAYS = env_int("CONSOLE_ROLLUP_DAYS", 31)
CELERY_BEAT_SCHEDULE["console-refresh-run-days"] = every(
    env_int("CONSOLE_ROLLUP_SECONDS", 300), "console.tasks.refresh_run_days"
)
CELERY_BEAT_SCHEDULE["review-escalate-waiting-items"] = every(
    env_int("REVIEW_ESCALATION_INTERVAL_SECONDS", 60), "review.tasks.escalate_waiting_items"
)
# stale login-failure counters (dashboard.services.logins) go hourly; a live lockout is kept
CELERY_BEAT_SCHEDULE["dashboard-prune-login-failures"] = every(
    60 * 60, "dashboard.tasks.prune_login_failures"
)
# Traces (issue 49, docs/traces.md): with an OTLP endpoint set, beat exports the committed journal
# every TRACES_EXPORT_INTERVAL_SECONDS; OTEL_TRACE_URL ("…{trace_id}…") links a run page to it
if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
    "OTEL_EXPORTER_OTLP_ENDPOINT"
):
    CELERY_BEAT_SCHEDULE["export-traces"] = every(
        env_int("TRACES_EXPORT_INTERVAL_SECONDS", 5), "traces.tasks.export_traces"
    )
OTEL_TRACE_URL = os.environ.get("OTEL_TRACE_URL", "")
# Tool side: an in_progress key whose lock is older than this is stale ("maybe executed").
TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS = env_int("TOOLS_IDEMPOTENCY_LOCK_TIMEOUT_SECONDS", 60)
# Finished keys are kept at least this long (never less than 72 h), then pruned hourly.
TOOLS_IDEMPOTENCY_RETENTION_HOURS = env_int("TOOLS_IDEMPOTENCY_RETENTION_HOURS", 72)
# Extra modules that register tools at start-up (your own tools; test-only tools in tests).
TOOLS_EXTRA_MODULES = [
    m.strip() for m in os.environ.get("TOOLS_EXTRA_MODULES", "").split(",") if m.strip()
]

# Audit (issue 6): the Ed25519 key signing checkpoints and exports (base64 or PEM; with DEBUG and
# no key, one is generated into AUDIT_SIGNING_KEY_FILE), export files and their lifetime.
AUDIT_SIGNING_KEY = os.environ.get("AUDIT_SIGNING_KEY", "")
AUDIT_SIGNING_KEY_FILE = os.environ.get(
    "AUDIT_SIGNING_KEY_FILE", str(BASE_DIR / ".demo" / "audit-signing-key")
)
AUDIT_EXPORT_DIR = os.environ.get("AUDIT_EXPORT_DIR", str(BASE_DIR / "exports"))
AUDIT_EXPORT_TTL_HOURS = env_int("AUDIT_EXPORT_TTL_HOURS", 24)
AUDIT_EXPORT_SYNC_MAX_RUNS = env_int("AUDIT_EXPORT_SYNC_MAX_RUNS", 2000)
AUDIT_CHECKPOINT_INTERVAL_SECONDS = env_int("AUDIT_CHECKPOINT_INTERVAL_SECONDS", 3600)
# The retention floor: no run younger than this is ever purged (EU AI Act Art. 19(1), 26(6): logs
# kept at least six months); a retention policy shorter than it is refused.
AUDIT_MIN_RETENTION_DAYS = env_int("AUDIT_MIN_RETENTION_DAYS", 183)
CELERY_BEAT_SCHEDULE.update(
    {
        "audit-checkpoint": every(
            AUDIT_CHECKPOINT_INTERVAL_SECONDS, "audit.tasks.checkpoint_write"
        ),
        "audit-expire-exports": every(15 * 60, "audit.tasks.exports_expire"),
        "audit-retention": every(24 * 60 * 60, "audit.tasks.retention_purge"),
    }
)

EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "127.0.0.1")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
# a hanging SMTP server must fail the send, not hold its idempotency key in progress until stale
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "support@agentledger.local")

# Where the journal asks the tool side what it knows about an idempotency key (recovery rules).
# Tools that can say whether a key took effect (tools.lookups): {"tool name": "dotted.path" or
# "https://…/{key}"}; the review desk asks them about unknown steps (2 s, then "no answer").
LEDGER_TOOL_LOOKUPS: dict[str, str] = json.loads(os.environ.get("LEDGER_TOOL_LOOKUPS") or "{}")
LEDGER_TOOL_LOOKUP_TIMEOUT_SECONDS = float(
    os.environ.get("LEDGER_TOOL_LOOKUP_TIMEOUT_SECONDS", "2")
)
LEDGER_KEY_STATE_LOOKUP = os.environ.get(
    "LEDGER_KEY_STATE_LOOKUP", "tools.selectors.key_state_for_recovery"
)
INTENTLEDGER_URL = os.environ.get("INTENTLEDGER_URL", "http://127.0.0.1:8000")
INTENTLEDGER_TOKEN = os.environ.get("INTENTLEDGER_TOKEN", "")
# where people reach the dashboard: the links in escalation mails and webhooks
LEDGER_DASHBOARD_URL = os.environ.get("LEDGER_DASHBOARD_URL", "") or INTENTLEDGER_URL
# How the Celery-run agents journal, as the worker INTENTLEDGER_TOKEN names: `inprocess` through
# this process's database connection (runs.inprocess: no HTTP hop, no dependency on the web
# tier), or `http` to INTENTLEDGER_URL like any other worker.
LEDGER_AGENT_TRANSPORT = os.environ.get("LEDGER_AGENT_TRANSPORT", "inprocess").strip().lower()
if LEDGER_AGENT_TRANSPORT not in ("inprocess", "http"):
    raise ImproperlyConfigured("LEDGER_AGENT_TRANSPORT is `inprocess` or `http`.")

# LOG_FORMAT=json: one JSON object a line, with run_id and step_index when the line is written
# while a run's request is answered (console.logs)
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text").strip().lower()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "console.logs.JsonFormatter"}},
    "filters": {"forbidden_one_line": {"()": "dashboard.logging.ForbiddenWithoutTraceback"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["forbidden_one_line"],
            **({"formatter": "json"} if LOG_FORMAT == "json" else {}),
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
}

# GET /metrics (Prometheus) answers only a request with "Authorization: Bearer <METRICS_TOKEN>";
# without a token set, the endpoint refuses everyone (403)
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
# Agent names are the workers' choice: /metrics gives its own label to the agents an admin named
# (a budget policy, a scoped token, an approval rule), then to the busiest up to this many, and
# sums the rest as agent="other", so a token inventing names cannot grow the series without bound.
METRICS_AGENT_LABELS_MAX = env_int("METRICS_AGENT_LABELS_MAX", 50)
# /metrics labels its per-team figures with the team's slug for the busiest this many teams (most
# runs) and sums the rest as team="other": a family has at most (this + 1) x (agents + 1) series.
METRICS_TEAM_LABELS_MAX = env_int("METRICS_TEAM_LABELS_MAX", 20)
