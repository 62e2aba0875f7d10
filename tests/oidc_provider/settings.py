"""Settings of the test OpenID Connect provider (not GPU Ledger's): env OIDC_TEST_PROVIDER_DB
(its SQLite file) and OIDC_TEST_PROVIDER_URL (its own address, the issuer's base)."""

import os
from pathlib import Path

SECRET_KEY = "oidc-test-provider-only-" + "x" * 40
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "tests.oidc_provider.urls"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oidc_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("OIDC_TEST_PROVIDER_DB", "oidc-test-provider.sqlite3"),
    }
}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "/accounts/login/"
# Both servers run on loopback; cookies do not tell ports apart.
SESSION_COOKIE_NAME = "provider_sessionid"
CSRF_COOKIE_NAME = "provider_csrftoken"
SITE_URL = os.environ.get("OIDC_TEST_PROVIDER_URL", "http://127.0.0.1:8800")
OIDC_USERINFO = "tests.oidc_provider.claims.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "tests.oidc_provider.claims.GroupsScopeClaims"
OIDC_IDTOKEN_EXPIRE = 600
LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"oidc_provider": {"handlers": ["console"], "level": "DEBUG"}},
}
