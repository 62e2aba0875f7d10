"""One human sentence per episode (``Episode.summary``)."""

from __future__ import annotations

from alerts.choices import Rule
from alerts.models import Episode
from alerts.rules import WorkloadInfo
from quotas.words import words_for


def _duration(seconds: int) -> str:
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes / 60
    return f"{hours:.1f} h" if hours < 72 else f"{hours / 24:.1f} days"


def _queue_word(episode: Episode) -> str:
    """What the episode's queue's scheduler calls it ("ClusterQueue", "Queue"); read only for
    the queue rules' sentences."""
    queue = episode.cluster_queue if episode.cluster_queue_id else None
    return words_for(queue.scheduler if queue is not None else None).queue


def _gpus(value: float) -> str:
    return f"{value:g} GPU" + ("" if value == 1 else "s")


def describe(episode: Episode, workload: WorkloadInfo | None) -> str:
    """The episode in one sentence; a Volcano or KAI workload is named a PodGroup, a queue as
    its scheduler names it (``quotas.words``)."""
    evidence = episode.evidence or {}
    name = workload.path if workload is not None else episode.subject_key.split("/", 1)[-1]
    words = words_for(workload.scheduler if workload is not None else None)
    held = _duration(episode.held_seconds)
    match episode.rule:
        case Rule.IDLE_WORKLOAD:
            signal = (
                "GR_ENGINE_ACTIVE (SM_ACTIVE not exported)"
                if evidence.get("fallback")
                else "SM_ACTIVE"
            )
            threshold = evidence.get("idle_threshold", 0.01)
            return (
                f"{words.workload} {name}: {_gpus(episode.gpus)} allocated, idle ({signal} < "
                f"{threshold:g}) for {held}."
            )
        case Rule.GHOST_RESERVATION:
            running = evidence.get("pods_running", 0)
            expected = evidence.get("pods_expected", 0)
            return (
                f"{words.workload} {name} holds {_gpus(episode.gpus)} of quota with {running} of "
                f"{expected} pods running, for {held}."
            )
        case Rule.BORROWING_WHILE_IDLE:
            queue = episode.subject_key.split("/", 1)[-1]
            lenders = evidence.get("lenders") or []
            idle_workloads = evidence.get("idle_workloads") or []
            source = f" from {', '.join(lenders)}" if lenders else ""
            idle_names = f" ({', '.join(idle_workloads[:5])})" if idle_workloads else ""
            borrowed = _gpus(evidence.get("borrowed", episode.gpus))
            return (
                f"{_queue_word(episode)} {queue} borrows {borrowed}"
                f"{source} while {_gpus(evidence.get('idle', 0.0))} of its admitted GPUs idle"
                f"{idle_names}, for {held}."
            )
        case Rule.TELEMETRY_MISSING:
            what = episode.subject_key.split(":", 1)[0]
            subject = episode.subject_key.split("/", 1)[-1]
            if what == "node":
                return (
                    f"Node {subject}: the DCGM exporter sends nothing; {_gpus(episode.gpus)} "
                    f"allocated without telemetry for {held}."
                )
            if what == "gpu":
                return f"GPU {subject}: allocated, no DCGM samples (or NaN) for {held}."
            return f"Pod {subject}: {_gpus(episode.gpus)} without any DCGM series for {held}."
        case Rule.QUEUE_SLO_BREACHED:
            queue = episode.subject_key.split("/", 1)[-1]
            statistic = evidence.get("statistic", "p95")
            target = _duration(int(evidence.get("target_seconds") or 0))
            worst = evidence.get("worst_seconds")
            days = int(evidence.get("breached_days") or 0)
            over = f" (worst {_duration(int(worst))})" if worst is not None else ""
            return (
                f"{_queue_word(episode)} {queue}: {statistic} wait over its objective of {target}"
                f"{over} on {days} day{'' if days == 1 else 's'}."
            )
        case Rule.SERVING_OVERPROVISIONED:
            return _overprovisioned(episode, evidence)
    return episode.subject_key


# Words for the knee's units (``serving.knee``).
KNEE_UNITS = {
    "output_tokens_per_second": "output tokens/s",
    "requests_per_second": "requests/s",
}


def knee_unit(unit: str) -> str:
    return KNEE_UNITS.get(unit, unit)


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _overprovisioned(episode: Episode, evidence: dict) -> str:
    name = evidence.get("deployment") or episode.subject_key.split("/", 1)[-1]
    days = int(evidence.get("counted_days") or 0)
    share = float(evidence.get("share_below") or 0.0)
    per_replica = float(evidence.get("knee_per_replica") or 0.0)
    unit = knee_unit(str(evidence.get("knee_unit", "")))
    fraction = float(evidence.get("fraction") or 0.5)
    return (
        f"Serving {name}: below {fraction:.0%} of its knee ({_rate(per_replica)} {unit} per "
        f"replica) in {share:.0%} of its judged hours on {days} day{'' if days == 1 else 's'} "
        f"in a row, holding {_gpus(round(episode.gpus, 1))}."
    )
