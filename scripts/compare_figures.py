"""Compare what two running GPU Ledger servers show for the same data (a refactor's safety net).

Start the code before and after a change on copies of one database (the after copy migrated), then:

    python scripts/compare_figures.py http://127.0.0.1:8401 http://127.0.0.1:8402 \
        --user admin --password … --start 2026-11-23T00:00:00Z --end 2026-11-30T00:00:00Z

It fetches the chargeback API for every grouping (whole range and per hour), the OpenCost
allocation API, and the visible text of every list page and of a few detail pages of each kind
(team, cohort, queue, workload, node, GPU) for that custom range, and prints each difference.
Exit status 1 when anything differs. Only loopback URLs are accepted.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from html.parser import HTMLParser
from urllib.parse import urlparse

import requests

GROUPS = (
    "team",
    "cluster_queue",
    "cohort",
    "local_queue",
    "namespace",
    "workload",
    "node",
    "flavor",
    "cluster",
)
PAGES = (
    "/",
    "/fleet/map/",
    "/fleet/busy/",
    "/teams/",
    "/cohorts/",
    "/queues/",
)


class _Text(HTMLParser):
    """The visible text of a page, one chunk per line; scripts and styles dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style"):
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        text = " ".join(data.split())
        if text and not self._skip:
            self.lines.append(text)


def login(base: str, user: str, password: str) -> requests.Session:
    session = requests.Session()
    session.get(f"{base}/login/", timeout=30)
    response = session.post(
        f"{base}/login/",
        data={
            "username": user,
            "password": password,
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        headers={"Referer": f"{base}/login/"},
        timeout=30,
    )
    response.raise_for_status()
    if "sessionid" not in session.cookies:
        sys.exit(f"login to {base} failed")
    return session


def page_text(session: requests.Session, url: str) -> list[str]:
    response = session.get(url, timeout=60)
    parser = _Text()
    parser.feed(response.text)
    # Freshness ("3 minutes ago") depends on the clock, not on the data.
    return [f"HTTP {response.status_code}"] + [
        re.sub(r"\b\d+ (second|minute|hour|day)s? ago\b", "… ago", line) for line in parser.lines
    ]


def detail_pages(session: requests.Session, base: str, per_kind: int) -> list[str]:
    """Paths of a few detail pages of each kind, found through the read API."""

    def first(kind: str) -> list[dict]:
        answer = session.get(f"{base}/api/v1/{kind}/", params={"limit": per_kind}, timeout=60)
        return answer.json()["results"]

    return [
        *(f"/teams/{row['name']}/" for row in first("teams")),
        *(f"/cohorts/{row['cluster']}/{row['name']}/" for row in first("cohorts")),
        *(f"/queues/{row['cluster']}/{row['name']}/" for row in first("cluster-queues")),
        *(f"/workloads/{row['id']}/" for row in first("workloads")),
        *(f"/fleet/nodes/{row['id']}/" for row in first("nodes")),
        *(f"/fleet/gpus/{row['id']}/" for row in first("gpus")),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--user", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--start", required=True)
    parser.add_argument("--end", required=True)
    parser.add_argument("--extra-page", action="append", default=[], help="More page paths.")
    parser.add_argument(
        "--details", type=int, default=3, help="Detail pages of each kind (default 3)."
    )
    args = parser.parse_args()
    for base in (args.before, args.after):
        if urlparse(base).hostname not in ("127.0.0.1", "localhost", "::1"):
            sys.exit(f"{base}: only loopback servers")
    sessions = {base: login(base, args.user, args.password) for base in (args.before, args.after)}
    window = {"start": args.start, "end": args.end}
    differences = 0
    compared = 0

    def compare(label: str, before: list[str], after: list[str]) -> None:
        nonlocal differences, compared
        compared += 1
        if before != after:
            differences += 1
            print(f"--- {label} differs")
            for line in difflib.unified_diff(before, after, "before", "after", lineterm="", n=1):
                print(line)

    def api(path: str, params: dict[str, str]) -> None:
        answers = []
        for base in (args.before, args.after):
            response = sessions[base].get(f"{base}{path}", params=params, timeout=120)
            answers.append(json.dumps(response.json(), indent=1, sort_keys=True).splitlines())
        compare(f"{path} {params}", *answers)

    for group in GROUPS:
        for step in ("none", "hour"):
            api("/api/v1/chargeback/", {**window, "group_by": group, "step": step})
    api("/api/v1/allocation", {"window": f"{args.start},{args.end}", "aggregate": "namespace"})
    custom = f"range=custom&start={args.start}&end={args.end}"
    details = detail_pages(sessions[args.before], args.before, args.details)
    for path in (*PAGES, *details, *args.extra_page):
        url = f"{path}{'&' if '?' in path else '?'}{custom}"
        compare(
            f"page {url}",
            page_text(sessions[args.before], f"{args.before}{url}"),
            page_text(sessions[args.after], f"{args.after}{url}"),
        )
    print(f"{compared} answers compared, {differences} differ")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
