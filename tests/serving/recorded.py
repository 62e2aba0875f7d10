"""Recorded /metrics texts of inference servers (tests/fixtures/serving/) as Prometheus data.

``parse_exposition`` reads a text exposition into (sample name, labels, value, counter-like);
``write_ramp`` writes one hour of one-a-minute samples of it for ``promtool`` backfill: counters
(and histogram buckets, sums and counts) climb evenly from 0 at the hour's first minute to the
recorded value at its end, so ``increase()`` over the hour is the recorded value (a series that
starts at 0 is not extrapolated back); gauges hold the recorded value. Each pod's series get the
``namespace`` / ``pod`` target labels a Kubernetes scrape adds.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "serving"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    counter: bool


def parse_exposition(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition; counter-like when its family is a counter or
    a histogram (buckets, sum and count all only grow)."""
    kinds: dict[str, str] = {}
    samples: list[Sample] = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            kinds[name] = kind.strip()
            continue
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"not a sample line: {line!r}")
        name, labels, value = match.group(1), match.group(2) or "", match.group(3)
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and kinds.get(name[: -len(suffix)]) == "histogram":
                family = name[: -len(suffix)]
        samples.append(
            Sample(
                name=name,
                labels=tuple(_LABEL.findall(labels)),
                value=float(value),
                counter=kinds.get(family) in ("counter", "histogram"),
            )
        )
    return samples


def recorded(name: str) -> list[Sample]:
    return parse_exposition((FIXTURES / name).read_text())


def series_by_name(
    pods: Mapping[tuple[str, str], Iterable[Sample]],
) -> dict[str, list[tuple[dict[str, str], Sample]]]:
    """Sample name -> [(labels with namespace/pod, sample)] over every pod."""
    by_name: dict[str, list[tuple[dict[str, str], Sample]]] = defaultdict(list)
    for (namespace, pod), samples in pods.items():
        for sample in samples:
            labels = {**dict(sample.labels), "namespace": namespace, "pod": pod}
            by_name[sample.name].append((labels, sample))
    return by_name


def ramp_value(sample: Sample, minute: int) -> float:
    """The value at ``minute`` (1..60) of the hour: counters 0 -> recorded, gauges constant."""
    if not sample.counter:
        return sample.value
    return sample.value * (minute - 1) / 59
