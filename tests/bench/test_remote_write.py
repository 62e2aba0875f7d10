"""``bench/collect.py --load remote-write`` loads the very fleet promtool loads.

A small fleet (idle and held GPUs, pods, Kueue queues; more than an hour, so several blocks of
scrapes and a partial last one) is imported by promtool into one Prometheus and streamed by
remote write into another; every metric then answers the same raw samples and the same range
queries from both, and the count queries find every sample.
"""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import requests

from tests.prometheus_server import PrometheusServer, create_blocks, require_binary

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from _fleet import Fleet, write_openmetrics  # noqa: E402
from _remote_write import (  # noqa: E402
    RemoteWriteError,
    count_stored,
    encode_times,
    stream,
    wait_ingested,
)

END = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
MINUTES = 70

pytestmark = pytest.mark.integration


def query(server: PrometheusServer, path: str, **params: str) -> list[dict]:
    answer = requests.get(f"{server.url}/api/v1/{path}", params=params, timeout=30)
    answer.raise_for_status()
    body = answer.json()
    assert body["status"] == "success", body
    return sorted(body["data"]["result"], key=lambda r: sorted(r["metric"].items()))


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory):
    require_binary("prometheus")
    require_binary("promtool")
    work = tmp_path_factory.mktemp("remote-write")
    fleet = Fleet(80, MINUTES, END, queues=3)
    write_openmetrics(fleet, work / "fleet.om")
    create_blocks(work / "fleet.om", work / "promtool")
    imported = PrometheusServer(work / "promtool").start()
    written = PrometheusServer(work / "remote", remote_write_receiver=True).start()
    try:
        stream(fleet, written.url)
        wait_ingested(written.url, fleet, END.timestamp(), timeout=30)
        yield fleet, imported, written
    finally:
        imported.cleanup()
        written.cleanup()


def test_every_metric_answers_the_same_both_ways(servers):
    fleet, imported, written = servers
    names = [family.name for family in fleet.families if family.series]
    for server in (imported, written):
        answer = requests.get(f"{server.url}/api/v1/label/__name__/values", timeout=10).json()
        assert sorted(answer["data"]) == sorted(names)
    end = END.timestamp()
    for name in names:
        raw = {
            server: query(server, "query", query=f"{name}[{MINUTES + 5}m]", time=f"{end:.3f}")
            for server in (imported, written)
        }
        assert raw[imported] == raw[written], name
        assert sum(len(r["values"]) for r in raw[written]) == len(
            fleet.families[names.index(name)].series
        ) * (MINUTES * 2), name
        ranged = {
            server: query(
                server,
                "query_range",
                query=name,
                start=f"{end - MINUTES * 60:.3f}",
                end=f"{end:.3f}",
                step="17",
            )
            for server in (imported, written)
        }
        assert ranged[imported] == ranged[written], name
        assert ranged[written], name


def test_the_values_are_the_fleets_and_the_counts_add_up(servers, monkeypatch):
    fleet, imported, written = servers
    family = fleet.families[0]
    first, count = next(fleet.blocks())
    expected = family.values(first, count)
    answer = query(
        written,
        "query",
        query=f"{family.name}[{count * 30 - 1}s]",
        time=f"{fleet.times(first, count)[-1]:.3f}",
    )
    by_uuid = {r["metric"]["UUID"]: [float(v) for _, v in r["values"]] for r in answer}
    for index, labels in enumerate(family.series):
        assert by_uuid[dict(labels)["UUID"]] == expected[index].tolist()
    # Idle GPUs carry no pod labels and stay near 0; held ones carry them.
    assert any("exported_pod" not in r["metric"] for r in answer)
    assert count_stored(imported.url, fleet, END.timestamp()) == fleet.samples()
    assert count_stored(written.url, fleet, END.timestamp()) == fleet.samples()
    # Counted an hour per query (a month is counted a day per query): the same total.
    monkeypatch.setattr("_remote_write.COUNT_HOURS", 1)
    assert count_stored(written.url, fleet, END.timestamp()) == fleet.samples()


def test_a_refused_request_raises(servers):
    fleet, imported, _ = servers
    # The promtool one runs without the receiver: its refusal is not swallowed.
    with pytest.raises(RemoteWriteError, match="HTTP 404"):
        stream(Fleet(8, 1, END), imported.url)


def test_timestamps_without_six_byte_varints_are_refused():
    with pytest.raises(ValueError, match="6-byte varints"):
        encode_times(np.array([1_000], dtype=np.int64))
    encoded = encode_times(np.array([1_767_614_411_000], dtype=np.int64))
    number = sum(int(byte & 0x7F) << (7 * i) for i, byte in enumerate(encoded[0]))
    assert number == 1_767_614_411_000
    assert list(encoded[0][:5] & 0x80) == [0x80] * 5 and encoded[0][5] < 0x80


def test_the_bench_loads_by_remote_write_and_reports_the_cost(tmp_path):
    require_binary("prometheus")
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "bench/collect.py", "--load-only", "--load", "remote-write"]
    command += ["--backfill-gpus", "16", "--deep-hours", "1", "--queues", "2"]

    def load() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, "--work", str(tmp_path)],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    result = load()

    assert result.returncode == 0, result.stderr[-2000:]
    # 16 GPUs x 6 fields + 2 pods x 9 kube series + 2 queues x 15 Kueue series, 120 scrapes.
    assert "16 GPUs x 60 min by remote write: 17,280 samples (144 series)" in result.stdout
    assert re.search(r"TSDB \d+ MiB on disk .* Prometheus RSS \d+ MiB", result.stdout)
    assert (tmp_path / "tsdb-rw-16-2-60m.loaded").exists()
    # A later run on the same work directory reuses the loaded TSDB.
    again = load()
    assert again.returncode == 0, again.stderr[-2000:]
    assert "16 GPUs: reusing" in again.stdout
