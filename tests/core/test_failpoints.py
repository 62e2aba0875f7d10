"""core.failpoints: a no-op unless GPULEDGER_FAILPOINT names the point, then SIGKILL at its hit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from core.failpoints import ENV, failpoint

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
from core.failpoints import failpoint
for hit in range(1, 4):
    failpoint("other")
    failpoint("rollup.insert")
    print(hit, flush=True)
"""


def run(spec: str | None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != ENV}
    if spec is not None:
        env[ENV] = spec
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_it_does_nothing_when_no_point_or_another_point_is_named(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    failpoint("rollup.insert")
    monkeypatch.setenv(ENV, "collect.write")
    failpoint("rollup.insert")
    assert run(None).stdout.split() == ["1", "2", "3"]


def test_it_kills_the_process_at_the_named_hit():
    first = run("rollup.insert")
    assert first.returncode == -9 and first.stdout.split() == []
    second = run("rollup.insert:2")
    assert second.returncode == -9 and second.stdout.split() == ["1"]
    assert run("rollup.insert:9").stdout.split() == ["1", "2", "3"]
