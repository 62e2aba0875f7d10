"""core.deadlines: a whole HTTP exchange ends by its deadline, over plain HTTP and TLS."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from core.deadlines import Deadline, DeadlineExceeded, cut_at, guard_pool_manager

BODY = b'{"kind":"WorkloadList","items":[]}'
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
    + BODY
)


class RawServer:
    """A loopback server that answers each request ``ANSWER`` at once, a byte every ``drip``
    seconds, or never (``hang``); optionally over TLS. Counts the connections it accepts."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.drip = 0.0
        self.hang = False
        self.connections = 0
        self._stop = threading.Event()
        self._context = context
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"{'https' if self._context else 'http'}://127.0.0.1:{self.port}/"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            if self._context is not None:
                conn = self._context.wrap_socket(conn, server_side=True)
            while not self._stop.is_set():
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    request += chunk
                if self.hang:
                    self._stop.wait()
                    return
                if not self.drip:
                    conn.sendall(ANSWER)
                    continue
                for index in range(len(ANSWER)):
                    conn.sendall(ANSWER[index : index + 1])
                    if self._stop.wait(self.drip):
                        return
        except OSError:
            return  # the client hung up
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    assert openssl, "openssl is needed to make a test certificate"
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture(params=["http", "https"])
def server(request, certificate) -> Iterator[RawServer]:
    context = None
    if request.param == "https":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*certificate)
    raw = RawServer(context)
    yield raw
    raw.close()


@pytest.fixture
def manager(certificate) -> urllib3.PoolManager:
    return guard_pool_manager(
        urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(certificate[0]), retries=3)
    )


def get(manager: urllib3.PoolManager, url: str, deadline: Deadline) -> tuple[bytes, bool, float]:
    started = time.monotonic()
    with cut_at(deadline) as cut:
        try:
            with cut.attaching():
                response = manager.request("GET", url, preload_content=False, timeout=30)
            data = response.data
            response.release_conn()
        except Exception:
            return b"", cut.fired, time.monotonic() - started
    return data, cut.fired, time.monotonic() - started


def test_a_prompt_answer_is_read_whole(server, manager):
    data, fired, _ = get(manager, server.url, Deadline(5, "test"))

    assert data == BODY
    assert not fired


def test_an_answer_dripped_a_byte_at_a_time_is_cut_at_the_deadline(server, manager):
    # Each byte comes well inside the 30 s read timeout; the whole answer would take 20 s.
    server.drip = 0.2

    data, fired, elapsed = get(manager, server.url, Deadline(1, "test"))

    assert fired
    assert data == b""
    assert elapsed < 1.5


def test_a_cut_request_is_not_retried_after_its_deadline(server, manager):
    server.hang = True

    with cut_at(Deadline(0.5, "the test deadline")) as cut:
        with pytest.raises(DeadlineExceeded, match="the test deadline of 0.5 s passed"):
            with cut.attaching():
                manager.request("GET", server.url, timeout=30)

    # urllib3 was told to retry 3 times; after the cut it may not connect again.
    assert server.connections == 1


def test_a_connection_cut_in_one_exchange_serves_the_next(server, manager):
    server.drip = 0.05
    get(manager, server.url, Deadline(0.3, "test"))
    server.drip = 0.0

    data, fired, _ = get(manager, server.url, Deadline(5, "test"))

    assert data == BODY
    assert not fired


def test_another_threads_request_is_not_cut(server, manager):
    # One thread's exchange is cut while another reads its own (slower, within its deadline).
    server.drip = 0.01
    results: dict[str, tuple[bytes, bool, float]] = {}
    slow = threading.Thread(
        target=lambda: results.update(slow=get(manager, server.url, Deadline(10, "slow")))
    )
    slow.start()

    fast = get(manager, server.url, Deadline(0.3, "fast"))
    slow.join()

    assert fast[1] and not results["slow"][1]
    assert results["slow"][0] == BODY


def test_an_exchange_past_its_deadline_never_connects(server, manager):
    with cut_at(Deadline(0, "spent")) as cut:
        with pytest.raises(DeadlineExceeded):
            with cut.attaching():
                manager.request("GET", server.url)

    assert server.connections == 0


def test_the_sooner_deadline_wins_and_names_itself():
    run = Deadline(2, "the sync deadline", "GPULEDGER_SYNC_DEADLINE_SECONDS")
    request = Deadline(60, "the request deadline")

    assert request.sooner(run) is run
    assert run.sooner(request) is run
    assert request.sooner(None) is request
    assert str(run) == "the sync deadline of 2 s (GPULEDGER_SYNC_DEADLINE_SECONDS)"
    assert not Deadline.never().expired()
    assert Deadline(0, "now").expired()
