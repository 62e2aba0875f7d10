"""GPU Ledger settings.

Everything comes from the environment through the small typed helpers below. The defaults are
safe rather than convenient: DEBUG is off and a real SECRET_KEY is required unless DEBUG is
switched on explicitly (``make demo`` and ``make test`` set what they need); SQLite in the project
folder and Redis on 127.0.0.1 otherwise. Every variable is listed in ``.env.example`` and in the
README.
"""

import ipaddress
import os
import re
import secrets
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_secret(name: str, default: str = "") -> str:
    """A secret from ``NAME``, or from the file that ``NAME_FILE`` names (Docker secrets)."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false)")


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


# Values that are not secrets: shipped in examples and old defaults, or too short to be random.
PLACEHOLDER_SECRET_KEYS = frozenset({"change-me", "change-me-in-env", "changeme", "secret"})
MIN_SECRET_KEY_LENGTH = 32


def secret_key(debug: bool) -> str:
    """``SECRET_KEY`` (or its ``_FILE``); refused when DEBUG is off and it is missing or weak."""
    key = env_secret("SECRET_KEY")
    if not key:
        if not debug:
            raise ImproperlyConfigured(
                "SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off: generate one with "
                "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
            )
        # A development server with no key gets a random one: sessions end when it restarts,
        # and no known key ever signs anything.
        return secrets.token_urlsafe(50)
    if not debug and (key in PLACEHOLDER_SECRET_KEYS or len(key) < MIN_SECRET_KEY_LENGTH):
        raise ImproperlyConfigured(
            f"SECRET_KEY is a placeholder or shorter than {MIN_SECRET_KEY_LENGTH} characters: "
            "set a random one (python -c 'import secrets; print(secrets.token_urlsafe(50))')"
        )
    return key


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = secret_key(DEBUG)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
SITE_NAME = env_str("SITE_NAME", "GPU Ledger")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "core",
    "fleet",
    "quotas",
    "ledger",
    "alerts",
    "notifications",
    "remediation",
    "servicelevels",
    "serving",
    "observability",
    "accounts",
    "dashboard",
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Provider sign-ins: roles re-read every GPULEDGER_OIDC_ROLE_TTL seconds (accounts.middleware).
    "accounts.middleware.RoleRecheckMiddleware",
    # Which database a request reads (core/dbrouter.py): nothing without DATABASE_REPLICA_URL.
    "core.dbrouter.ReplicaReadsMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its lockout response.
    "axes.middleware.AxesMiddleware",
]

# Sign-in (README "Sign-in"): local accounts (username and password) and/or OpenID Connect
# through the company's identity provider (accounts/oidc.py), on when GPULEDGER_OIDC_ISSUER is set.
GPULEDGER_LOCAL_LOGIN = env_bool("GPULEDGER_LOCAL_LOGIN", True)
GPULEDGER_OIDC_ISSUER = env_str("GPULEDGER_OIDC_ISSUER", "")
# Where the provider's discovery document is; empty: <issuer>/.well-known/openid-configuration.
GPULEDGER_OIDC_DISCOVERY_URL = env_str("GPULEDGER_OIDC_DISCOVERY_URL", "")
GPULEDGER_OIDC_PROVIDER_NAME = env_str("GPULEDGER_OIDC_PROVIDER_NAME", "your company account")
GPULEDGER_OIDC_CLIENT_ID = env_str("GPULEDGER_OIDC_CLIENT_ID", "")
GPULEDGER_OIDC_CLIENT_SECRET = env_secret("GPULEDGER_OIDC_CLIENT_SECRET", "")
GPULEDGER_OIDC_SCOPES = env_list("GPULEDGER_OIDC_SCOPES", ["openid", "email", "profile", "groups"])
GPULEDGER_OIDC_GROUPS_CLAIM = env_str("GPULEDGER_OIDC_GROUPS_CLAIM", "groups")
GPULEDGER_OIDC_SIGN_ALGS = env_list("GPULEDGER_OIDC_SIGN_ALGS", ["RS256"])
# Seconds after which an open session's roles are read from the provider again (or it ends).
GPULEDGER_OIDC_ROLE_TTL = env_int("GPULEDGER_OIDC_ROLE_TTL", 3600, minimum=1)
# Whether a first sign-in creates its user; off: an admin creates users and their identities.
GPULEDGER_OIDC_CREATE_USERS = env_bool("GPULEDGER_OIDC_CREATE_USERS", True)
GPULEDGER_OIDC_TIMEOUT = env_float("GPULEDGER_OIDC_TIMEOUT", 10.0)
if GPULEDGER_OIDC_ISSUER and not GPULEDGER_OIDC_CLIENT_ID:
    raise ImproperlyConfigured("GPULEDGER_OIDC_ISSUER is set: set GPULEDGER_OIDC_CLIENT_ID too")
if not GPULEDGER_LOCAL_LOGIN and not GPULEDGER_OIDC_ISSUER:
    raise ImproperlyConfigured(
        "GPULEDGER_LOCAL_LOGIN=false needs GPULEDGER_OIDC_ISSUER: nobody could sign in"
    )
# Optional Kubernetes RBAC visibility (accounts/rbac.py): a provider user also sees the workloads
# of the namespaces where a SubjectAccessReview says they may list pods, asked as the username
# and groups the API server gives the same identity (claim "sub" or "email", with its prefixes).
GPULEDGER_RBAC_VISIBILITY = env_bool("GPULEDGER_RBAC_VISIBILITY", False)
GPULEDGER_RBAC_CACHE_SECONDS = env_int("GPULEDGER_RBAC_CACHE_SECONDS", 60, minimum=1)
GPULEDGER_RBAC_USERNAME_CLAIM = env_str("GPULEDGER_RBAC_USERNAME_CLAIM", "sub")
if GPULEDGER_RBAC_USERNAME_CLAIM not in {"sub", "email"}:
    raise ImproperlyConfigured(
        f"GPULEDGER_RBAC_USERNAME_CLAIM={GPULEDGER_RBAC_USERNAME_CLAIM!r} must be sub or email"
    )
GPULEDGER_RBAC_USERNAME_PREFIX = env_str("GPULEDGER_RBAC_USERNAME_PREFIX", "")
GPULEDGER_RBAC_GROUPS_PREFIX = env_str("GPULEDGER_RBAC_GROUPS_PREFIX", "")
# mozilla-django-oidc's own settings, from ours.
OIDC_RP_SCOPES = " ".join(GPULEDGER_OIDC_SCOPES)
OIDC_USE_PKCE = True
OIDC_TIMEOUT = GPULEDGER_OIDC_TIMEOUT
OIDC_AUTHENTICATE_CLASS = "accounts.oidc.AuthenticateView"
OIDC_CALLBACK_CLASS = "accounts.oidc.CallbackView"
LOGIN_REDIRECT_URL_FAILURE = "/login/?oidc=failed"

AUTHENTICATION_BACKENDS = [
    # First, so a locked-out user or address is refused before the password is checked.
    "axes.backends.AxesStandaloneBackend",
]
if GPULEDGER_LOCAL_LOGIN:
    AUTHENTICATION_BACKENDS.append("django.contrib.auth.backends.ModelBackend")
if GPULEDGER_OIDC_ISSUER:
    AUTHENTICATION_BACKENDS.append("accounts.oidc.OidcBackend")

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
                "core.context_processors.site",
            ],
        },
    },
]

DATABASE_URL = env_secret("DATABASE_URL", f"sqlite:///{BASE_DIR / 'gpuledger.sqlite3'}")
try:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL cannot be parsed: {exc}") from exc
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the dashboard read while a collector writes.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
# A read replica of the PostgreSQL database (docs/architecture.md "Scale-out"): page reads (GET
# pages, chart JSON, the read-only API) go to it; writes, transactions, accounts, admin and quota
# edits stay on the primary, and so does a client for GPULEDGER_REPLICA_PIN_SECONDS after a
# request of its wrote (read-your-own-writes). Empty: everything on DATABASE_URL. Migrations run
# only on the primary.
DATABASE_REPLICA_URL = env_secret("DATABASE_REPLICA_URL", "")
GPULEDGER_REPLICA_PIN_SECONDS = env_int("GPULEDGER_REPLICA_PIN_SECONDS", 10, minimum=0)
if DATABASE_REPLICA_URL:
    try:
        DATABASES["replica"] = dj_database_url.parse(DATABASE_REPLICA_URL, conn_max_age=60)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_REPLICA_URL cannot be parsed: {exc}") from exc
    if DATABASES["replica"]["ENGINE"] != DATABASES["default"]["ENGINE"]:
        raise ImproperlyConfigured(
            "DATABASE_REPLICA_URL must be a replica of DATABASE_URL (the same database engine)"
        )
    # Django's test runner mirrors the replica onto the test database instead of creating one.
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
# PostgreSQL's JIT compiles a query's expressions once its estimated cost passes jit_above_cost.
# The dashboard's aggregates over hourly rollups pass it while running in tens of milliseconds, and
# the compilation then costs as much as the query (the busy page's 30-day grouping by workload:
# 22 ms without, 41-49 ms with; bench/RESULTS.md "PostgreSQL connections without JIT"): connections
# turn it off unless GPULEDGER_PG_JIT asks for it.
GPULEDGER_PG_JIT = env_bool("GPULEDGER_PG_JIT", False)
for _database in DATABASES.values():
    if _database["ENGINE"] == "django.db.backends.postgresql" and not GPULEDGER_PG_JIT:
        _options = _database.setdefault("OPTIONS", {})
        _options["options"] = f"{_options.get('options', '')} -c jit=off".strip()
DATABASE_ROUTERS = ["core.dbrouter.ReplicaRouter"]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

# Security headers: on whenever DEBUG is off. TLS is usually terminated by the ingress, so the
# redirect can be switched off there with SECURE_SSL_REDIRECT=false.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
# A request counts as HTTPS by X-Forwarded-Proto only behind a proxy that sets it (and strips
# a client's own); otherwise any client could claim HTTPS.
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https")
    if env_bool("GPULEDGER_TRUST_X_FORWARDED_PROTO", False)
    else None
)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Preload-listing is hard to undo, so it is an explicit opt-in; its reminder is silenced until then.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
# The chargeback index is covering (INCLUDE) on PostgreSQL; SQLite keeps its key columns only.
SILENCED_SYSTEM_CHECKS += ["models.W040"]
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy: every page loads only this site's own files (plotly.js and Swagger UI
# are served from static/). Plotly and Swagger UI set inline styles, hence 'unsafe-inline'
# for styles only; no inline or foreign script runs.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:", "blob:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "worker-src": ["'self'", "blob:"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# The cache holds the API's throttle counters, so every web process must share it: Redis. A
# single-process development server may use CACHE_URL=locmem:// instead.
CACHE_URL = env_secret("CACHE_URL", "redis://127.0.0.1:6379/1")
if CACHE_URL.startswith(("redis://", "rediss://")):
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
    }
elif CACHE_URL.startswith("locmem://"):
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
else:
    raise ImproperlyConfigured(f"CACHE_URL={CACHE_URL!r} must be redis://, rediss:// or locmem://")

# Login lockout (django-axes): after GPULEDGER_LOGIN_FAILURES wrong passwords for one username from
# one address, that pair is locked for GPULEDGER_LOGIN_LOCKOUT_MINUTES; staff unlock it earlier
# in the admin ("Access attempts": delete the row) or with `manage.py axes_reset_username NAME`.
AXES_FAILURE_LIMIT = env_int("GPULEDGER_LOGIN_FAILURES", 5, minimum=1)
GPULEDGER_LOGIN_LOCKOUT_MINUTES = env_int("GPULEDGER_LOGIN_LOCKOUT_MINUTES", 30, minimum=1)
AXES_COOLOFF_TIME = GPULEDGER_LOGIN_LOCKOUT_MINUTES / 60.0
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# ...and a username is locked from every address once its failures from all addresses within
# the lockout period reach this ceiling (config/lockout.py).
GPULEDGER_LOGIN_USERNAME_FAILURES = env_int("GPULEDGER_LOGIN_USERNAME_FAILURES", 20, minimum=1)
AXES_HANDLER = "config.lockout.UsernameCeilingHandler"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "front/locked_out.html"
# Behind the ingress the client address is in X-Forwarded-For; count it only when told to
# (the login lockout, and who may read /metrics: observability/access.py).
GPULEDGER_TRUST_X_FORWARDED_FOR = env_bool("GPULEDGER_TRUST_X_FORWARDED_FOR", False)
AXES_IPWARE_META_PRECEDENCE_ORDER = (
    ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"] if GPULEDGER_TRUST_X_FORWARDED_FOR else ["REMOTE_ADDR"]
)

LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        app: {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False}
        for app in (
            "core",
            "fleet",
            "quotas",
            "ledger",
            "alerts",
            "observability",
            "dashboard",
            "demo",
        )
    },
}

# --- REST API -------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "quotas.api.auth.ApiTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": env_int("API_PAGE_SIZE", 100, minimum=1),
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.UserRateThrottle",
        "rest_framework.throttling.AnonRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "user": env_str("API_THROTTLE_USER", "1200/min"),
        "anon": env_str("API_THROTTLE_ANON", "30/min"),
        "chargeback": env_str("API_THROTTLE_CHARGEBACK", "60/min"),
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Ledger API",
    "DESCRIPTION": "GPU allocation, real utilization, borrowing and chargeback for Kueue fleets.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its Swagger UI page are for signed-in users (sessions or full-scope tokens;
    # a chargeback-scoped token reaches only the chargeback and allocation endpoints).
    "SERVE_PERMISSIONS": [
        "rest_framework.permissions.IsAuthenticated",
        "core.api.TokenScopePermission",
    ],
    # Swagger UI and ReDoc come from the drf-spectacular-sidecar package, never from a CDN
    # (ReDoc's bundle with its one CDN logo address replaced: core.api_docs).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
}

# --- Celery ---------------------------------------------------------------------------------
CELERY_BROKER_URL = env_secret("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = env_secret("CELERY_RESULT_BACKEND", CELERY_BROKER_URL)
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Results name the worker that ran the task and its queue (fleet/routing.py).
CELERY_RESULT_EXTENDED = True
# A queue per cluster (docs/architecture.md "Scale-out"): the clusters named here (comma-
# separated names, or * for every cluster) have their tasks on queue cluster.<name>, served by
# `celery -A config worker -Q cluster.<name>`; the others stay on the default queue (celery).
GPULEDGER_CLUSTER_QUEUES = env_list("GPULEDGER_CLUSTER_QUEUES", [])
for _name in GPULEDGER_CLUSTER_QUEUES:
    if _name != "*" and not re.fullmatch(r"[-a-zA-Z0-9_]+", _name):
        raise ImproperlyConfigured(
            f"GPULEDGER_CLUSTER_QUEUES: {_name!r} is not a cluster name (letters, digits, - _) or *"
        )
CELERY_TASK_ROUTES = ("fleet.routing.route_task",)

# --- GPU Ledger -----------------------------------------------------------------------------
# Default Prometheus and kube context for the cluster that ``manage.py`` creates on first use
# (``GPULEDGER_CLUSTER_NAME``); further clusters are added in the admin.
PROMETHEUS_URL = env_str("PROMETHEUS_URL", "")
if PROMETHEUS_URL and urlsplit(PROMETHEUS_URL).scheme not in {"http", "https"}:
    raise ImproperlyConfigured(f"PROMETHEUS_URL={PROMETHEUS_URL!r} must be an http(s) URL")
PROMETHEUS_TIMEOUT_SECONDS = env_float("PROMETHEUS_TIMEOUT_SECONDS", 30.0)
KUBECONFIG = env_str("KUBECONFIG", "")
# The cluster created on first use reads its API server with the pod's service account (the
# in-cluster deployment, deploy/kubernetes/) instead of a kubeconfig.
GPULEDGER_KUBE_IN_CLUSTER = env_bool("GPULEDGER_KUBE_IN_CLUSTER", False)
GPULEDGER_KUBE_CONTEXT = env_str("GPULEDGER_KUBE_CONTEXT", "")
GPULEDGER_CLUSTER_NAME = env_str("GPULEDGER_CLUSTER_NAME", "default")

# Collection windows are aligned to multiples of this many seconds
# (docs/architecture.md "Time model and storage").
GPULEDGER_COLLECT_SECONDS = env_int("GPULEDGER_COLLECT_SECONDS", 60, minimum=10)
GPULEDGER_SYNC_SECONDS = env_int("GPULEDGER_SYNC_SECONDS", 30, minimum=5)
# A full LIST this often; the WATCH streams changes in between (quotas/tasks.py).
GPULEDGER_RELIST_SECONDS = env_int("GPULEDGER_RELIST_SECONDS", 300, minimum=5)
# A sync's LIST phase (discovery, every LIST, the window's visibility calls) ends by this however
# the API server behaves; past it the run fails and writes nothing. A relist of 50,000 Workloads
# took about 60 s (bench/RESULTS.md). The WATCH after it ends at the next relist tick.
GPULEDGER_SYNC_DEADLINE_SECONDS = env_int("GPULEDGER_SYNC_DEADLINE_SECONDS", 120, minimum=1)
# How far back the collector catches up after an outage.
GPULEDGER_CATCHUP_HOURS = env_int("GPULEDGER_CATCHUP_HOURS", 24, minimum=1)
# A collection run ends by this, before the next beat tick: no window is started too close to it
# (a catch-up goes on at the next run), and a Prometheus call still open at it is cut and fails.
GPULEDGER_COLLECT_DEADLINE_SECONDS = env_int(
    "GPULEDGER_COLLECT_DEADLINE_SECONDS", max(1, GPULEDGER_COLLECT_SECONDS - 10), minimum=1
)
# The hour still being collected is re-rolled at most this often (complete hours always are).
GPULEDGER_ROLLUP_SECONDS = env_int("GPULEDGER_ROLLUP_SECONDS", 300, minimum=0)
# An hour rolled up sooner than this after its end is rolled up once more after it, for the queue
# samples of its last minutes that the Kueue sync writes late (ledger.models.RollupHour).
GPULEDGER_ROLLUP_SETTLE_SECONDS = env_int("GPULEDGER_ROLLUP_SETTLE_SECONDS", 300, minimum=0)
# How often beat rolls up every hour whose rollup misses windows (failed, killed) or is unsettled.
GPULEDGER_ROLLUP_SWEEP_SECONDS = env_int("GPULEDGER_ROLLUP_SWEEP_SECONDS", 300, minimum=10)
# A collection or sync holds its cluster's lease this long, renewed every third of it by a
# heartbeat while the worker lives (fleet/leases.py): a killed worker is taken over within it.
GPULEDGER_LEASE_SECONDS = env_int("GPULEDGER_LEASE_SECONDS", 45, minimum=3)
GPULEDGER_LEASE_HEARTBEAT = env_bool("GPULEDGER_LEASE_HEARTBEAT", True)
GPULEDGER_USAGE_RETENTION_DAYS = env_int("GPULEDGER_USAGE_RETENTION_DAYS", 14, minimum=1)
GPULEDGER_ROLLUP_RETENTION_DAYS = env_int("GPULEDGER_ROLLUP_RETENTION_DAYS", 400, minimum=1)
# Deep backfill (hours older than the usage retention, straight into hourly rollups): Prometheus
# queries in flight at once (per process), GPU series per query (more are split by GPU UUID into
# shards), and processes the hours are dealt to (ledger/deep/workers.py). One process already keeps
# two cores busy (its decoding threads and Prometheus): two on the 2-core bench machine were no
# faster and cost 4-33 % more CPU (bench/RESULTS.md), so more are for machines with more cores.
GPULEDGER_DEEP_BACKFILL_CONCURRENCY = env_int("GPULEDGER_DEEP_BACKFILL_CONCURRENCY", 4, minimum=1)
GPULEDGER_DEEP_BACKFILL_WORKERS = env_int("GPULEDGER_DEEP_BACKFILL_WORKERS", 1, minimum=1)
GPULEDGER_DEEP_BACKFILL_SERIES_PER_QUERY = env_int(
    "GPULEDGER_DEEP_BACKFILL_SERIES_PER_QUERY", 10_000, minimum=1
)
# SM_ACTIVE below this is idle (docs/architecture.md "Figures"); real idle GPUs report a small noise
# floor.
GPULEDGER_IDLE_THRESHOLD = env_float("GPULEDGER_IDLE_THRESHOLD", 0.01)
# My teams lists a holding workload as idle when at least this share of its GPU-hours over the
# range were idle (docs/architecture.md "Figures").
GPULEDGER_IDLE_WORKLOAD_SHARE = env_float("GPULEDGER_IDLE_WORKLOAD_SHARE", 0.5)
if not 0.0 < GPULEDGER_IDLE_WORKLOAD_SHARE <= 1.0:
    raise ImproperlyConfigured("GPULEDGER_IDLE_WORKLOAD_SHARE must be in (0, 1]")
# A page warns when the newest successful collection is older than this.
GPULEDGER_STALE_SECONDS = env_int("GPULEDGER_STALE_SECONDS", 600, minimum=60)
# Labels on ClusterQueues (then namespaces) that name the owning team, first match wins.
GPULEDGER_TEAM_LABELS = env_list("GPULEDGER_TEAM_LABELS", ["gpuledger.io/team", "team"])
# "Busy but not working": GPU_UTIL (0-100) at or above this while SM_ACTIVE is below the next.
GPULEDGER_BUSY_GPU_UTIL = env_float("GPULEDGER_BUSY_GPU_UTIL", 50.0)
GPULEDGER_BUSY_SM_ACTIVE = env_float("GPULEDGER_BUSY_SM_ACTIVE", 0.2)
# Serving: the latency targets a deployment's hours must stay within to count for its throughput
# knee (p95 time to first token, p95 inter-token latency), where the deployment sets none
# (README "Serving: metrics"); 0 judges that latency not at all.
GPULEDGER_SERVING_TTFT_P95_SECONDS = env_float("GPULEDGER_SERVING_TTFT_P95_SECONDS", 2.0)
GPULEDGER_SERVING_ITL_P95_SECONDS = env_float("GPULEDGER_SERVING_ITL_P95_SECONDS", 0.1)
GPULEDGER_CHARGEBACK_MAX_DAYS = env_int("GPULEDGER_CHARGEBACK_MAX_DAYS", 400, minimum=1)
# The longest range the service-level API answers (admissions and queue levels).
GPULEDGER_SERVICE_LEVELS_MAX_DAYS = env_int("GPULEDGER_SERVICE_LEVELS_MAX_DAYS", 400, minimum=1)
# How long a built chargeback report stays in the cache (ledger/chargeback/cache.py; 0: never
# cached). It is found only while its rollups, rate cards and groups are unchanged, so this only
# bounds the room old versions take.
GPULEDGER_CHARGEBACK_CACHE_SECONDS = env_int("GPULEDGER_CHARGEBACK_CACHE_SECONDS", 3600, minimum=0)
GPULEDGER_CURRENCY = env_str("GPULEDGER_CURRENCY", "USD")
# How chargeback prices GPU-hours (README "Chargeback API"): "usage" = allocated GPU-hours × price;
# "quota" = nominal quota hours + borrowed hours at the borrowing price − lent hours at a credit.
GPULEDGER_CHARGEBACK_MODEL = env_str("GPULEDGER_CHARGEBACK_MODEL", "usage")
if GPULEDGER_CHARGEBACK_MODEL not in {"usage", "quota"}:
    raise ImproperlyConfigured(
        f"GPULEDGER_CHARGEBACK_MODEL={GPULEDGER_CHARGEBACK_MODEL!r} must be usage or quota"
    )

# Hoarding alerts (docs/architecture.md "Hoarding alerts"): the global defaults; the admin's alert
# thresholds override them globally or per ClusterQueue, LocalQueue or namespace. The idle threshold
# is GPULEDGER_IDLE_THRESHOLD.
GPULEDGER_ALERT_IDLE_GPU_FRACTION = env_float("GPULEDGER_ALERT_IDLE_GPU_FRACTION", 1.0)
if not 0.0 < GPULEDGER_ALERT_IDLE_GPU_FRACTION <= 1.0:
    raise ImproperlyConfigured("GPULEDGER_ALERT_IDLE_GPU_FRACTION must be in (0, 1]")
GPULEDGER_ALERT_IDLE_WARNING_MINUTES = env_int(
    "GPULEDGER_ALERT_IDLE_WARNING_MINUTES", 60, minimum=1
)
GPULEDGER_ALERT_IDLE_CRITICAL_MINUTES = env_int(
    "GPULEDGER_ALERT_IDLE_CRITICAL_MINUTES", 120, minimum=1
)
GPULEDGER_ALERT_GHOST_MINUTES = env_int("GPULEDGER_ALERT_GHOST_MINUTES", 10, minimum=1)
GPULEDGER_ALERT_BORROWING_MINUTES = env_int("GPULEDGER_ALERT_BORROWING_MINUTES", 30, minimum=1)
GPULEDGER_ALERT_TELEMETRY_MINUTES = env_int("GPULEDGER_ALERT_TELEMETRY_MINUTES", 10, minimum=1)
# Workloads with this label set to "true" are exempt without an exemption row; empty = off.
GPULEDGER_ALERT_EXEMPT_LABEL = env_str(
    "GPULEDGER_ALERT_EXEMPT_LABEL", "gpuledger.io/hoarding-exempt"
)
# Workload owner kinds that count as interactive notebooks (for "notebooks below N GPUs").
GPULEDGER_ALERT_INTERACTIVE_KINDS = env_list(
    "GPULEDGER_ALERT_INTERACTIVE_KINDS", ["Notebook", "StatefulSet", "Pod"]
)
# queue_slo_breached (alerts/slo.py): an episode fires after this many breached days of a
# ClusterQueue's objective; the first evaluation looks this many days back.
GPULEDGER_ALERT_QUEUE_SLO_DAYS = env_int("GPULEDGER_ALERT_QUEUE_SLO_DAYS", 1, minimum=1)
GPULEDGER_ALERT_QUEUE_SLO_LOOKBACK_DAYS = env_int(
    "GPULEDGER_ALERT_QUEUE_SLO_LOOKBACK_DAYS", 7, minimum=1
)
# serving_overprovisioned (alerts/overprovisioned.py), judged per complete UTC day: a day counts
# when the deployment ran below half its knee per replica in most of its judged hours, the knee
# taken over the KNEE_DAYS before the day's end; an episode opens after DAYS such days in a row
# and ends on the first day that does not count. Each evaluation re-reads LOOKBACK_DAYS days.
GPULEDGER_ALERT_SERVING_DAYS = env_int("GPULEDGER_ALERT_SERVING_DAYS", 3, minimum=1)
GPULEDGER_ALERT_SERVING_KNEE_DAYS = env_int("GPULEDGER_ALERT_SERVING_KNEE_DAYS", 14, minimum=1)
GPULEDGER_ALERT_SERVING_LOOKBACK_DAYS = env_int(
    "GPULEDGER_ALERT_SERVING_LOOKBACK_DAYS", 7, minimum=1
)
if GPULEDGER_ALERT_SERVING_LOOKBACK_DAYS < GPULEDGER_ALERT_SERVING_DAYS:
    raise ImproperlyConfigured(
        "GPULEDGER_ALERT_SERVING_LOOKBACK_DAYS must be at least GPULEDGER_ALERT_SERVING_DAYS "
        "(the days in a row that open an episode are read within it)"
    )
# The evaluation task (alerts.tasks.evaluate_alerts) stops taking windows after this many
# seconds and queues the rest; Celery's soft and hard time limits are 30 s and 60 s after it.
GPULEDGER_ALERTS_DEADLINE_SECONDS = env_int("GPULEDGER_ALERTS_DEADLINE_SECONDS", 240, minimum=1)

# --- Alert notifications and remediation (README "Alert notifications", "Remediation") ------
# Links in notifications (email, Slack, webhooks, Alertmanager's generatorURL) start with this.
GPULEDGER_BASE_URL = env_str("GPULEDGER_BASE_URL", "http://127.0.0.1:8000")
if urlsplit(GPULEDGER_BASE_URL).scheme not in {"http", "https"}:
    raise ImproperlyConfigured(f"GPULEDGER_BASE_URL={GPULEDGER_BASE_URL!r} must be an http(s) URL")
# Beat scans the episodes and sends due notifications this often; a run ends by the deadline.
GPULEDGER_NOTIFY_SECONDS = env_int("GPULEDGER_NOTIFY_SECONDS", 60, minimum=10)
GPULEDGER_NOTIFY_DEADLINE_SECONDS = env_int(
    "GPULEDGER_NOTIFY_DEADLINE_SECONDS", max(1, GPULEDGER_NOTIFY_SECONDS - 10), minimum=1
)
# One SMTP session or HTTP POST ends by this.
GPULEDGER_NOTIFY_TIMEOUT_SECONDS = env_int("GPULEDGER_NOTIFY_TIMEOUT_SECONDS", 10, minimum=1)
# A failed delivery is tried again after this, doubled per attempt (at most an hour), up to the
# maximum number of attempts; then it stays in the delivery log as failed.
GPULEDGER_NOTIFY_RETRY_SECONDS = env_int("GPULEDGER_NOTIFY_RETRY_SECONDS", 60, minimum=1)
GPULEDGER_NOTIFY_MAX_ATTEMPTS = env_int("GPULEDGER_NOTIFY_MAX_ATTEMPTS", 10, minimum=1)
# Live episodes that resolved within this many hours before anyone heard of them (a worker outage)
# are still announced (fired, then resolved); older ones are history.
GPULEDGER_NOTIFY_LOOKBACK_HOURS = env_int("GPULEDGER_NOTIFY_LOOKBACK_HOURS", 24, minimum=1)
# Receivers are never sent to loopback, link-local, private, multicast or metadata addresses;
# these networks (CIDRs, comma-separated) are allowed anyway, e.g. an in-house chat server.
GPULEDGER_NOTIFY_ALLOWED_NETWORKS = env_list("GPULEDGER_NOTIFY_ALLOWED_NETWORKS", [])
for _cidr in GPULEDGER_NOTIFY_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_cidr, strict=False)
    except ValueError as _exc:
        raise ImproperlyConfigured(
            f"GPULEDGER_NOTIFY_ALLOWED_NETWORKS: {_cidr!r} is not a network ({_exc})"
        ) from _exc
# Alertmanager: open alerts re-sent this often, with endsAt this many intervals ahead.
GPULEDGER_ALERTMANAGER_RESEND_SECONDS = env_int(
    "GPULEDGER_ALERTMANAGER_RESEND_SECONDS", 60, minimum=10
)
GPULEDGER_ALERTMANAGER_RESENDS_AHEAD = env_int("GPULEDGER_ALERTMANAGER_RESENDS_AHEAD", 3, minimum=2)
# Beat applies the ClusterQueues' remediation policies this often.
GPULEDGER_REMEDIATION_SECONDS = env_int("GPULEDGER_REMEDIATION_SECONDS", 60, minimum=10)

# --- Email (notification receivers, quota request decisions to team leads) --------------------
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured("EMAIL_USE_TLS and EMAIL_USE_SSL are exclusive: set one")
# Mail sent outside the notification runs (quota decisions); notifications bound each SMTP
# session by GPULEDGER_NOTIFY_TIMEOUT_SECONDS or their run's deadline instead.
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "GPU Ledger <gpu-ledger@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL

CELERY_BEAT_SCHEDULE = {
    "collect-metrics": {
        "task": "ledger.tasks.collect_metrics_all",
        "schedule": float(GPULEDGER_COLLECT_SECONDS),
        "options": {"expires": float(GPULEDGER_COLLECT_SECONDS)},
    },
    "sync-clusters": {
        "task": "quotas.tasks.sync_clusters_all",
        "schedule": float(GPULEDGER_SYNC_SECONDS),
        "options": {"expires": float(GPULEDGER_SYNC_SECONDS)},
    },
    "roll-up-dirty-hours": {
        "task": "ledger.tasks.roll_up_dirty_hours",
        "schedule": float(GPULEDGER_ROLLUP_SWEEP_SECONDS),
        "options": {"expires": float(GPULEDGER_ROLLUP_SWEEP_SECONDS)},
    },
    "prune-usage": {
        "task": "ledger.tasks.prune_usage",
        "schedule": 3600.0,
        "options": {"expires": 3600.0},
    },
    # PostgreSQL: the usage facts' daily partitions, a few days ahead (ledger.partitions).
    "create-usage-partitions": {
        "task": "ledger.tasks.create_usage_partitions",
        "schedule": 3600.0,
        "options": {"expires": 3600.0},
    },
    "order-usage-partitions": {
        "task": "ledger.tasks.order_usage_partitions",
        "schedule": 3600.0,
        "options": {"expires": 3600.0},
    },
    "send-notifications": {
        "task": "notifications.tasks.send_notifications",
        "schedule": float(GPULEDGER_NOTIFY_SECONDS),
        "options": {"expires": float(GPULEDGER_NOTIFY_SECONDS)},
    },
    "remediate-workloads": {
        "task": "remediation.tasks.remediate_workloads",
        "schedule": float(GPULEDGER_REMEDIATION_SECONDS),
        "options": {"expires": float(GPULEDGER_REMEDIATION_SECONDS)},
    },
    # Serving metrics per workload-hour (serving.collector): each tick collects the complete
    # hours not collected yet, so an hour is in the database a few minutes after it ends.
    "collect-serving-hours": {
        "task": "serving.tasks.collect_serving_hours",
        "schedule": 300.0,
        "options": {"expires": 300.0},
    },
    # Queue SLOs are judged per complete UTC day; hourly picks up a day soon after it ends.
    "evaluate-queue-slos": {
        "task": "alerts.tasks.evaluate_queue_slos",
        "schedule": 3600.0,
        "options": {"expires": 3600.0},
    },
    # Over-provisioned serving deployments, per complete UTC day from the serving hours: hourly
    # picks up a day soon after its last hour is collected; its own task, out of the collector.
    "evaluate-serving-overprovisioned": {
        "task": "alerts.tasks.evaluate_serving_overprovisioned",
        "schedule": 3600.0,
        "options": {"expires": 3600.0},
    },
}
# Members of this Django group see every team's detail and chargeback (finance, auditors).
GPULEDGER_FINANCE_GROUP = env_str("GPULEDGER_FINANCE_GROUP", "finance")
# What a team lead sees of other teams (quotas/access.py): "private" (default), only fleet
# totals and anonymised cohort members; "public", every team's figures (organisations that want
# transparency). Staff and the finance group see everything either way.
GPULEDGER_TEAM_VISIBILITY = env_str("GPULEDGER_TEAM_VISIBILITY", "private").strip().lower()
if GPULEDGER_TEAM_VISIBILITY not in ("private", "public"):
    raise ImproperlyConfigured(
        f"GPULEDGER_TEAM_VISIBILITY={GPULEDGER_TEAM_VISIBILITY!r} must be private or public"
    )


def quantity_setting(name: str, text: str) -> int:
    """A positive Kubernetes quantity setting ("64Pi", "1E") as a whole number of units."""
    from core.quantity import parse_quantity

    try:
        amount = parse_quantity(text)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={text!r} is not a Kubernetes quantity") from None
    if not 1 <= amount <= 2**63 - 1:
        raise ImproperlyConfigured(f"{name}={text!r} must be from 1 to 2^63-1")
    return int(amount)


# Plausibility ceilings of a quota typed in the API or a quota form (core/quantity.py
# quota_quantity): a larger value is refused with an error naming the field. GPUs (any resource
# naming "gpu" or a MIG profile) and CPU cores are counts; memory (and hugepages) and every other
# resource take a quantity.
GPULEDGER_QUOTA_MAX_GPUS = env_int("GPULEDGER_QUOTA_MAX_GPUS", 100_000, minimum=1)
GPULEDGER_QUOTA_MAX_CPUS = env_int("GPULEDGER_QUOTA_MAX_CPUS", 10_000_000, minimum=1)
GPULEDGER_QUOTA_MAX_MEMORY = quantity_setting(
    "GPULEDGER_QUOTA_MAX_MEMORY", env_str("GPULEDGER_QUOTA_MAX_MEMORY", "64Pi")
)
GPULEDGER_QUOTA_MAX_OTHER = quantity_setting(
    "GPULEDGER_QUOTA_MAX_OTHER", env_str("GPULEDGER_QUOTA_MAX_OTHER", "1E")
)

# --- The product's own metrics (README "Metrics") --------------------------------------------
# /metrics answers loopback and signed-in staff with no configuration; anyone else sends this
# bearer token (empty: no token accepted) or scrapes from one of these networks (CIDRs,
# comma-separated).
GPULEDGER_METRICS_TOKEN = env_secret("GPULEDGER_METRICS_TOKEN", "")
GPULEDGER_METRICS_ALLOWED_NETWORKS = env_list("GPULEDGER_METRICS_ALLOWED_NETWORKS", [])
for _cidr in GPULEDGER_METRICS_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_cidr, strict=False)
    except ValueError as _exc:
        raise ImproperlyConfigured(
            f"GPULEDGER_METRICS_ALLOWED_NETWORKS: {_cidr!r} is not a network ({_exc})"
        ) from _exc
# Runs, failures and relists are counted over this many seconds before the scrape.
GPULEDGER_METRICS_LOOKBACK_SECONDS = env_int("GPULEDGER_METRICS_LOOKBACK_SECONDS", 3600, minimum=60)
# Label cardinality: per cluster, the teams and ClusterQueues holding the most GPUs get a series
# of their own; the rest are summed under "(other)".
GPULEDGER_METRICS_MAX_TEAMS = env_int("GPULEDGER_METRICS_MAX_TEAMS", 50, minimum=1)
GPULEDGER_METRICS_MAX_CLUSTER_QUEUES = env_int(
    "GPULEDGER_METRICS_MAX_CLUSTER_QUEUES", 100, minimum=1
)
# The Celery queue lengths are read from the broker with this timeout (seconds).
GPULEDGER_METRICS_BROKER_TIMEOUT_SECONDS = env_float(
    "GPULEDGER_METRICS_BROKER_TIMEOUT_SECONDS", 0.5
)
# Prometheus scrapes over plain HTTP inside the cluster: /metrics is never redirected to HTTPS.
SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
