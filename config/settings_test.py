"""Test settings: the base settings with what tests need overridden, nothing else."""

import os

# Settings are read as for a development server (plain HTTP, no HSTS or secure-only cookies);
# pytest-django still runs each test with DEBUG off. `check --deploy` in .ci/run covers the
# production settings, and tests/config/test_settings.py the defaults.
os.environ.setdefault("DEBUG", "true")
os.environ.setdefault("SECRET_KEY", "tests-only-" + "x" * 40)
# One process per test run: the throttle counters need no sharing across processes here.
os.environ.setdefault("CACHE_URL", "locmem://")

from config.settings import *  # noqa: E402, F403
from config.settings import env_bool, env_str  # noqa: E402

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Tests hit the API in tight loops; throttling has its own test that sets rates explicitly.
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"user": None, "anon": None}}  # noqa: F405
# Integration tests that need a broker use their own Redis database number.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Tests check rollups right after each collection; the throttle has its own test.
GPULEDGER_ROLLUP_SECONDS = 0
# Serve static files from the finders: tests never run collectstatic.
WHITENOISE_AUTOREFRESH = True
WHITENOISE_USE_FINDERS = True

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file rather than :memory:, so the live server's request threads get connections of their
    # own: concurrent chart requests sharing the one in-memory connection can deadlock.
    import os
    import tempfile

    DATABASES["default"]["TEST"] = {  # noqa: F405
        "NAME": os.path.join(tempfile.gettempdir(), f"gpuledger-test-{os.getpid()}.sqlite3")
    }
    # A test database is thrown away: no fsync at each commit (WAL kept for the live server's
    # concurrent readers).
    DATABASES["default"]["OPTIONS"] = {  # noqa: F405
        **DATABASES["default"]["OPTIONS"],  # noqa: F405
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;",
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    # Likewise on PostgreSQL: a commit (the transactional tests' flushes, the migrations that
    # build each worker's test database) does not wait for the WAL to reach the disk.
    _options = DATABASES["default"].setdefault("OPTIONS", {})  # noqa: F405
    _options["options"] = f"{_options.get('options', '')} -c synchronous_commit=off".strip()

# Tests run inside a transaction that a heartbeat thread's own connection cannot see (and on
# SQLite it would wait on the test's write lock): leases are renewed by the worker itself here,
# and tests/fleet/test_leases.py switches the heartbeat on where it is the subject.
GPULEDGER_LEASE_HEARTBEAT = env_bool("GPULEDGER_LEASE_HEARTBEAT", False)
