"""A ``serving_overprovisioned`` episode's evidence chart: the deployment's throughput per
replica hour by hour, in the knee's unit, against the knee and half of it, with the episode's
days shaded (``alerts.overprovisioned``). Hours without serving telemetry are gaps."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from alerts.models import Episode
from alerts.summary import knee_unit
from core import plotting
from dashboard.charts.parts import TIME_AXIS, episode_band, level_line
from serving.knee import OUTPUT_TOKENS, REQUESTS
from serving.models import ServingHour

# Shown before and after the episode.
MARGIN = timedelta(days=1)
HOUR = timedelta(hours=1)


def serving_evidence_figure(episode: Episode) -> dict[str, Any]:
    evidence = episode.evidence or {}
    unit = str(evidence.get("knee_unit") or OUTPUT_TOKENS)
    column = unit if unit in (OUTPUT_TOKENS, REQUESTS) else OUTPUT_TOKENS
    end = episode.resolved_at or episode.evaluated_until
    start, stop = episode.started_at - MARGIN, end + MARGIN
    stored = {
        row["hour"]: row
        for row in ServingHour.objects.filter(
            workload_id=episode.serving_workload_id, hour__gte=start, hour__lt=stop
        ).values("hour", "replica_hours", column)
    }
    moments: list[datetime] = []
    values: list[float | None] = []
    moment = start
    while moment < stop:
        row = stored.get(moment)
        throughput = row[column] if row is not None else None
        moments.append(moment)
        values.append(
            round(throughput / row["replica_hours"], 3)
            if row is not None and throughput is not None and row["replica_hours"] > 0
            else None
        )
        moment += HOUR
    words = knee_unit(unit)
    traces = (
        [plotting.line(f"{words} per replica", [plotting.iso(m) for m in moments], values)]
        if stored
        else []
    )
    shapes = [episode_band(episode.started_at, end)]
    knee = evidence.get("knee_per_replica")
    if isinstance(knee, int | float) and knee > 0:
        fraction = float(evidence.get("fraction") or 0.5)
        shapes += [level_line(float(knee)), level_line(knee * fraction, "dash")]
    layout = plotting.layout(
        "Throughput per replica against the knee (hourly)",
        x_title=TIME_AXIS,
        y_title=f"{words} per replica",
        xaxis={"type": "date", "range": [plotting.iso(start), plotting.iso(stop)]},
        shapes=shapes,
    )
    return plotting.figure(
        traces,
        layout,
        empty_message="No serving hours stored for this episode (pruned, or no telemetry).",
    )
