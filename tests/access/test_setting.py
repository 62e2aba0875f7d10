"""GPULEDGER_TEAM_VISIBILITY: private by default, public on request, anything else refused."""

from __future__ import annotations

import pytest

from tests.config.test_settings import REAL_KEY, load_settings

PROBE = "import config.settings as s; print(s.GPULEDGER_TEAM_VISIBILITY)"


def run(**env: str):
    return load_settings(PROBE, SECRET_KEY=REAL_KEY, **env)


def test_team_visibility_defaults_to_private(monkeypatch):
    monkeypatch.delenv("GPULEDGER_TEAM_VISIBILITY", raising=False)
    result = run()

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "private"


@pytest.mark.parametrize("raw", ["public", " Public "])
def test_team_visibility_can_be_public(raw):
    result = run(GPULEDGER_TEAM_VISIBILITY=raw)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "public"


def test_an_unknown_team_visibility_is_refused():
    result = run(GPULEDGER_TEAM_VISIBILITY="everyone")

    assert result.returncode != 0
    assert "GPULEDGER_TEAM_VISIBILITY='everyone' must be private or public" in result.stderr
