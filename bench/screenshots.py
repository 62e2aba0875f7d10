"""Screenshots of the main pages of a running GPU Ledger (for docs/screenshots/ and the README).

    .venv/bin/python bench/screenshots.py --url http://127.0.0.1:8000 --user admin --password …

Logs in through the login form, opens each page in headless Chromium, waits until every chart
has drawn (``data-chart-state`` set by static/js/charts.js), and writes one PNG per page. The
node and GPU pages are the first ones linked from the fleet map. Pages that answer 404 (a quota
page not deployed yet) are skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import urljoin

from playwright.sync_api import Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# (file name, path); node and GPU pages are found on the fleet map.
PAGES = [
    ("overview", "/?range=7d"),
    ("fleet-map", "/fleet/map/"),
    ("busy-not-working", "/fleet/busy/?range=7d"),
    ("teams", "/teams/?range=7d"),
    ("cohorts", "/cohorts/?range=7d"),
    ("queues", "/queues/?range=7d"),
    ("queue-levels", "/queue-levels/?range=7d"),
    ("workloads", "/workloads/?range=7d&sort=cost"),
    ("chargeback", "/chargeback/?range=7d"),
    ("alerts", "/alerts/?range=7d"),
    # Detail pages of the simulated fleet (`make demo`); skipped elsewhere when they 404.
    ("team", "/teams/nlp/?range=7d"),
    ("cohort", "/cohorts/demo/research/?range=7d"),
    ("cluster-queue", "/queues/demo/speech/?range=7d"),
]


def wait_for_charts(page: Page, timeout_ms: int = 30000) -> None:
    page.wait_for_function(
        """() => Array.from(document.querySelectorAll('[data-chart-url]'))
              .every(el => ['ready', 'error'].includes(el.getAttribute('data-chart-state')))""",
        timeout=timeout_ms,
    )
    page.wait_for_timeout(300)  # Plotly transitions


def shoot(page: Page, base: str, path: str, out: Path) -> bool:
    response = page.goto(urljoin(base, path), wait_until="domcontentloaded")
    if response is None or response.status != 200:
        status = response.status if response else "no answer"
        print(f"skip {path}: HTTP {status}")
        return False
    wait_for_charts(page)
    page.screenshot(path=str(out), full_page=True)
    print(f"wrote {out}")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--user", default=os.environ.get("GPULEDGER_DEMO_USER", "admin"))
    parser.add_argument("--password", default=os.environ.get("GPULEDGER_DEMO_PASSWORD", ""))
    parser.add_argument("--out", default=str(Path(__file__).parent.parent / "docs/screenshots"))
    parser.add_argument("--width", type=int, default=1440)
    args = parser.parse_args()
    if not args.password:
        parser.error("--password (or GPULEDGER_DEMO_PASSWORD) is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        page = browser.new_page(viewport={"width": args.width, "height": 900})
        page.goto(urljoin(args.url, "/login/"))
        page.fill("input[name=username]", args.user)
        page.fill("input[name=password]", args.password)
        page.click("button[type=submit]")
        page.wait_for_load_state("domcontentloaded")
        if "/login/" in page.url:
            print("login failed: check --user and --password", file=sys.stderr)
            return 1

        for name, path in PAGES:
            shoot(page, args.url, path, out / f"{name}.png")
            if name == "cluster-queue":
                # The demo's preempted-and-readmitted job has the richest timeline.
                page.goto(urljoin(args.url, "/teams/speech/?range=7d"))
                workload_link = page.locator("a[href^='/workloads/']:has-text('asr-finetune')")
                if not workload_link.count():
                    workload_link = page.locator("a[href^='/workloads/']")
                workload_link = workload_link.first
                if workload_link.count():
                    href = workload_link.get_attribute("href") or ""
                    # No range: a workload page opens on the workload's whole life.
                    shoot(page, args.url, href.split("?")[0], out / "workload.png")

        page.goto(urljoin(args.url, "/fleet/map/"), wait_until="domcontentloaded")
        node_link = page.locator("[data-testid=nodes-table] a").first
        if node_link.count():
            node_path = node_link.get_attribute("href") or ""
            if shoot(page, args.url, node_path, out / "node.png"):
                gpu_link = page.locator("[data-testid=gpus-table] a").first
                if gpu_link.count():
                    shoot(page, args.url, gpu_link.get_attribute("href") or "", out / "gpu.png")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
