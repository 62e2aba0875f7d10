"""A real Prometheus Alertmanager for tests: start on a free loopback port, read alerts, stop.

``AlertmanagerServer`` runs Debian's ``prometheus-alertmanager`` (0.25) with a minimal
configuration (one receiver that sends nothing), a temporary storage path and clustering off
(``--cluster.listen-address=``), so it opens no port but its API on 127.0.0.1. A missing binary
skips the test, or fails it when ``CI`` is set (integration tests never skip in CI).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.prometheus_server import (
    LOOPBACK,
    READY_TIMEOUT_SECONDS,
    free_port,
    in_ci,
    launch,
    wait_ready,
)

BINARY = "prometheus-alertmanager"
CONFIG = """\
route:
  receiver: blackhole
  group_wait: 1s
  group_interval: 1s
receivers:
  - name: blackhole
"""


def require_alertmanager() -> str:
    """Path of the Alertmanager binary; skip without it, but fail under CI."""
    path = shutil.which(BINARY) or (
        f"/usr/bin/{BINARY}" if Path(f"/usr/bin/{BINARY}").exists() else None
    )
    if path:
        return path
    message = (
        f"{BINARY} is not installed "
        "(apt-get install -y --no-install-recommends prometheus-alertmanager)"
    )
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)
    raise AssertionError("unreachable")


class AlertmanagerServer:
    """One ``prometheus-alertmanager`` process on a free loopback port."""

    def __init__(self) -> None:
        self.binary = require_alertmanager()
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self._work = Path(tempfile.mkdtemp(prefix="gl-am-"))
        self.config_file = self._work / "alertmanager.yml"
        self.log_file = self._work / "alertmanager.log"
        self.config_file.write_text(CONFIG)
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> AlertmanagerServer:
        self._process = launch(
            [
                self.binary,
                f"--config.file={self.config_file}",
                f"--storage.path={self._work / 'data'}",
                f"--web.listen-address={LOOPBACK}:{self.port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            self.log_file,
        )
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        wait_ready(self._process, self.url, self.log_file, "alertmanager", timeout)

    def alerts(self, **filters: str) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts``: by default the active, unsilenced, uninhibited ones."""
        answer = requests.get(f"{self.url}/api/v2/alerts", params=filters, timeout=5)
        answer.raise_for_status()
        result: list[dict[str, Any]] = answer.json()
        return result

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=5)
        self._process = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self._work, ignore_errors=True)

    def __enter__(self) -> AlertmanagerServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()
