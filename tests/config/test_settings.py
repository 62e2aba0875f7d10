"""The settings refuse what is unsafe in production and default to safe values.

Each case imports ``config.settings`` in a fresh interpreter with a controlled environment, so
the process's own test settings do not leak in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL_KEY = "k" * 50
PROBE = (
    "import django.conf, config.settings as s; "
    "print(s.DEBUG, s.CACHES['default']['BACKEND'], s.SESSION_COOKIE_SECURE)"
)


def load_settings(probe: str = PROBE, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        key: value
        for key, value in os.environ.items()
        if key
        not in {
            "DEBUG",
            "SECRET_KEY",
            "SECRET_KEY_FILE",
            "CACHE_URL",
            "DJANGO_SETTINGS_MODULE",
            "GPULEDGER_PG_JIT",
        }
    }
    return subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_debug_is_off_when_unset_and_a_secret_key_is_required():
    result = load_settings()

    assert result.returncode != 0
    assert "SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off" in result.stderr


@pytest.mark.parametrize("key", ["change-me", "change-me-in-env", "short-but-not-a-placeholder"])
def test_a_placeholder_or_short_secret_key_is_refused_in_production(key):
    result = load_settings(SECRET_KEY=key)

    assert result.returncode != 0
    assert "SECRET_KEY is a placeholder or shorter than 32 characters" in result.stderr


def test_production_defaults_are_secure_and_share_the_cache_through_redis():
    result = load_settings(SECRET_KEY=REAL_KEY)

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "False",
        "django.core.cache.backends.redis.RedisCache",
        "True",
    ]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, {"default": "-c jit=off", "replica": "-c jit=off"}),
        ({"GPULEDGER_PG_JIT": "true"}, {"default": "", "replica": ""}),
    ],
)
def test_postgresql_connections_turn_jit_off_unless_asked(env, expected):
    result = load_settings(
        "import config.settings as s; "
        "print(*(f\"{a}={d.get('OPTIONS', {}).get('options', '')}\" for a, d in "
        "s.DATABASES.items()), sep='|')",
        SECRET_KEY=REAL_KEY,
        DATABASE_URL="postgres://ledger@127.0.0.1:5432/ledger",
        DATABASE_REPLICA_URL="postgres://ledger@127.0.0.1:5433/ledger",
        **env,
    )

    assert result.returncode == 0, result.stderr
    assert dict(part.split("=", 1) for part in result.stdout.strip().split("|")) == expected


def test_sqlite_connections_get_no_postgresql_options():
    result = load_settings(
        "import config.settings as s; print(s.DATABASES['default']['OPTIONS'].get('options'))",
        SECRET_KEY=REAL_KEY,
        DATABASE_URL="sqlite:///ledger.sqlite3",
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "None"


def test_a_development_server_without_a_key_gets_a_random_one():
    keys = set()
    for _ in range(2):
        result = subprocess.run(
            [sys.executable, "-c", "import config.settings as s; print(s.SECRET_KEY)"],
            cwd=ROOT,
            env={
                **{
                    k: v
                    for k, v in os.environ.items()
                    if k not in {"SECRET_KEY", "SECRET_KEY_FILE"}
                },
                "DEBUG": "true",
            },
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        keys.add(result.stdout.strip())

    assert len(keys) == 2
    assert all(len(key) >= 50 for key in keys)


def test_an_unknown_cache_url_is_a_clear_error():
    result = load_settings(SECRET_KEY=REAL_KEY, CACHE_URL="memcached://x")

    assert result.returncode != 0
    assert "CACHE_URL='memcached://x' must be redis://, rediss:// or locmem://" in result.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lots", "GPULEDGER_QUOTA_MAX_MEMORY='lots' is not a Kubernetes quantity"),
        ("０", "GPULEDGER_QUOTA_MAX_MEMORY='０' is not a Kubernetes quantity"),
        ("0", "GPULEDGER_QUOTA_MAX_MEMORY='0' must be from 1 to 2^63-1"),
        ("10Ei", "GPULEDGER_QUOTA_MAX_MEMORY='10Ei' must be from 1 to 2^63-1"),
    ],
)
def test_a_bad_quota_ceiling_is_a_clear_error(value, message):
    result = load_settings(SECRET_KEY=REAL_KEY, GPULEDGER_QUOTA_MAX_MEMORY=value)

    assert result.returncode != 0
    assert message in result.stderr
