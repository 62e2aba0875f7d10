"""Alertmanager labels and annotations carry tenants' names without control characters."""

from __future__ import annotations

import pytest
from django.utils import timezone

from notifications.messages import alertmanager_alerts

pytestmark = pytest.mark.django_db

ESC = "\x1b"
RLO = "\u202e"  # right-to-left override: shows "gnp.exe" as "exe.png"
ZWSP = "\u200b"


def test_control_characters_are_stripped_from_labels_and_annotations(make_episode, world):
    world.workload.name = f"train{ESC}[31m\nseverity=none"
    world.workload.save()
    world.team.name = f"vi{ZWSP}sion{RLO}"
    world.team.save()
    episode = make_episode(
        namespace="ml\tprod",
        summary=f"Workload idle\r\nFAKE: resolved{ESC}[0m",
    )

    (alert,) = alertmanager_alerts(episode, timezone.now(), 60, 3)

    labels, annotations = alert["labels"], alert["annotations"]
    assert labels["workload"] == "train [31m severity=none"
    assert labels["team"] == "vision"
    assert labels["namespace"] == "ml prod"
    assert annotations["summary"] == "Workload idle  FAKE: resolved [0m"
    for text in [*labels.values(), *annotations.values()]:
        assert not any(ch in text for ch in (ESC, RLO, ZWSP, "\r", "\t"))
    # The description keeps one detail per line, and no name adds a line of its own.
    lines = annotations["description"].split("\n")
    assert lines[0] == "Workload idle  FAKE: resolved [0m"
    assert not any(line.startswith(("severity=none", "FAKE")) for line in lines)
