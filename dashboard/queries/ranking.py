"""Teams ranked by a figure over a range, with names and links: the team tables and bar charts of
the overview and the busy page.

The figures come from the read layer (team-scope rollups grouped by the integer team id, a hash
aggregate); the names from one more query on the team table, so the scan carries no text
(grouping rollups by the text key sorted on disk at 100 teams × 30 days, bench/RESULTS.md).
Names are fleet-level facts every signed-in user may see; links go only to teams the user may
open (quotas.access).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from core.ranges import HourSpan
from dashboard.frame import quota_url
from ledger.choices import RollupScope
from ledger.figures import FIGURES, Figures
from ledger.models import HourlyRollup
from ledger.rollup import UNATTRIBUTED
from quotas.access import visible_team_ids
from quotas.models import Team


@dataclass
class TeamFigures:
    """One team's figures over a range (``figures``: the read layer's value, with the ratios)."""

    team_id: int | None
    key: str
    name: str
    figures: Figures
    url: str | None = None


def ranked_teams(
    span: HourSpan,
    user: Any,
    *,
    by: str = "allocated_gpu_hours",
    names: Iterable[str] = FIGURES,
    only_positive: bool = False,
) -> list[TeamFigures]:
    """Every team's figures over the hours ``span`` counts, largest ``by`` first (then by name).

    ``names`` limits the figures read; ``only_positive`` keeps the teams whose ``by`` is above 0.
    Two queries, whatever the number of teams and hours.
    """
    found: dict[int | None, Figures] = (
        HourlyRollup.objects.for_scope(RollupScope.TEAM)
        .covering(span)
        .figures(group_by=("team_id",), names=names)
    )
    teams: dict[int | None, tuple[str | None, str]] = {
        pk: (name, display)
        for pk, name, display in Team.objects.filter(
            pk__in=[pk for pk in found if pk is not None]
        ).values_list("pk", "name", "display_name")
    }
    allowed = visible_team_ids(user)
    rows = []
    for team_id, figures in found.items():
        if only_positive and getattr(figures, by) <= 0:
            continue
        name, display = teams.get(team_id, (None, ""))
        visible = name is not None and (allowed is None or team_id in allowed)
        rows.append(
            TeamFigures(
                team_id=team_id,
                key=name or UNATTRIBUTED,
                name=display or name or UNATTRIBUTED,
                figures=figures,
                url=quota_url("quotas:team-detail", name) if visible else None,
            )
        )
    rows.sort(key=lambda row: (-getattr(row.figures, by), row.key))
    return rows
