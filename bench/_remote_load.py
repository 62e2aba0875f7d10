"""Loading the bench's Prometheus by remote write (``bench/collect.py --load remote-write``), and
``--load-only``: the cost of loading the fleet either way, nothing else.

``load_remote_write`` starts Prometheus with its remote-write receiver on an empty TSDB in the
work directory, streams the fleet into it (bench/_remote_write.py), waits until count queries find
every sample, and only then measures: wall time and CPU of this process (generation, encoding,
compression, HTTP, all threads) and of Prometheus from its start, the TSDB's size on disk
(blocks, head chunks and write-ahead log) and Prometheus' resident memory (now and at its peak).
A TSDB loaded completely by an earlier run (``--work``) is reused as is.
"""

from __future__ import annotations

import os
import resource
import shutil
import time
from pathlib import Path
from typing import Any

from collect import END, process_cpu


def directory_bytes(path: Path) -> int:
    return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file())


def status_kib(pid: int, field: str) -> int | None:
    """A ``VmRSS``/``VmHWM`` line of /proc/<pid>/status, in KiB; None if unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def tsdb_sizes(tsdb: Path) -> dict[str, int]:
    sizes = {"total": directory_bytes(tsdb), "wal": 0, "chunks_head": 0}
    for part in ("wal", "chunks_head"):
        if (tsdb / part).exists():
            sizes[part] = directory_bytes(tsdb / part)
    sizes["blocks"] = sizes["total"] - sizes["wal"] - sizes["chunks_head"]
    return sizes


def load_remote_write(work: Path, gpus: int, minutes: int, queues: int) -> tuple[Any, dict]:
    from _fleet import Fleet
    from _remote_write import stream, wait_ingested

    from tests.prometheus_server import PrometheusServer

    tsdb = work / f"tsdb-rw-{gpus}-{queues}-{minutes}m"
    done = work / f"{tsdb.name}.loaded"
    if done.exists():
        print(f"  {gpus:,} GPUs: reusing {tsdb} (loaded by remote write)", flush=True)
        # Its write-ahead log is replayed first: minutes for a day at 50,000 GPUs.
        return PrometheusServer(tsdb, remote_write_receiver=True).start(ready_timeout=1800), {}
    shutil.rmtree(tsdb, ignore_errors=True)
    server = PrometheusServer(tsdb, remote_write_receiver=True).start()
    pid = server._process.pid  # type: ignore[union-attr]
    try:
        started = (time.perf_counter(), time.process_time(), process_cpu(pid))
        fleet = Fleet(gpus, minutes, END, queues=queues)
        sent = stream(fleet, server.url)
        streamed = time.perf_counter()
        stored = wait_ingested(server.url, fleet, END.timestamp())
        ended = (time.perf_counter(), time.process_time(), process_cpu(pid))
    except BaseException:
        server.cleanup()
        raise
    prometheus_cpu = None if ended[2] is None or started[2] is None else ended[2] - started[2]
    figures = {
        "gpus": gpus,
        "minutes": minutes,
        "samples": stored,
        "series": sum(len(family.series) for family in fleet.families),
        "wall": ended[0] - started[0],
        "stream_wall": streamed - started[0],
        "count_wall": ended[0] - streamed,
        "cpu": ended[1] - started[1],
        "prometheus_cpu": prometheus_cpu,
        "tsdb": tsdb_sizes(tsdb),
        "rss_kib": status_kib(pid, "VmRSS"),
        "peak_rss_kib": status_kib(pid, "VmHWM"),
        "load_average": os.getloadavg(),
        "own_peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        **sent,
    }
    done.write_text("ok\n")
    report_remote_write(figures)
    return server, figures


def report_remote_write(figures: dict) -> None:
    mib = 2**20
    sizes = figures["tsdb"]
    per_million = figures["samples"] / 1e6
    prometheus_cpu = figures["prometheus_cpu"]
    print(
        f"  {figures['gpus']:,} GPUs x {figures['minutes']} min by remote write: "
        f"{figures['samples']:,} samples ({figures['series']:,} series) generated and ingested in "
        f"{figures['wall']:.1f} s wall ({figures['stream_wall']:.1f} s streaming, "
        f"{figures['count_wall']:.1f} s count queries); CPU: this process "
        f"{figures['cpu']:.1f} s (peak RSS {figures['own_peak_rss_kib'] / 1024:.0f} MiB), "
        "Prometheus "
        f"{'n/a' if prometheus_cpu is None else f'{prometheus_cpu:.1f} s'}",
        flush=True,
    )
    print(
        f"    {figures['requests']:,} requests, {figures['bytes_sent'] / mib:.0f} MiB sent "
        f"(snappy); TSDB {sizes['total'] / mib:.0f} MiB on disk (blocks "
        f"{sizes['blocks'] / mib:.0f}, head chunks {sizes['chunks_head'] / mib:.0f}, WAL "
        f"{sizes['wal'] / mib:.0f}); Prometheus RSS {(figures['rss_kib'] or 0) / 1024:.0f} MiB "
        f"(peak {(figures['peak_rss_kib'] or 0) / 1024:.0f} MiB); per million samples: "
        f"{figures['wall'] / per_million:.2f} s wall, {figures['cpu'] / per_million:.2f} s + "
        f"{(prometheus_cpu or 0) / per_million:.2f} s CPU; load average "
        f"{figures['load_average'][0]:.1f}",
        flush=True,
    )


def load_only(work: Path, gpus: int, minutes: int, queues: int, load: str) -> None:
    """``--load-only``: load the fleet one way, print what it cost, stop Prometheus."""
    if load == "remote-write":
        server, _ = load_remote_write(work, gpus, minutes, queues)
        server.cleanup()
        return
    from collect import write_fleet

    from tests.prometheus_server import create_blocks

    om = work / f"fleet-{gpus}.om"
    tsdb = work / f"tsdb-load-only-{gpus}-{queues}-{minutes}m"
    shutil.rmtree(tsdb, ignore_errors=True)
    started = (time.perf_counter(), time.process_time())
    samples = write_fleet(om, gpus, minutes, queues=queues)
    generated = time.perf_counter()
    text_bytes = om.stat().st_size
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    create_blocks(om, tsdb)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    ended = (time.perf_counter(), time.process_time())
    om.unlink()
    promtool_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(
        f"  {gpus:,} GPUs x {minutes} min by promtool: {samples:,} samples, "
        f"{text_bytes / 2**20:.0f} MiB of text generated in {generated - started[0]:.1f} s, "
        f"imported in {ended[0] - generated:.1f} s; CPU: this process "
        f"{ended[1] - started[1]:.1f} s, promtool {promtool_cpu:.1f} s; TSDB "
        f"{directory_bytes(tsdb) / 2**20:.0f} MiB; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    shutil.rmtree(tsdb, ignore_errors=True)
