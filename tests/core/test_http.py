"""core.http: the requests adapter every HTTP client mounts is cut at a deadline, no retries."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import requests
from urllib3.util.retry import Retry

from core.deadlines import Deadline, cut_at
from core.http import CutAdapter
from tests.core.test_deadlines import BODY, RawServer


@pytest.fixture
def server() -> Iterator[RawServer]:
    raw = RawServer()
    yield raw
    raw.close()


def session_with(adapter: CutAdapter) -> requests.Session:
    session = requests.Session()
    session.mount("http://", adapter)
    return session


def test_a_prompt_answer_comes_through(server):
    session = session_with(CutAdapter())

    with cut_at(Deadline(5, "test")) as cut, cut.attaching():
        response = session.get(server.url, timeout=30)

    assert response.content == BODY


def test_a_dripping_answer_is_cut_at_the_deadline(server):
    # Given a server that sends a byte every 0.5 s, far longer in all than the deadline
    server.drip = 0.5
    session = session_with(CutAdapter())
    started = time.monotonic()

    # When the exchange runs under a 1 s deadline with a read timeout far above it
    with cut_at(Deadline(1, "test")) as cut:
        with pytest.raises(requests.RequestException), cut.attaching():
            session.get(server.url, timeout=30)

    # Then it ends near the deadline, cut there, on the one connection it opened
    assert cut.fired
    assert time.monotonic() - started < 5
    assert server.connections == 1


def test_it_makes_no_retries_unless_told():
    assert CutAdapter().max_retries.total == 0
    assert CutAdapter(max_retries=Retry(total=2)).max_retries.total == 2
