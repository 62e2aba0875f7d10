"""Teams ranked by a figure over a range, with names and links: the team tables and bar charts of
the overview and the busy page.

The figures come from the read layer (team-scope rollups grouped by the integer team id, a hash
aggregate); the names from one more query on the team table, so the scan carries no text
(grouping rollups by the text key sorted on disk at 100 teams × 30 days, bench/RESULTS.md).
Which teams appear by name is ``quotas.access``'s policy: ``allowed`` is the request's
``visible_team_ids`` (None: every team, each linked to its page); the teams outside it are
summed into one "Other teams (N)" row with no name and no link, so they count but cannot be
told apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from core.ranges import HourSpan
from dashboard.frame import quota_url
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from ledger.range_figures import FIGURES, Figures
from ledger.rollup import UNATTRIBUTED
from quotas.access import other_teams_label, sees_team
from quotas.models import Team


@dataclass
class TeamFigures:
    """One team's figures over a range (``figures``: the read layer's value, with the ratios)."""

    team_id: int | None
    key: str
    name: str
    figures: Figures
    url: str | None = None
    # The row summing the teams the user may not see (``team_id`` and ``url`` None).
    others: bool = False


def ranked_teams(
    span: HourSpan,
    allowed: set[int] | None,
    *,
    by: str = "allocated_gpu_hours",
    names: Iterable[str] = FIGURES,
    only_positive: bool = False,
) -> list[TeamFigures]:
    """Every visible team's figures over the hours ``span`` counts, largest ``by`` first (then
    by name), and last the teams ``allowed`` hides, summed in one row (when there are any).

    ``names`` limits the figures read; ``only_positive`` keeps the rows whose ``by`` is above 0.
    Two queries, whatever the number of teams and hours.
    """
    found: dict[int | None, Figures] = (
        HourlyRollup.objects.for_scope(RollupScope.TEAM)
        .covering(span)
        .figures(group_by=("team_id",), names=names)
    )
    shown = [pk for pk in found if pk is not None and sees_team(allowed, pk)]
    teams: dict[int | None, tuple[str | None, str]] = {
        pk: (name, display)
        for pk, name, display in Team.objects.filter(pk__in=shown).values_list(
            "pk", "name", "display_name"
        )
    }
    rows = []
    hidden = []
    for team_id, figures in found.items():
        if not sees_team(allowed, team_id):
            hidden.append(figures)
            continue
        if only_positive and getattr(figures, by) <= 0:
            continue
        name, display = teams.get(team_id, (None, ""))
        rows.append(
            TeamFigures(
                team_id=team_id,
                key=name or UNATTRIBUTED,
                name=display or name or UNATTRIBUTED,
                figures=figures,
                url=quota_url("dashboard:team-detail", name) if name is not None else None,
            )
        )
    rows.sort(key=lambda row: (-getattr(row.figures, by), row.key))
    if hidden:
        summed = Figures.sum(hidden)
        if not only_positive or getattr(summed, by) > 0:
            label = other_teams_label(len(hidden))
            rows.append(TeamFigures(None, label, label, summed, others=True))
    return rows
