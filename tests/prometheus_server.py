"""A real Prometheus for tests and benchmarks: start, backfill, scrape, stop.

- ``require_binary`` finds ``prometheus`` / ``promtool``; a missing binary skips the test, or fails
  it when ``CI`` is set (integration tests never skip in CI).
- ``OpenMetricsWriter`` writes backfill files the way ``promtool tsdb create-blocks-from
  openmetrics`` wants them: timestamps in seconds, one ``# TYPE`` per family, ``# EOF`` at the end.
- ``create_blocks`` imports such a file into a TSDB directory (``--max-block-duration=24h``, 3x
  faster than the default). Prometheus compacts imported blocks in place about a minute after it
  starts, so keep the imported directory pristine and start servers on copies (``copy_tsdb``).
- ``PrometheusServer`` runs the binary on a free loopback port with long retention (retention
  counts from the newest block, and backfilled data is old); callers query with an explicit time.
  ``remote_write_receiver=True`` also accepts samples on ``/api/v1/write``.
- ``MetricsExporter`` serves a text exposition (e.g. ``tests/fixtures/dcgm/exporter-metrics.txt``)
  on loopback for Prometheus to scrape.
- ``StuckPrometheus`` answers the query API with empty results on loopback, and can be told to
  answer some queries late, never, or one byte at a time (the upstreams deadlines are for).
"""

from __future__ import annotations

import http.server
import json
import math
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
import requests

from tests.http_serving import serving_thread

LOOPBACK = "127.0.0.1"
READY_TIMEOUT_SECONDS = 30.0


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_binary(name: str) -> str:
    """Path of an installed binary; skip without it, but fail under CI."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if path:
        return path
    message = f"{name} is not installed (apt-get install -y --no-install-recommends prometheus)"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)
    raise AssertionError("unreachable")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_labels(labels: Mapping[str, str]) -> str:
    return ",".join(f'{name}="{_escape(str(value))}"' for name, value in labels.items())


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class OpenMetricsWriter:
    """Streams families of gauge samples to an OpenMetrics file for ``promtool`` backfill.

    Families must be written one at a time (``family`` then its ``sample`` calls); within a family
    series may interleave, since promtool sorts samples into blocks itself.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("w", encoding="utf-8", buffering=1 << 20)
        self._families: set[str] = set()
        self._current = ""
        self.samples = 0

    def family(self, name: str, kind: str = "gauge") -> None:
        if name in self._families:
            raise ValueError(f"family {name} written twice: OpenMetrics needs it contiguous")
        self._families.add(name)
        self._current = name
        self._file.write(f"# TYPE {name} {kind}\n")

    def sample(self, labels: Mapping[str, str], value: float, timestamp: float) -> None:
        self._file.write(
            f"{self._current}{{{format_labels(labels)}}} {format_value(value)} {timestamp:.3f}\n"
        )
        self.samples += 1

    def lines(self, text: str, count: int) -> None:
        """Pre-formatted sample lines of the current family (fast path for big benchmarks)."""
        self._file.write(text)
        self.samples += count

    def close(self) -> None:
        self._file.write("# EOF\n")
        self._file.close()

    def __enter__(self) -> OpenMetricsWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def create_blocks(openmetrics: Path, tsdb_dir: Path) -> None:
    """Import an OpenMetrics file into TSDB blocks under ``tsdb_dir``."""
    promtool = require_binary("promtool")
    tsdb_dir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=24h",
            str(openmetrics),
            str(tsdb_dir),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"promtool failed ({result.returncode}): {result.stderr[-2000:]}")


GaugeSample = tuple[Mapping[str, str], float, float]  # labels, value, Unix timestamp


def write_families(path: Path, families: Mapping[str, Iterable[GaugeSample]]) -> None:
    """Gauge families (metric name -> its samples) as one OpenMetrics backfill file."""
    with OpenMetricsWriter(path) as out:
        for metric, samples in families.items():
            out.family(metric)
            for labels, value, at in samples:
                out.sample(labels, value, at)


def import_each(
    tmp_path_factory: Any, sources: Iterable[str], write: Callable[[str, Path], None]
) -> dict[str, Path]:
    """Per source, ``write(source, path)``'s OpenMetrics imported into pristine TSDB blocks
    (a module fixture's work: copy them with ``copy_tsdb`` before serving, since Prometheus
    compacts imported blocks in place)."""
    found = {}
    for source in sources:
        work = tmp_path_factory.mktemp(f"{source}-history")
        write(source, work / "history.om")
        create_blocks(work / "history.om", work / "pristine")
        found[source] = work / "pristine"
    return found


def copy_tsdb(pristine: Path, target: Path) -> Path:
    shutil.copytree(pristine, target)
    return target


def launch(command: list[str], log_file: Path) -> subprocess.Popen[bytes]:
    """Start a Prometheus-family binary with its output appended to ``log_file``."""
    with log_file.open("ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL)


def wait_ready(
    process: subprocess.Popen[bytes] | None,
    url: str,
    log_file: Path,
    name: str,
    timeout: float = READY_TIMEOUT_SECONDS,
) -> None:
    """Poll ``url``/-/ready until it answers 200; fail with the log if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{name} exited: {log_file.read_text()[-2000:]}")
        try:
            if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{name} not ready after {timeout}s: {log_file.read_text()}")


class PrometheusServer:
    """One ``prometheus`` process on a free loopback port."""

    def __init__(
        self,
        tsdb_dir: Path,
        *,
        scrape_targets: Iterable[tuple[str, str, bool]] = (),
        scrape_interval: str = "1s",
        port: int | None = None,
        remote_write_receiver: bool = False,
    ) -> None:
        self.binary = require_binary("prometheus")
        self.remote_write_receiver = remote_write_receiver
        self.tsdb_dir = tsdb_dir
        self.port = port or free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self._work = Path(tempfile.mkdtemp(prefix="gl-prom-"))
        self.config_file = self._work / "prometheus.yml"
        self.log_file = self._work / "prometheus.log"
        self.config_file.write_text(self._config(list(scrape_targets), scrape_interval))
        self._process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def _config(targets: list[tuple[str, str, bool]], interval: str) -> str:
        if not targets:
            return "global:\n  scrape_interval: 1m\n"
        lines = [
            "global:",
            f"  scrape_interval: {interval}",
            f"  scrape_timeout: {interval}",
            "scrape_configs:",
        ]
        for job, address, honor_labels in targets:
            lines += [
                f"  - job_name: {job}",
                f"    honor_labels: {'true' if honor_labels else 'false'}",
                "    static_configs:",
                f"      - targets: ['{address}']",
            ]
        return "\n".join(lines) + "\n"

    def start(self, ready_timeout: float = READY_TIMEOUT_SECONDS) -> PrometheusServer:
        self._process = launch(
            [
                self.binary,
                f"--config.file={self.config_file}",
                f"--storage.tsdb.path={self.tsdb_dir}",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address={LOOPBACK}:{self.port}",
                "--log.level=warn",
                *(["--web.enable-remote-write-receiver"] if self.remote_write_receiver else []),
            ],
            self.log_file,
        )
        self.wait_ready(ready_timeout)
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        wait_ready(self._process, self.url, self.log_file, "prometheus", timeout)

    def wait_for_series(self, promql: str, timeout: float = 20.0) -> None:
        """Poll until ``promql`` returns something (a first scrape takes ~5-6 s to show)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=2)
            if answer.ok and answer.json()["data"]["result"]:
                return
            time.sleep(0.25)
        raise RuntimeError(f"{promql} still empty after {timeout}s")

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

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self._work, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()


class MetricsExporter:
    """Serves a fixed text exposition at ``/metrics`` on a free loopback port."""

    def __init__(self, text: str) -> None:
        body = text.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self._server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.address = f"{LOOPBACK}:{self._server.server_address[1]}"
        self._thread = serving_thread(self._server)

    def start(self) -> MetricsExporter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class StuckPrometheus:
    """A loopback stand-in for the Prometheus query API that can be slow in every way.

    Every instant or range query gets an empty success answer of the right type, after
    ``delay`` seconds. ``stick(text, hang=True)`` never answers queries whose PromQL contains
    ``text`` (until the client hangs up); ``stick(text, drip_seconds=s)`` sends their answer one
    byte every ``s`` seconds, headers included.
    """

    def __init__(self) -> None:
        self.delay = 0.0
        self.queries: list[str] = []
        self._stuck: list[tuple[str, bool, float]] = []
        self._closing = threading.Event()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                query = (form.get("query") or [""])[0]
                fake.queries.append(query)
                kind = "matrix" if self.path.endswith("/query_range") else "vector"
                body = json.dumps(
                    {"status": "success", "data": {"resultType": kind, "result": []}}
                ).encode()
                hang, drip = fake._behaviour(query)
                if hang:
                    fake._closing.wait()  # the client hangs up, or the server stops
                    return
                if fake._closing.wait(fake.delay):
                    return
                head = (
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n"
                ).encode()
                if not drip:
                    self.wfile.write(head + body)
                    return
                self.close_connection = True
                for index in range(len(head + body)):
                    self.wfile.write((head + body)[index : index + 1])
                    self.wfile.flush()
                    if fake._closing.wait(drip):
                        return

            def log_message(self, *args: object) -> None:
                return

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                return  # a client that hung up on a dripping answer

        self.server = Server((LOOPBACK, 0), Handler)
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}"
        self._thread = serving_thread(self.server)
        self._thread.start()

    def stick(self, text: str, *, hang: bool = False, drip_seconds: float = 0.0) -> None:
        self._stuck.append((text, hang, drip_seconds))

    def _behaviour(self, query: str) -> tuple[bool, float]:
        for text, hang, drip in self._stuck:
            if text in query:
                return hang, drip
        return False, 0.0

    def close(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()
