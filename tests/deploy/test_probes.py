"""The probes the manifests use: /healthz (liveness: the process answers) and /readyz
(readiness: the database answers), served by gunicorn as in the pod."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.deploy.rendering import ROOT, one, render


@pytest.mark.django_db
def test_readyz_is_ok_when_the_database_answers(client) -> None:
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_probes_answer_get_only(client) -> None:
    assert client.post("/readyz").status_code == 405
    assert client.post("/healthz").status_code == 405


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def gunicorn(database_url: str) -> Iterator[str]:
    """gunicorn on a loopback port with the production settings (DEBUG off) and this database."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        SECRET_KEY=secrets.token_urlsafe(50),
        DATABASE_URL=database_url,
        ALLOWED_HOSTS="127.0.0.1",
        SECURE_SSL_REDIRECT="false",
        CACHE_URL="locmem://",
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    output = process.stdout.read().decode() if process.stdout else ""
                    pytest.fail(f"gunicorn did not start: {output[-3000:]}")
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def live_database(tmp_path: Path) -> str:
    """The database the tests run on when it is PostgreSQL; else a fresh SQLite file."""
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith("postgres") else f"sqlite:///{tmp_path / 'ready.sqlite3'}"


@pytest.mark.integration
def test_gunicorn_is_ready_when_its_database_answers(tmp_path: Path) -> None:
    with gunicorn(live_database(tmp_path)) as base:
        status, content_type, body = get(f"{base}/readyz")
        assert (status, content_type, json.loads(body)) == (
            200,
            "application/json",
            {"status": "ok"},
        )


@pytest.mark.integration
@pytest.mark.parametrize(
    "dead",
    [
        pytest.param(
            lambda tmp: f"postgres://gpuledger:pw@127.0.0.1:{free_port()}/gpuledger",
            id="postgres-refused",
        ),
        pytest.param(
            lambda tmp: f"sqlite:///{tmp / 'no-such-dir' / 'db.sqlite3'}", id="sqlite-unopenable"
        ),
    ],
)
def test_without_its_database_gunicorn_is_alive_but_not_ready(tmp_path: Path, dead) -> None:
    with gunicorn(dead(tmp_path)) as base:
        ready = get(f"{base}/readyz")
        alive = get(f"{base}/healthz")

    status, content_type, body = ready
    assert status == 503
    assert content_type == "application/json"
    # A short reason, not the error's text (host names, paths) nor a traceback.
    assert json.loads(body) == {"status": "unavailable", "reason": "database: OperationalError"}
    assert alive[0] == 200 and json.loads(alive[2]) == {"status": "ok"}


@pytest.mark.integration
def test_the_init_containers_check_waits_until_the_jobs_migrate_ran(tmp_path: Path) -> None:
    # The exact commands of the rendered Job and init containers, on a fresh database.
    objects = render("read-only")
    job = one(objects, "Job", "gpu-ledger-migrate")["spec"]["template"]["spec"]
    web = one(objects, "Deployment", "gpu-ledger-web")["spec"]["template"]["spec"]
    [migrate] = [c["command"] for c in job["containers"]]
    [check] = [c["command"] for c in web["initContainers"]]
    env = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        SECRET_KEY=secrets.token_urlsafe(50),
        DATABASE_URL=f"sqlite:///{tmp_path / 'fresh.sqlite3'}",
        CACHE_URL="locmem://",
    )

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        assert command[0] == "python"
        return subprocess.run(
            [sys.executable, *command[1:]],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    assert run(check).returncode != 0, "the check passed on a database never migrated"
    assert run(migrate).returncode == 0
    after = run(check)
    assert after.returncode == 0, after.stdout + after.stderr
